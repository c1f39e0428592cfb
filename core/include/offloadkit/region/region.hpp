// The graph-stable offload region interface: device memory that can be paused (its contents moved
// to the host and its device memory given back to the driver) and resumed, with graphs that use
// it registered against it. Implementations (reference_region, vmm_region) are final classes
// behind this one interface; the state machine and its errors live here so that every
// implementation, including a plugin, answers a bad transition the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "offloadkit/executor.hpp"

namespace offloadkit::region {

/// active: contents on the device at data(). paused: no device memory held, contents on the host
/// (or discarded). partial: a pause or resume failed midway; every byte is either on the device
/// or on the host, nothing is lost, and pause() or resume() completes the transition.
enum class region_state { active, paused, partial };

/// preserve: copy the contents out before releasing. discard: release without copying (a cache
/// that will be rebuilt); after resume() the contents are unspecified.
enum class pause_mode { preserve, discard };

const char* to_string(region_state s) noexcept;
const char* to_string(pause_mode m) noexcept;

struct region_config {
  std::size_t bytes = 0;  ///< usable bytes, at least 1
  int device = 0;         ///< the device the region lives on, whatever stream or device is current
  /// Physical memory is created, mapped and transferred in chunks of this size (rounded up to the
  /// device granularity); 0 picks default_chunk_bytes. Implementations without chunks ignore it.
  std::size_t chunk_bytes = 0;
  /// For an implementation whose pause mode is fixed when its memory is allocated (profile:
  /// pause modes fixed per allocation), the mode every pause of this region will use; a pause in
  /// the other mode throws unsupported_error and changes nothing. Unset: the caller may use both
  /// modes (implementations that provide both ignore it).
  std::optional<pause_mode> fixed_mode = std::nullopt;
};

inline constexpr std::size_t default_chunk_bytes = std::size_t{64} << 20;

/// What every region needs of its config, checked before it allocates: at least one byte, and a
/// device of `ex`. The out_of_range error names `who` (the implementation), the value and the
/// valid range.
void expect_valid_config(const region_config& c, const executor& ex, const char* who);

/// Captures the work of a graph that uses the region; `base` is the region's current address.
/// It issues work to `s` only (the stream is being captured) and must not synchronize.
using capture_fn = std::function<void(void* base, stream_ref s)>;
using graph_id = std::uint64_t;

/// One thread drives a region at a time; its calls are not synchronized against each other.
class offload_region {
 public:
  offload_region() = default;
  offload_region(const offload_region&) = delete;
  offload_region& operator=(const offload_region&) = delete;
  /// Destroying a region in any state frees its device memory, host copy, address range and
  /// registered graphs. Work still queued that uses the region must be finished by the caller.
  virtual ~offload_region() = default;

  /// The region's device address. Stable for the region's lifetime when address_stable();
  /// otherwise it may change on every resume().
  [[nodiscard]] void* data() const noexcept { return do_data(); }
  [[nodiscard]] std::size_t size() const noexcept { return do_size(); }
  [[nodiscard]] int device() const noexcept { return do_device(); }
  [[nodiscard]] region_state state() const noexcept { return do_state(); }
  [[nodiscard]] bool address_stable() const noexcept { return do_address_stable(); }
  /// Device memory the region holds while active (its size rounded up to what it allocates).
  [[nodiscard]] std::size_t footprint() const noexcept { return do_footprint(); }
  /// Graph captures performed so far (registrations plus any re-captures on resume).
  [[nodiscard]] std::size_t captures() const noexcept { return do_captures(); }

  /// Waits for the work queued on `s` (which must belong to device()), copies the contents to the
  /// host unless `mode` is discard, and releases the device memory. Valid when active or partial.
  /// Returns once the device memory is released. On failure the state is active or partial and
  /// no byte is lost.
  void pause(pause_mode mode, stream_ref s);
  /// pause(pause_mode::preserve, s).
  void pause(stream_ref s) { pause(pause_mode::preserve, s); }
  /// Brings the device memory back and copies the contents in, in order on `s`; work issued to
  /// `s` afterwards sees them. Valid when paused or partial. On failure the state is paused or
  /// partial, the host copy is intact and a later resume() can succeed.
  void resume(stream_ref s);

  /// Pauses this region (as pause(mode, s)) while resuming `in` (as in.resume(s)): an RL phase
  /// switch, where one region's copy out and the other's copy in can share the link, one copy
  /// direction each. Work issued to `s` afterwards sees in's contents. Parts already done are
  /// skipped (this region paused, or `in` active), so a swap that failed can be retried; valid
  /// when at least one part is left. `in` must be another region of the same device. On failure
  /// this region is active, partial or paused and `in` paused, partial or active, no byte of
  /// either is lost, and swap_with(), pause() or resume() finishes the job. The default pauses,
  /// then resumes; an implementation may interleave the two (the optimized region does, chunk by
  /// chunk on two streams, when `in` is one of its own).
  void swap_with(offload_region& in, pause_mode mode, stream_ref s);

  /// Captures `fn` on `s` into a graph kept with the region (valid when active). Implementations
  /// whose address is not stable re-capture it on every resume.
  graph_id register_graph(capture_fn fn, stream_ref s);
  /// Replays a registered graph on `s` (valid when active).
  void replay(graph_id g, stream_ref s);
  /// Destroys a registered graph; unknown ids are ignored.
  void unregister_graph(graph_id g) noexcept { do_unregister_graph(g); }

 protected:
  /// Called with `in` distinct, of the same device, and at least one part left. The default
  /// pauses this region, then resumes `in` (an override may call it for the pairs it does not
  /// interleave itself).
  virtual void do_swap(offload_region& in, pause_mode mode, stream_ref s);

 private:
  void expect_stream(stream_ref s, const char* call) const;

  [[nodiscard]] virtual void* do_data() const noexcept = 0;
  [[nodiscard]] virtual std::size_t do_size() const noexcept = 0;
  [[nodiscard]] virtual int do_device() const noexcept = 0;
  [[nodiscard]] virtual region_state do_state() const noexcept = 0;
  [[nodiscard]] virtual bool do_address_stable() const noexcept = 0;
  [[nodiscard]] virtual std::size_t do_footprint() const noexcept = 0;
  [[nodiscard]] virtual std::size_t do_captures() const noexcept = 0;
  virtual void do_pause(pause_mode mode, stream_ref s) = 0;
  virtual void do_resume(stream_ref s) = 0;
  virtual graph_id do_register_graph(capture_fn fn, stream_ref s) = 0;
  virtual void do_replay(graph_id g, stream_ref s) = 0;
  virtual void do_unregister_graph(graph_id g) noexcept = 0;
};

/// The declarations of offload_region's operation hooks (pause, resume and the graphs), which a
/// region defined out of line writes instead of restating them. The compiler keeps the list in
/// step with the hooks above: one it misses leaves the class abstract, one they lack overrides
/// nothing.
#define OFFLOADKIT_REGION_OPERATION_OVERRIDES                       \
  void do_pause(pause_mode mode, stream_ref s) override;            \
  void do_resume(stream_ref s) override;                            \
  graph_id do_register_graph(capture_fn fn, stream_ref s) override; \
  void do_replay(graph_id g, stream_ref s) override;                \
  void do_unregister_graph(graph_id g) noexcept override;

/// `inner` with offloadkit's graphs, for an implementation that keeps none of its own (profile:
/// graphs none): register_graph captures through `ex` into a graph kept here, replay replays it,
/// and after a resume that moved the region every graph is captured again at its next replay or
/// registration (all or nothing: a failed re-capture leaves the old graphs, and the next replay
/// tries again). Everything else is inner's. `ex` must be the executor inner's streams belong to.
std::unique_ptr<offload_region> with_executor_graphs(executor& ex,
                                                     std::unique_ptr<offload_region> inner);

namespace detail {
/// Captures `fn(base, s)` on `s` into a graph; on any failure the capture is ended and nothing
/// is left behind.
graph_ref capture_graph(executor& ex, const capture_fn& fn, void* base, stream_ref s);
}  // namespace detail

}  // namespace offloadkit::region
