// Test-only activation offloaders, each with one classic bug, behind the same interface: the
// planted-bug suite runs the whole battery against each and expects exactly the property that
// guards against its bug to fail. bug::none is the same compact offloader without a bug, the
// control that passes every property.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::activation::testing {

enum class bug {
  none,
  uncounted_kept,          ///< stats().packed counts only the tensors it offloads, not those kept
  current_device,          ///< unpack restores onto the caller's stream's device, not the origin
  ignores_lent_slack,      ///< the prefetch bound forgets the unused part of reused buffers it lent
  unbounded_prefetch,      ///< uploads every remaining tensor at each backward hint, no bound
  unpack_no_wait,          ///< unpack does not make the caller's stream wait on the upload
  early_release,           ///< gives the source back as soon as its copy is issued
  unbounded_pending,       ///< keeps sources until the first unpack, ignoring max_pending_bytes
  per_tensor_pending,      ///< gives sources back only for a tensor larger than max_pending_bytes
  early_upload_event,      ///< records the upload's event before the upload copy, not after it
  stream_ordered_release,  ///< gives the source back once the producer's stream waits for the copy
  forward_order_prefetch,  ///< prefetches a layer's tensors in pack order, not in backward order
  late_prefetch,           ///< prefetch starts one layer below the one whose backward begins
  zero_layers_unlimited,   ///< prefetch_layers = 0 read as "no limit" instead of "none"
  release_on_failed_pack,  ///< a pack whose copy fails gives the source back, which is the caller's
  no_caller_wait,          ///< pack copies without waiting for the caller's stream, polling 200 ms
};

/// A compact asynchronous offloader: side-stream copy into fresh pinned memory, upload on another
/// stream, a bounded backward-order prefetch and a cache of device buffers (a buffer serves a
/// tensor up to about half its size, as the optimized offloader's does), with exactly one bug B.
/// A call that fails changes nothing: a failed pack leaves the source with the caller, a failed
/// unpack leaves the tensor packed (with its upload, if it got that far).
template <bug B>
class planted_offloader final : public offloader {
 public:
  planted_offloader(executor& ex, offload_options o) : ex_(ex), options_(o) {}
  ~planted_offloader() override {
    // Destructors report nothing: a failed synchronization leaves only freeing to do.
    try {
      do_synchronize();
    } catch (...) {  // NOLINT(bugprone-empty-catch)
    }
    for (auto& [id, e] : entries_) {
      if (e.source.release) e.source.release();
      if (e.pinned != nullptr) ex_.deallocate(memory_kind::pinned, e.pinned, e.source.bytes);
      if (e.dev.ptr != nullptr) ex_.deallocate(memory_kind::device, e.dev.ptr, e.dev.capacity);
    }
    for (auto& b : cache_) ex_.deallocate(memory_kind::device, b.ptr, b.capacity);
    for (auto& [d, s] : events_) ex_.destroy_event(s);
  }

 private:
  struct block {
    void* ptr = nullptr;
    std::size_t capacity = 0;
    int device = 0;
  };
  struct entry {
    tensor source;
    bool kept = false;
    void* pinned = nullptr;
    block dev;             // uploaded ahead by prefetch
    event_ref uploaded{};  // recorded after the upload copy
    int layer = 0;
  };
  struct streams {
    stream copy, upload;
  };

  static bool fits(std::size_t capacity, std::size_t bytes) {
    return capacity >= bytes && capacity <= 2 * bytes + 4096;
  }
  [[nodiscard]] std::size_t held() const {
    return cached_ + prefetched_ + (B == bug::ignores_lent_slack ? 0 : lent_slack_);
  }
  void note_peak() { stats_.peak_prefetch_bytes = std::max(stats_.peak_prefetch_bytes, held()); }

  streams& lane(int d) {
    auto it = lanes_.find(d);
    if (it == lanes_.end()) it = lanes_.emplace(d, streams{stream(ex_, d), stream(ex_, d)}).first;
    return it->second;
  }
  event_ref fresh_event(int d) {
    const event_ref e = ex_.create_event(d);
    events_.emplace(d, e);
    return e;
  }
  handle do_pack(tensor t, stream_ref s) override {
    validate_for_pack(t, ex_.device_count());
    const handle h{next_++};
    entry e;
    e.layer = layer_;
    const bool kept = t.bytes < options_.keep_threshold;
    if (kept) {
      e.kept = true;
      stats_.kept += 1;
    } else {
      auto& l = lane(t.device);
      const event_ref ready = fresh_event(s.device);
      try {
        ex_.record(ready, s);
        if (B == bug::no_caller_wait) {
          poll_briefly(ready);
        } else {
          ex_.wait(ready, l.copy);
        }
        e.pinned = ex_.allocate(memory_kind::pinned, t.bytes);
        if (t.bytes > 0) ex_.copy(e.pinned, t.data, t.bytes, l.copy);
        if (B == bug::stream_ordered_release) {
          // Ordered after the copy on the producer's stream only: right if the owner reuses the
          // buffer there, a race on any other stream.
          const event_ref copied = fresh_event(t.device);
          ex_.record(copied, l.copy);
          ex_.wait(copied, s);
        }
      } catch (...) {
        l.copy.synchronize();  // a copy issued before the failure may still read the source
        if (e.pinned != nullptr) ex_.deallocate(memory_kind::pinned, e.pinned, t.bytes);
        if (B == bug::release_on_failed_pack && t.release) t.release();  // the planted bug
        throw;
      }
      stats_.offloaded_bytes += t.bytes;
      if (B == bug::early_release || B == bug::stream_ordered_release) {
        auto f = std::move(t.release);
        t.release = nullptr;
        if (f) f();
      } else {
        pending_.push_back(h.id);
      }
    }
    if (!kept || B != bug::uncounted_kept) stats_.packed += 1;
    // Within max_pending_bytes the simple way: wait for every copy and give every source back.
    const bool room = B == bug::per_tensor_pending ? t.bytes <= options_.max_pending_bytes
                                                   : B == bug::unbounded_pending;
    e.source = std::move(t);
    entries_.emplace(h.id, std::move(e));
    if (!room && options_.max_pending_bytes > 0) give_back_sources();
    return h;
  }
  /// no_caller_wait: polls the caller's stream from the host for at most 200 ms (as code that
  /// spins on cudaStreamQuery with a timeout does) instead of making the copy stream wait for it;
  /// the copy then reads whatever the source holds. The other properties' writes, large ones on a
  /// loaded machine included, land within that.
  void poll_briefly(event_ref queued) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (!ex_.ready(queued) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  void give_back_sources() {
    for (auto& [d, l] : lanes_) l.copy.synchronize();
    for (auto id : pending_) {
      auto it = entries_.find(id);
      if (it == entries_.end()) continue;
      auto f = std::move(it->second.source.release);
      it->second.source.release = nullptr;
      if (f) f();
    }
    pending_.clear();
  }
  /// A device buffer: a cached one that fits, else a new one; for prefetch only within the bound
  /// (ptr == nullptr when it does not fit even after dropping the cache).
  block take_device(std::size_t bytes, int device, bool for_prefetch) {
    auto best = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->device == device && fits(it->capacity, bytes) &&
          (best == cache_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != cache_.end()) {
      const block b = *best;
      cache_.erase(best);
      cached_ -= b.capacity;
      return b;
    }
    if (for_prefetch && B != bug::unbounded_prefetch) {
      while (held() + bytes > options_.prefetch_bytes && !cache_.empty()) {
        cached_ -= cache_.front().capacity;
        ex_.deallocate(memory_kind::device, cache_.front().ptr, cache_.front().capacity);
        cache_.erase(cache_.begin());
      }
      if (held() + bytes > options_.prefetch_bytes) return {};
    }
    void* p = ex_.allocate(memory_kind::device, bytes, device);
    stats_.device_allocations += 1;
    return {p, bytes, device};
  }
  void give_back_device(block b) {
    if (held() + b.capacity <= options_.prefetch_bytes) {
      cached_ += b.capacity;
      cache_.push_back(b);
      note_peak();
    } else {
      ex_.deallocate(memory_kind::device, b.ptr, b.capacity);
    }
  }
  void upload_into(entry& e, void* dev) {
    auto& l = lane(e.source.device);
    l.copy.synchronize();  // the host copy is complete
    e.uploaded = fresh_event(e.source.device);
    if (B == bug::early_upload_event) ex_.record(e.uploaded, l.upload);
    if (e.source.bytes > 0) ex_.copy(dev, e.pinned, e.source.bytes, l.upload);
    if (B != bug::early_upload_event) ex_.record(e.uploaded, l.upload);
    stats_.restored_bytes += e.source.bytes;
  }
  /// Uploads the tensors of the layers in the prefetch window ahead of their unpack, in backward
  /// order (the last packed first), while they fit within prefetch_bytes.
  void prefetch() {
    if (backward_layer_ < 0) return;
    int high = backward_layer_;
    int low = backward_layer_ - options_.prefetch_layers + 1;
    if (options_.prefetch_layers == 0) {
      if (B != bug::zero_layers_unlimited) return;
      low = std::numeric_limits<int>::min();
    }
    if (B == bug::late_prefetch) --high, --low;
    if (B == bug::unbounded_prefetch) low = std::numeric_limits<int>::min();
    give_back_sources();
    auto visit = [&](entry& e) {
      if (e.kept || e.dev.ptr != nullptr || e.layer > high || e.layer < low) return true;
      const block b = take_device(e.source.bytes, e.source.device, true);
      if (b.ptr == nullptr) return false;  // the bound is reached: stay in backward order
      try {
        upload_into(e, b.ptr);
      } catch (...) {
        give_back_device(b);
        throw;
      }
      e.dev = b;
      prefetched_ += b.capacity;
      stats_.prefetched += 1;
      note_peak();
      return true;
    };
    if (B == bug::forward_order_prefetch) {
      for (auto& [id, e] : entries_) {
        if (!visit(e)) return;
      }
    } else {
      for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
        if (!visit(it->second)) return;
      }
    }
  }
  tensor do_unpack(handle h, stream_ref s) override {
    give_back_sources();
    auto it = entries_.find(h.id);
    OFFLOADKIT_EXPECTS(it != entries_.end(), out_of_range, "handle ", h.id, " is not packed");
    if (it->second.kept) {
      entry e = std::move(it->second);
      entries_.erase(it);
      return std::move(e.source);
    }
    entry& held = it->second;
    const int device = B == bug::current_device ? s.device : held.source.device;
    if (held.dev.ptr == nullptr) {
      const block b = take_device(held.source.bytes, device, false);
      try {
        upload_into(held, b.ptr);
      } catch (...) {
        give_back_device(b);
        throw;
      }
      stats_.demand_uploads += 1;
      // Held like a prefetched upload until the unpack commits, so that a failed wait below
      // leaves the tensor packed with its upload.
      held.dev = b;
      prefetched_ += b.capacity;
    }
    if (B != bug::unpack_no_wait) ex_.wait(held.uploaded, s);
    entry e = std::move(held);
    entries_.erase(it);
    const block b = e.dev;
    prefetched_ -= b.capacity;
    uploaded_.emplace_back(e.pinned, e.source.bytes);  // freed once the uploads are synchronized
    tensor t = std::move(e.source);
    t.data = b.ptr;
    t.device = device;
    const std::size_t slack = b.capacity - t.bytes;
    lent_slack_ += slack;
    t.release = [this, b, s, slack] {
      ex_.synchronize(s);  // the caller's use of the buffer is complete
      lent_slack_ -= slack;
      give_back_device(b);
    };
    try {
      prefetch();  // the bound may have room again
    } catch (...) {
      // This unpack has succeeded: the tensors not prefetched are uploaded on demand when
      // unpacked, and the failure is counted for the caller to see.
      stats_.failed_prefetches += 1;
    }
    return t;
  }
  void do_forward_layer_end(int layer, stream_ref) override { layer_ = layer + 1; }
  void do_backward_layer_begin(int layer, stream_ref) override {
    layer_ = layer;
    backward_layer_ = layer;
    prefetch();
  }
  void do_synchronize() override {
    give_back_sources();
    for (auto& [d, l] : lanes_) l.upload.synchronize();
    for (auto& [p, n] : uploaded_) ex_.deallocate(memory_kind::pinned, p, n);
    uploaded_.clear();
  }
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override {
    return options_.keep_threshold;
  }
  [[nodiscard]] offload_stats do_stats() const override { return stats_; }
  [[nodiscard]] std::string do_name() const override { return "planted"; }

  executor& ex_;
  offload_options options_;
  std::map<int, streams> lanes_;
  std::multimap<int, event_ref> events_;
  std::map<std::uint64_t, entry> entries_;
  std::vector<std::uint64_t> pending_;
  std::vector<std::pair<void*, std::size_t>> uploaded_;
  std::vector<block> cache_;
  std::size_t cached_ = 0, prefetched_ = 0, lent_slack_ = 0;
  offload_stats stats_;
  std::uint64_t next_ = 1;
  int layer_ = 0;
  int backward_layer_ = -1;
};

}  // namespace offloadkit::activation::testing
