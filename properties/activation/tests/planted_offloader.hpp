// Test-only activation offloaders, each with one classic bug, behind the same interface: the
// planted-bug suite shows that the battery's properties fail on them. bug::none is the same
// compact offloader without a bug, the control that must pass.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::activation::testing {

enum class bug {
  none,
  early_release,       ///< gives the source back as soon as its copy is issued
  unpack_no_wait,      ///< unpack does not make the caller's stream wait on the upload
  current_device,      ///< unpack restores onto the caller's stream's device, not the origin
  unbounded_prefetch,  ///< uploads every remaining tensor at each backward hint, ignoring the bound
  unbounded_pending,   ///< keeps sources until the first unpack, ignoring max_pending_bytes
};

/// A compact asynchronous offloader: side-stream copy into fresh pinned memory, upload on another
/// stream, with exactly one bug B.
template <bug B>
class planted_offloader final : public offloader {
 public:
  planted_offloader(executor& ex, offload_options o) : ex_(ex), options_(o) {}
  ~planted_offloader() override {
    try {
      do_synchronize();
    } catch (...) {
    }
    for (auto& [id, e] : entries_) {
      if (e.source.release) e.source.release();
      if (e.pinned != nullptr) ex_.deallocate(memory_kind::pinned, e.pinned, e.source.bytes);
      if (e.dev != nullptr) ex_.deallocate(memory_kind::device, e.dev, e.source.bytes);
    }
    for (auto& [d, s] : events_) ex_.destroy_event(s);
  }

 private:
  struct entry {
    tensor source;
    bool kept = false;
    void* pinned = nullptr;
    void* dev = nullptr;  // uploaded ahead (unbounded_prefetch only)
    int layer = 0;
  };
  struct streams {
    stream copy, upload;
  };

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
    if (t.bytes < options_.keep_threshold) {
      e.kept = true;
    } else {
      auto& l = lane(t.device);
      const event_ref ready = fresh_event(s.device);
      ex_.record(ready, s);
      ex_.wait(ready, l.copy);
      e.pinned = ex_.allocate(memory_kind::pinned, t.bytes);
      if (t.bytes > 0) ex_.copy(e.pinned, t.data, t.bytes, l.copy);
      if (B == bug::early_release) {
        auto f = std::move(t.release);
        t.release = nullptr;
        if (f) f();
      } else {
        pending_.push_back(h.id);
      }
    }
    e.source = std::move(t);
    entries_.emplace(h.id, std::move(e));
    // Within max_pending_bytes the simple way: wait for every copy and give every source back.
    if (B != bug::unbounded_pending && options_.max_pending_bytes > 0) give_back_sources();
    return h;
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
  void upload_into(entry& e, void* dev) {
    auto& l = lane(e.source.device);
    l.copy.synchronize();  // the host copy is complete
    if (e.source.bytes > 0) ex_.copy(dev, e.pinned, e.source.bytes, l.upload);
  }
  tensor do_unpack(handle h, stream_ref s) override {
    give_back_sources();
    auto it = entries_.find(h.id);
    OFFLOADKIT_EXPECTS(it != entries_.end(), out_of_range, "handle ", h.id, " is not packed");
    entry e = std::move(it->second);
    entries_.erase(it);
    if (e.kept) return std::move(e.source);
    const int device = B == bug::current_device ? s.device : e.source.device;
    void* dev = e.dev;
    if (dev == nullptr) {
      dev = ex_.allocate(memory_kind::device, e.source.bytes, device);
      upload_into(e, dev);
    }
    auto& l = lane(e.source.device);
    if (B != bug::unpack_no_wait) {
      const event_ref done = fresh_event(e.source.device);
      ex_.record(done, l.upload);
      ex_.wait(done, s);
    }
    uploaded_.emplace_back(e.pinned, e.source.bytes);  // freed once the uploads are synchronized
    tensor t = std::move(e.source);
    t.data = dev;
    t.device = device;
    executor* ex = &ex_;
    const std::size_t bytes = t.bytes;
    t.release = [ex, dev, bytes, s] {
      ex->synchronize(s);
      ex->deallocate(memory_kind::device, dev, bytes);
    };
    return t;
  }
  void do_forward_layer_end(int layer, stream_ref) override { layer_ = layer + 1; }
  void do_backward_layer_begin(int layer, stream_ref) override {
    layer_ = layer;
    if (B != bug::unbounded_prefetch) return;
    give_back_sources();
    for (auto& [id, e] : entries_) {
      if (e.kept || e.dev != nullptr) continue;
      e.dev = ex_.allocate(memory_kind::device, e.source.bytes, e.source.device);
      upload_into(e, e.dev);
    }
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
  [[nodiscard]] offload_stats do_stats() const override { return {}; }
  [[nodiscard]] std::string do_name() const override { return "planted"; }

  executor& ex_;
  offload_options options_;
  std::map<int, streams> lanes_;
  std::multimap<int, event_ref> events_;
  std::map<std::uint64_t, entry> entries_;
  std::vector<std::uint64_t> pending_;
  std::vector<std::pair<void*, std::size_t>> uploaded_;
  std::uint64_t next_ = 1;
  int layer_ = 0;
};

}  // namespace offloadkit::activation::testing
