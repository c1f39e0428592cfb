// Schedules in timelines: the NVTX convention for stash and restore events, and turning a
// captured timeline back into a schedule file (`offloadkit schedule-from-trace`).
//
// The convention (traces/SCHEDULE_FORMAT.md, "Schedules in NVTX"): NVTX marks in the domain
// "offloadkit" (the default domain is accepted as well, for emitters such as torch.cuda.nvtx.mark
// that have no domains), each message one event:
//   offloadkit.schedule version=1 pipeline_size=P pipeline_rank=R virtual_stages=V layers=L
//       microbatches=M max_rows=N page_rows=G row_bytes=B[,B...] [name=TEXT]   (starts a recording)
//   offloadkit.pools device_pages=D pinned_pages=Q
//   offloadkit.stash vp=V layer=L mb=M rows=N       (payload, where present: N as an integer)
//   offloadkit.restore vp=V layer=L mb=M
// Recorders write these marks once the row counts have reached the host (schedule_recorder's
// device-row path, the Python ScheduleRecorder), so the row counts are the device's own values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "offloadkit/traces/schedule_format.hpp"
#include "offloadkit/traces/schedule_recorder.hpp"
#include "offloadkit/traces/timeline.hpp"

namespace offloadkit::traces {

/// The NVTX domain of the convention.
inline constexpr const char* schedule_nvtx_domain = "offloadkit";

/// The message texts of the convention.
std::string schedule_event_text(const schedule_shape& shape);
std::string pools_event_text(std::uint64_t device_pages, std::uint64_t pinned_pages);
std::string stash_event_text(stash::stash_key k, std::uint64_t rows);
std::string restore_event_text(stash::stash_key k);

/// Whether a record is an event of the convention (a mark in the domain, or in the default
/// domain, whose message starts with "offloadkit.").
[[nodiscard]] bool is_schedule_event(const record& r);

/// The recordings (each starts at an "offloadkit.schedule" event) in a timeline's events.
[[nodiscard]] std::size_t schedule_recordings(const timeline& t);

/// An event the conversion cannot place: which one (its index among the convention's events,
/// its time and text) and why.
class trace_schedule_error : public logic_error {
 public:
  trace_schedule_error(std::size_t event, std::int64_t time_ns, std::string text,
                       std::string reason);
  [[nodiscard]] std::size_t event() const noexcept { return event_; }
  [[nodiscard]] const std::string& text() const noexcept { return text_; }
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }

 private:
  std::size_t event_;
  std::string text_;
  std::string reason_;
};

/// The schedule of recording `index` (0 = the first) of a timeline, in the order its events were
/// recorded, validated as `offloadkit replay` validates a file. Throws trace_schedule_error
/// naming the first event it cannot place (an unknown field, a key outside the shape, a restore
/// of a key never stashed, a payload that disagrees with rows=, ...), or when the timeline has no
/// such recording.
schedule_file schedule_from_timeline(const timeline& t, std::size_t index = 0);

}  // namespace offloadkit::traces
