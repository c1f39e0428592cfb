// What the activation properties share inside the battery library: random layer stacks, the
// training-step driver, a forwarding offloader to check calls through, and each property's
// declaration (the bodies are in this folder's *_properties.cpp, listed by battery.cpp).
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/adaptors.hpp"
#include "offloadkit/testing/activation_battery.hpp"
#include "offloadkit/testing/battery_list.hpp"
#include "offloadkit/testing/driver_instruments.hpp"
#include "offloadkit/testing/fault_countdown.hpp"
#include "offloadkit/testing/sync_on_exit.hpp"
#include "offloadkit/workloads/training_step.hpp"

namespace offloadkit::activation::testing {

using offloadkit::testing::activation_implementation;

inline constexpr std::size_t compute_threads = 32;

/// A random workload: a layer stack, the offloader's options, where unpack runs, how many steps.
struct stack_case {
  std::vector<layer_spec> layers;
  offload_options options;
  int unpack_device = -1;
  int steps = 1;
};

inline std::string show(const stack_case& c) {
  std::ostringstream os;
  os << "threshold=" << c.options.keep_threshold
     << " max_pending_bytes=" << c.options.max_pending_bytes
     << " prefetch_bytes=" << c.options.prefetch_bytes
     << " prefetch_layers=" << c.options.prefetch_layers << " unpack_device=" << c.unpack_device
     << " steps=" << c.steps << " layers:";
  for (std::size_t l = 0; l < c.layers.size(); ++l) {
    os << " [" << l << " dev" << c.layers[l].device;
    for (const auto& t : c.layers[l].saved) {
      os << " " << to_string(t.type) << "(";
      for (std::size_t i = 0; i < t.shape.size(); ++i) os << (i ? "x" : "") << t.shape[i];
      os << ")";
    }
    os << "]";
  }
  return os.str();
}

/// Tensor counts and sizes including zero-size and below-threshold tensors, every dtype, one to
/// six layers; `devices` > 1 spreads layers over devices and picks the unpack device at random.
inline stack_case gen_stack(int devices) {
  using rc::gen::inRange;
  stack_case c;
  const int n_layers = *inRange(1, 7);
  for (int l = 0; l < n_layers; ++l) {
    layer_spec ls;
    ls.device = devices > 1 ? *inRange(0, devices) : 0;
    ls.forward_iterations = *rc::gen::element<std::uint64_t>(0, 0, 50, 400);
    ls.backward_iterations = *rc::gen::element<std::uint64_t>(0, 0, 50, 400);
    const int n_tensors = *inRange(0, 5);
    for (int j = 0; j < n_tensors; ++j) {
      tensor_spec t;
      t.type = static_cast<dtype>(*inRange(0, 8));
      const int rank = *inRange(0, 4);
      for (int r = 0; r < rank; ++r) {
        t.shape.push_back(
            *rc::gen::weightedOneOf<std::int64_t>({{1, rc::gen::just<std::int64_t>(0)},
                                                   {2, rc::gen::inRange<std::int64_t>(1, 4)},
                                                   {4, rc::gen::inRange<std::int64_t>(1, 40)}}));
      }
      ls.saved.push_back(std::move(t));
    }
    c.layers.push_back(std::move(ls));
  }
  c.options.keep_threshold = *rc::gen::element<std::size_t>(0, 0, 1, 64, 1000, 4096);
  c.options.prefetch_bytes = *rc::gen::element<std::size_t>(
      0, 512, 8192, 65536, std::size_t{1} << 20, std::size_t{1} << 30);
  c.options.prefetch_layers = *inRange(0, 4);
  c.unpack_device = devices > 1 ? *inRange(-1, devices) : -1;
  c.steps = *inRange(1, 3);
  return c;
}

inline void run_steps(executor& driver_ex, offloader& off, training_step& step, const stack_case& c,
                      std::uint64_t seed) {
  step_options opt;
  opt.unpack_device = c.unpack_device;
  for (int i = 0; i < c.steps; ++i) {
    const step_report rep = step.run(&off, seed + static_cast<std::uint64_t>(i), opt);
    if (!rep.ok()) {
      RC_FAIL(off.name() + " step " + std::to_string(i) + ": " + rep.describe() + "; " + show(c));
    }
  }
}

/// Forwards every call to an inner offloader; the checkers below override the calls they watch.
class forwarding_offloader : public offloader {
 public:
  explicit forwarding_offloader(offloader& inner) : inner_(inner) {}

 protected:
  handle do_pack(tensor t, stream_ref s) override { return inner_.pack(std::move(t), s); }
  tensor do_unpack(handle h, stream_ref s) override { return inner_.unpack(h, s); }
  void do_forward_layer_end(int layer, stream_ref s) override {
    inner_.forward_layer_end(layer, s);
  }
  void do_backward_layer_begin(int layer, stream_ref s) override {
    inner_.backward_layer_begin(layer, s);
  }
  void do_synchronize() override { inner_.synchronize(); }
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override {
    return inner_.keep_threshold();
  }
  [[nodiscard]] offload_stats do_stats() const override { return inner_.stats(); }
  [[nodiscard]] std::string do_name() const override { return inner_.name(); }

  offloader& inner_;
};

/// Whether the implementation reports its offload decisions instead of following the threshold.
inline bool reports_decisions(const activation_implementation& impl) {
  return impl.caps.decision == offloadkit::testing::activation_offload_decision::opaque_predicate;
}

/// Layers spread over two devices where the executor has them and the implementation brings
/// tensors back to their device of origin; one device otherwise.
inline int stack_devices(executor& ex, const activation_implementation& impl) {
  return impl.caps.return_device == offloadkit::testing::activation_return_device::origin &&
                 ex.device_count() > 1
             ? 2
             : 1;
}

// ---- memory bound ------------------------------------------------------------------------------

/// Tracks the device bytes allocated through it: live now and the peak since the last reset.
class device_bytes_tracker final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;
  std::size_t peak_since_reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = live_;
  }

 private:
  void* do_allocate(memory_kind kind, std::size_t bytes, int device) override {
    void* p = executor_adaptor::do_allocate(kind, bytes, device);
    if (kind == memory_kind::device) {
      std::lock_guard<std::mutex> lock(mutex_);
      live_ += bytes;
      peak_ = std::max(peak_, live_);
    }
    return p;
  }
  void do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept override {
    if (kind == memory_kind::device) {
      std::lock_guard<std::mutex> lock(mutex_);
      live_ -= bytes;
    }
    executor_adaptor::do_deallocate(kind, p, bytes);
  }
  std::mutex mutex_;
  std::size_t live_ = 0;
  std::size_t peak_ = 0;
};

/// What an offloader that decides by an opaque predicate reports of one pack(): stats() read
/// before and after it. Kept: `kept` grew by one and `offloaded_bytes` by nothing; offloaded:
/// `offloaded_bytes` grew by the tensor's bytes (`shared`: by nothing, for a pack that shares an
/// earlier copy of its storage) and `kept` by nothing. Empty when that holds, else what is wrong.
inline std::string reported_decision(const offload_stats& before, const offload_stats& after,
                                     std::size_t bytes, bool shared, bool& kept) {
  const std::size_t packed = after.packed - before.packed;
  const std::size_t kept_by = after.kept - before.kept;
  const std::size_t offloaded_by = after.offloaded_bytes - before.offloaded_bytes;
  kept = kept_by == 1;
  const std::size_t expected = kept || shared ? 0 : bytes;
  if (packed != 1 || kept_by > 1 || offloaded_by != expected) {
    return offloadkit::detail::concat("a pack of ", bytes, " bytes", shared ? " (shared)" : "",
                                      " moved stats() by packed +", packed, ", kept +", kept_by,
                                      ", offloaded_bytes +", offloaded_by, ": a ",
                                      kept ? "kept" : "offloaded", " tensor adds ", kept ? 1 : 0,
                                      " to kept and ", expected, " to offloaded_bytes");
  }
  return {};
}

/// Delays every operation on each stream created through it (the offloader's own copy and upload
/// streams) by a seeded random amount, so that its copies finish late relative to the caller.
class delay_new_streams final : public executor_adaptor {
 public:
  delay_new_streams(delay_adaptor& delays, std::chrono::microseconds max, std::uint64_t seed)
      : executor_adaptor(static_cast<executor&>(delays)), delays_(delays), max_(max), seed_(seed) {}

 private:
  stream_ref do_create_stream(int device) override {
    const stream_ref s = executor_adaptor::do_create_stream(device);
    delays_.delay_randomly(s, max_, seed_++);
    return s;
  }
  delay_adaptor& delays_;
  std::chrono::microseconds max_;
  std::uint64_t seed_;
};

// ---- prefetch order and demand uploads ---------------------------------------------------------

/// Logs every copy from host memory into device memory issued through it, in issue order.
class upload_log final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;
  struct upload {
    const void* dst = nullptr;
    std::size_t bytes = 0;
    std::uint64_t order = 0;  ///< issue number among the uploads
  };
  /// The issue number the next upload gets.
  std::uint64_t next() {
    std::lock_guard<std::mutex> lock(mutex_);
    return uploads_.size();
  }
  /// The latest upload of `bytes` into `dst`; null when there was none.
  const upload* latest_into(const void* dst, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = uploads_.rbegin(); it != uploads_.rend(); ++it) {
      if (it->dst == dst && it->bytes == bytes) return &*it;
    }
    return nullptr;
  }

 private:
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override {
    if (classify(dst).kind == pointer_kind::device && classify(src).kind != pointer_kind::device) {
      std::lock_guard<std::mutex> lock(mutex_);
      uploads_.push_back({dst, bytes, uploads_.size()});
    }
    executor_adaptor::do_copy(dst, src, bytes, s);
  }
  std::mutex mutex_;
  std::deque<upload> uploads_;  // a deque: latest_into's pointers stay valid as it grows
};

/// Forwards to an offloader and tells, for each tensor unpack() returns, how it arrived: uploaded
/// before that unpack() began (prefetched, with the upload's issue number), uploaded inside it (on
/// demand), or not uploaded at all (kept, or served from its source).
class upload_watcher final : public forwarding_offloader {
 public:
  upload_watcher(offloader& inner, upload_log& log) : forwarding_offloader(inner), log_(log) {}
  struct arrival {
    std::uint64_t id = 0;
    int step = 0;
    int layer = 0;
    bool prefetched = false;
    bool demand = false;
    std::uint64_t order = 0;  ///< of the upload that brought it, when prefetched
  };
  [[nodiscard]] const std::vector<arrival>& arrivals() const noexcept { return arrivals_; }
  void next_step() { ++step_; }

 private:
  handle do_pack(tensor t, stream_ref s) override {
    const void* src = t.data;
    const handle h = inner_.pack(std::move(t), s);
    sources_[h.id] = src;
    return h;
  }
  tensor do_unpack(handle h, stream_ref s) override {
    const std::uint64_t before = log_.next();
    tensor t = inner_.unpack(h, s);
    arrival a;
    a.id = h.id;
    a.step = step_;
    a.layer = layer_;
    if (t.bytes > 0 && t.data != sources_[h.id]) {
      if (const upload_log::upload* u = log_.latest_into(t.data, t.bytes)) {
        a.prefetched = u->order < before;
        a.demand = !a.prefetched;
        a.order = u->order;
      }
    }
    sources_.erase(h.id);
    arrivals_.push_back(a);
    return t;
  }
  void do_backward_layer_begin(int layer, stream_ref s) override {
    layer_ = layer;
    inner_.backward_layer_begin(layer, s);
  }

  upload_log& log_;
  std::map<std::uint64_t, const void*> sources_;
  std::vector<arrival> arrivals_;
  int step_ = 0;
  int layer_ = 0;
};

// ---- properties (the battery lists them in battery.cpp) ---------------------------------------

/// Every tensor comes back bit for bit, and the counters every implementation keeps agree with what
/// was packed: each pack() counted, the tensors below the threshold as kept, the others' bytes as
/// offloaded (checks and benchmarks read them). The threshold is the one the implementation
/// reports (keep_threshold()): the configured one, or 0 for one that has none, such as
/// saved-tensor hooks, which see every tensor.
void round_trip(executor& ex, const activation_implementation& impl);

/// Layers on two devices; each case runs one step with unpack on the stream of each tensor's own
/// device, one with it on device 0's and one on device 1's, in a random order. Every tensor must
/// come back where the profile's return device says: on its device of origin (`origin`), also
/// when the stream unpack() is given (and the backward hint before it) belongs to the other
/// device, and when the last work issued before it (the previous layer's compute and checks) ran
/// there; on the device of unpack's stream (`current`), whichever device it was packed from.
void two_devices(executor& ex, const activation_implementation& impl);

/// Device memory held for prefetch and cache stays within prefetch_bytes plus what the caller
/// holds. Every case first runs one fixed input that reuses a larger cached buffer near the bound
/// (so every run reaches that edge), then a drawn one: a quarter of them from the same family.
void memory_bound(executor& ex, const activation_implementation& impl);

void races(executor& ex, const activation_implementation& impl);

/// With copies held back by delays, sources in flight stay within max_pending_bytes after every
/// pack, and results stay exact.
void pending_bound(executor& ex, const activation_implementation& impl);

/// Prefetch copies are issued in backward order: among the tensors that arrived by prefetch, in
/// the order backward unpacks them, the uploads that brought them were issued in that same order.
/// A prefetch in another order keeps every byte right and loses the overlap: the tensor needed
/// next waits behind one needed later. Decided exactly from the copies the executor was asked for.
void prefetch_order(executor& ex, const activation_implementation& impl);

/// For a schedule that fits the bound (prefetch_bytes above everything offloaded, at least the
/// layer whose backward begins in the window), steps after the first upload nothing on demand:
/// every tensor that is uploaded at all was prefetched before its unpack().
void steady_demand_uploads(executor& ex, const activation_implementation& impl);

/// The owner of a source gives it back to use at once on a stream of its own, another than the one
/// that produced it and handed it to pack(): a random sequence of packs (each buffer from the
/// owner's free list when one fits, overwritten with a poison byte on the reuse stream the moment
/// it comes back), unpacks on either stream, layer hints and synchronizations, with delays on the
/// offloader's own streams. A source given back while its copy may still read it (ordered on the
/// producer's stream only, say) hands the poison to the host copy. Every unpacked tensor holds
/// what was packed once the offloader's and the caller's work is done.
void source_reuse(executor& ex, const activation_implementation& impl);

/// The producer's last write of a source is late on the stream pack() is given: a long hold, then
/// the write, then pack() on that stream at once. pack() copies the source in the order of that
/// stream, so the unpacked tensor must hold the late write; an offloader whose copy runs on a
/// stream of its own without waiting for the caller's copies what the source held before it. The
/// hold (300 to 400 ms, drawn per case) outlasts any bounded wait shorter than that (the other
/// properties' writes, large ones on a loaded machine included, land well within it). The tensor
/// is offloaded whatever the options (keep_threshold 0) and has at least 64 bytes, so that the two
/// patterns differ.
void caller_writes_late(executor& ex, const activation_implementation& impl);

/// For an implementation that declares dedup_by_storage: random packs of a few device storages
/// (1 to 65536 bytes), one storage packed again while earlier packs of it are held, with
/// synchronizations and layer ends between, then every handle unpacked in backward order. A pack
/// of a storage that an earlier pack still holds (its source not handed back) adds nothing to
/// offloaded_bytes, any other adds its bytes (under an opaque predicate, one reported kept adds
/// nothing); every handle unpacks to what its storage held when it was packed; each pack's source
/// is handed back exactly once, and the owner rewrites a storage (new contents, packed anew) only
/// once every pack of it has been handed back, so that a copy shared past that point is caught.
void storage_dedup(executor& ex, const activation_implementation& impl);

/// Every configuration field at its edges (0, 1 and the largest value), all combinations, on a
/// fixed stack of tensors of 0, 1, 63, 64, 4096 and 70000 bytes over three layers and two steps:
/// every result exact, the prefetch and pending bounds held where the implementation honours
/// them, and with prefetch_layers = 0 no tensor uploaded ahead of its unpack().
void config_edges(executor& ex, const activation_implementation& impl);

/// For N = 0, 1, 2, ... the Nth allocation, copy, fill, launch, host function, event record or
/// wait the offloader makes fails, in a random forward and backward pass over a few layers. Each
/// failure reaches the caller as a typed error; a failed pack() leaves the source with the caller
/// (not given back, its bytes untouched), a failed unpack() leaves the tensor packed, and the
/// failed call, retried once, succeeds. Then every unpacked tensor holds what was packed on its
/// device of origin; stats() counts the packs that succeeded, not the attempts (every run counts
/// what the run without a failure counts); tensors left packed go back to their owner when the
/// offloader is destroyed; every source is given back exactly once; and once the offloader is
/// gone it holds nothing (the resource ledger: allocations, streams, events).
void fault_countdown(executor& ex, const activation_implementation& impl);

}  // namespace offloadkit::activation::testing
