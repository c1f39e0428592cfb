// The optimized offloader: the whole tensor set goes through one cached pinned arena, laid out
// once per shape, with non-blocking copies issued back to back on the caller's stream (one per
// run of device-contiguous tensors, no synchronization between them). In steady state it makes
// no host allocation and copies nothing through pageable memory. Offload of one set and reload of
// another (two offloaders) can run at once on two streams, one per copy direction.
//
// A stream queues a bounded number of copies (about a thousand on current drivers); past that,
// issuing the next copy blocks the host until one finishes. A set of 2,000 separate tensors would
// then hold the host for half its offload, and a reload issued next on another stream would start
// only then. So a set of more runs than copies_per_stream spreads them over side streams, forked
// from the caller's stream by an event and joined back to it before the returned event: the
// stream order seen by the caller is the same, and the host returns once every copy is queued.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "offloadkit/arena/layout.hpp"
#include "offloadkit/arena/offloader.hpp"
#include "offloadkit/arena/pinned_arena.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::arena {

struct coalesced_options {
  /// Host alignment of each run of device-contiguous tensors (a power of two).
  std::size_t alignment = default_alignment;
  /// Device whose streams the copies run on (events are created there).
  int device = 0;
  /// Copies one offload() or reload() queues on one stream, at least 1: a set of more runs
  /// spreads them over up to max_copy_streams streams (the caller's and side streams).
  std::size_t copies_per_stream = 512;
  /// Streams one offload() or reload() uses at most, 1..64 (1: every copy on the caller's stream).
  std::size_t max_copy_streams = 8;
};

class coalesced_offloader final : public offloader {
 public:
  explicit coalesced_offloader(executor& ex, coalesced_options options = {});
  ~coalesced_offloader() override { do_release(); }

  /// Pinned allocations made so far; the steady state adds none.
  [[nodiscard]] std::size_t pinned_allocations() const noexcept { return arena_.allocations(); }
  /// Layout plans built so far; one per shape seen.
  [[nodiscard]] std::size_t plans_built() const noexcept { return plans_.plans_built(); }
  /// Copies issued by the last offload() or reload().
  [[nodiscard]] std::size_t last_copy_calls() const noexcept { return last_copies_; }
  /// Streams the last offload() or reload() issued its copies on (1: the caller's alone).
  [[nodiscard]] std::size_t last_copy_streams() const noexcept { return last_streams_; }

 private:
  event do_offload(tensor_set_view set, stream_ref s) override;
  event do_reload(tensor_set_view set, stream_ref s) override;
  void do_release() noexcept override;
  [[nodiscard]] bool do_released() const noexcept override { return released_; }
  [[nodiscard]] bool do_holds_copy() const noexcept override { return held_ != nullptr; }
  [[nodiscard]] std::size_t do_host_bytes() const noexcept override;
  [[nodiscard]] offload_promises do_promises() const noexcept override {
    return {true, true, true};
  }
  [[nodiscard]] std::string do_name() const override { return "coalesced offloader"; }

  /// Issues the runs between the arena and `set`; names the run that failed. Every copy it
  /// queued is ordered before the work queued on `s` after it returns or throws.
  void issue(const std::vector<copy_run>& runs, tensor_set_view set, bool to_host, stream_ref s);
  /// Side streams (and their events) for `lanes` streams in all on the device of `s`, forked from
  /// `s`: they start after the work queued on `s` so far.
  void fork_lanes(std::size_t lanes, stream_ref s);
  /// Orders the copies queued on the first `lanes - 1` side streams before later work on `s`.
  void join_lanes(std::size_t lanes, stream_ref s) noexcept;
  /// Marks the end of the work just queued on `s` as the arena's last use.
  void fence(stream_ref s) noexcept;
  event completion(stream_ref s);

  executor* ex_;
  extent_lookup extent_of_;  ///< tensors merge into one copy only within one allocation
  coalesced_options options_;
  layout_cache plans_;
  // Declared before the lease: the lease waits on this event when it frees, so it must outlive it.
  event last_use_;
  bool pending_ = false;  ///< last_use_ has been recorded (copies may be in flight)
  pinned_arena arena_;
  arena_lease lease_;
  std::shared_ptr<const layout_plan> held_;  ///< the plan of the complete host copy, if any
  std::size_t last_copies_ = 0;
  std::size_t last_streams_ = 0;
  bool released_ = false;
  // Side streams of sets of many runs, created on first use, on side_device_. side_fork_
  // (recorded on the caller's stream) orders them after it, side_joined_[k] the caller's stream
  // after side stream k.
  int side_device_ = -1;
  std::vector<stream> side_;
  event side_fork_;
  std::vector<event> side_joined_;
};

}  // namespace offloadkit::arena
