// The optimized activation offloader.
//
// pack: an event recorded on the producer's stream orders a device-to-host copy on a per-device
// copy stream into a buffer from a pinned pool; the source goes back to its owner only once that
// copy is seen complete (its event polled on later calls, or synchronize()), never earlier; with
// max_pending_bytes, pack() first waits for the oldest copies until the new tensor fits.
// unpack: tensors are prefetched in backward order (the layer whose backward begins, then earlier
// ones) on a per-device upload stream into device buffers from a pool whose size is bounded; the
// caller's stream waits on the tensor's own upload event. The device of origin is recorded per
// tensor and used on unpack whatever device the caller's stream belongs to. Buffers given back by
// the caller are reused in stream order (the upload waits on an event recorded at release).
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::activation {

class async_offloader final : public offloader {
 public:
  explicit async_offloader(executor& ex, offload_options options = {});
  /// Waits for its own copies and gives back every source it still holds. Tensors returned by
  /// unpack() must have been released before.
  ~async_offloader() override;

  /// The error of the latest prefetch that failed inside unpack() (null if none did). unpack()
  /// still returns its own tensor then; the tensors left unprefetched are uploaded on demand, and
  /// stats().failed_prefetches counts such failures.
  [[nodiscard]] std::exception_ptr last_prefetch_error() const noexcept {
    return last_prefetch_error_;
  }

 private:
  /// A pooled buffer and the event after which it may be overwritten (stream-ordered reuse).
  struct pooled {
    void* ptr = nullptr;
    std::size_t capacity = 0;
    int device = 0;
    event_ref free_after{};
    bool has_free_after = false;
  };
  struct record {
    tensor source;
    bool kept = false;
    bool source_released = false;
    bool prefetched = false;
    int layer = 0;
    pooled pinned;
    pooled dev;
    event_ref copy_done{};
    event_ref upload_done{};
  };
  /// Sources whose copy was not yet seen complete when their record left: handed back to the
  /// caller from unpack() (the owner's release then waits for the copy and the caller's use), or
  /// restored from the host copy (it waits for the copy only).
  struct deferred_release {
    std::function<void()> release;
    event_ref copy_done;
    event_ref used;
    bool has_used = false;  // false: only the copy is waited for
  };
  struct lane {
    stream copy;
    stream upload;
    std::vector<event_ref> free_events;
    std::deque<std::uint64_t> in_copy;  // records whose source awaits its copy, in issue order
  };

  handle do_pack(tensor t, stream_ref s) override;
  tensor do_unpack(handle h, stream_ref s) override;
  void do_forward_layer_end(int layer, stream_ref s) override;
  void do_backward_layer_begin(int layer, stream_ref s) override;
  void do_synchronize() override;
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override;
  [[nodiscard]] offload_stats do_stats() const override;
  [[nodiscard]] std::string do_name() const override { return "optimized"; }

  lane& lane_of(int device);
  event_ref take_event(int device);
  void retire_event(event_ref e);
  void reap(bool wait);
  /// The oldest record of `l` whose source still awaits its copy (dropping from the front those
  /// unpacked or handed back meanwhile); null when none does.
  record* oldest_in_copy(lane& l);
  /// Marks the source of oldest_in_copy(l) handed back, takes it off `l` and returns its release
  /// (the caller calls it once nothing else can fail).
  std::function<void()> hand_back_oldest(lane& l);
  /// Waits for the oldest copies of `device` and hands their sources back until `incoming` more
  /// bytes fit within options_.max_pending_bytes, or none is left in flight.
  void make_room_for(std::size_t incoming, int device);
  pooled take_pinned(std::size_t bytes);
  /// A device buffer from the cache or a new allocation; for prefetch only within the bound
  /// (returns ptr == nullptr when it does not fit).
  pooled take_device(std::size_t bytes, int device, bool for_prefetch);
  void give_back_device(pooled b, stream_ref s);
  void drop_device(pooled& b) noexcept;
  /// Drops a buffer into which an upload may have been issued, after that upload.
  void abandon(pooled& buf, int device) noexcept;
  bool evict_cached(std::size_t need);
  void upload(record& r, pooled buf);
  void prefetch();
  /// Device bytes within the prefetch bound: cached and prefetched buffers, and the part of each
  /// buffer lent to the caller that its tensor does not fill.
  [[nodiscard]] std::size_t held() const noexcept {
    return cached_bytes_ + prefetched_bytes_ + lent_slack_;
  }
  void note_peak() noexcept;

  executor& ex_;
  offload_options options_;
  std::map<int, lane> lanes_;
  std::map<std::uint64_t, record> records_;
  std::map<int, std::vector<std::uint64_t>> by_layer_;  // pack order within each layer
  std::vector<pooled> pinned_free_;
  std::vector<pooled> device_free_;
  std::vector<event_ref> retiring_;
  std::vector<deferred_release> deferred_;
  std::vector<event_ref> all_events_;
  std::size_t cached_bytes_ = 0;
  std::size_t prefetched_bytes_ = 0;
  std::size_t lent_slack_ = 0;
  std::uint64_t next_id_ = 1;
  int pack_layer_ = 0;
  int last_pack_layer_ = -1;
  int backward_layer_ = -1;
  bool in_backward_ = false;  // from backward_layer_begin() to the next forward_layer_end()
  offload_stats stats_;
  std::exception_ptr last_prefetch_error_;
};

}  // namespace offloadkit::activation
