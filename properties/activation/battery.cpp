// The activation battery's properties and their list for an implementation descriptor (see
// activation_battery.hpp), and the built-in implementations as descriptors.
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

namespace offloadkit::activation {
namespace {

using testing::activation_implementation;

constexpr std::size_t compute_threads = 32;

/// A random workload: a layer stack, the offloader's options, where unpack runs, how many steps.
struct stack_case {
  std::vector<layer_spec> layers;
  offload_options options;
  int unpack_device = -1;
  int steps = 1;
};

std::string show(const stack_case& c) {
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
stack_case gen_stack(int devices) {
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

void run_steps(executor& driver_ex, offloader& off, training_step& step, const stack_case& c,
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

// ---- round trip --------------------------------------------------------------------------------

/// round_trip under an opaque predicate (defined with the checkers below).
void round_trip_reported(executor& ex, offloader& off, training_step& step, const stack_case& c,
                         std::uint64_t seed);

/// Every tensor comes back bit for bit, and the counters every implementation keeps agree with what
/// was packed: each pack() counted, the tensors below the threshold as kept, the others' bytes as
/// offloaded (checks and benchmarks read them). The threshold is the one the implementation
/// reports (keep_threshold()): the configured one, or 0 for one that has none, such as
/// saved-tensor hooks, which see every tensor.
void round_trip(executor& ex, const activation_implementation& impl) {
  const stack_case c = gen_stack(1);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  auto off = impl.make(ex, c.options);
  if (impl.caps.decision == testing::activation_offload_decision::opaque_predicate) {
    round_trip_reported(ex, *off, step, c, seed);
    return;
  }
  run_steps(ex, *off, step, c, seed);
  const std::size_t threshold = off->keep_threshold();
  std::size_t packed = 0, kept = 0, offloaded = 0;
  for (const layer_spec& l : c.layers) {
    for (const tensor_spec& t : l.saved) {
      packed += 1;
      if (t.bytes() < threshold) {
        kept += 1;
      } else {
        offloaded += t.bytes();
      }
    }
  }
  const auto steps = static_cast<std::size_t>(c.steps);
  const offload_stats st = off->stats();
  if (st.packed != steps * packed || st.kept != steps * kept ||
      st.offloaded_bytes != steps * offloaded) {
    RC_FAIL(off->name() + ": stats() counts packed=" + std::to_string(st.packed) + " kept=" +
            std::to_string(st.kept) + " offloaded_bytes=" + std::to_string(st.offloaded_bytes) +
            ", the steps packed " + std::to_string(steps * packed) + ", kept " +
            std::to_string(steps * kept) + " and offloaded " + std::to_string(steps * offloaded) +
            " bytes at keep_threshold() = " + std::to_string(threshold) + "; " + show(c));
  }
}

// ---- two devices -------------------------------------------------------------------------------

/// Layers on two devices; each case runs one step with unpack on the stream of each tensor's own
/// device, one with it on device 0's and one on device 1's, in a random order. Every tensor must
/// come back where the profile's return device says: on its device of origin (`origin`), also
/// when the stream unpack() is given (and the backward hint before it) belongs to the other
/// device, and when the last work issued before it (the previous layer's compute and checks) ran
/// there; on the device of unpack's stream (`current`), whichever device it was packed from.
void two_devices(executor& ex, const activation_implementation& impl) {
  if (ex.device_count() < 2) {
    RC_SUCCEED("skipped: " + ex.name() + " has " + std::to_string(ex.device_count()) +
               " device(s), needs 2");
  }
  stack_case c = gen_stack(2);
  // The first layer on device 0 and the last on device 1, each with a tensor that is offloaded
  // (not empty, not below the threshold), so that both origins are exercised every case.
  if (c.layers.size() < 2) c.layers.emplace_back();
  c.layers.front().device = 0;
  c.layers.back().device = 1;
  for (layer_spec* l : {&c.layers.front(), &c.layers.back()}) {
    const std::size_t least = std::max<std::size_t>(c.options.keep_threshold, 1);
    const bool offloads = std::any_of(l->saved.begin(), l->saved.end(),
                                      [least](const tensor_spec& t) { return t.bytes() >= least; });
    if (!offloads) {
      tensor_spec t;
      t.shape = {static_cast<std::int64_t>(least + *rc::gen::inRange<std::size_t>(0, 100))};
      l->saved.push_back(t);
    }
  }
  std::vector<int> placements{-1, 0, 1};
  for (int k = *rc::gen::inRange(0, 6); k > 0; --k) {
    std::next_permutation(placements.begin(), placements.end());
  }
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  auto off = impl.make(ex, c.options);
  for (std::size_t i = 0; i < placements.size(); ++i) {
    c.unpack_device = placements[i];
    step_options opt;
    opt.unpack_device = c.unpack_device;
    opt.return_on_unpack_device =
        impl.caps.return_device == testing::activation_return_device::current;
    const step_report rep = step.run(off.get(), seed + i, opt);
    if (!rep.ok()) {
      RC_FAIL(off->name() + " step " + std::to_string(i) + ": " + rep.describe() + "; " + show(c));
    }
  }
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

/// What an offloader that decides by an opaque predicate reports of one pack(): stats() read
/// before and after it. Kept: `kept` grew by one and `offloaded_bytes` by nothing; offloaded:
/// `offloaded_bytes` grew by the tensor's bytes (`shared`: by nothing, for a pack that shares an
/// earlier copy of its storage) and `kept` by nothing. Empty when that holds, else what is wrong.
std::string reported_decision(const offload_stats& before, const offload_stats& after,
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

/// Reads the decision an offloader with an opaque predicate reports for each pack() (stats()
/// before and after it) and checks that it holds: the counters move as reported_decision says,
/// and a tensor reported kept was not copied off: its source is not handed back before its
/// unpack(), which returns it in its own buffer. Offloaded ones are left to the step's checks
/// (exact bytes, sources given back once).
class decision_checker final : public forwarding_offloader {
 public:
  explicit decision_checker(offloader& inner) : forwarding_offloader(inner) {}
  [[nodiscard]] const std::string& violation() const noexcept { return violation_; }

 private:
  struct packed_entry {
    bool kept = false;
    const void* source = nullptr;
    std::size_t bytes = 0;
    std::shared_ptr<bool> given_back;
  };
  void fail(std::string what) {
    if (violation_.empty()) violation_ = std::move(what);
  }
  handle do_pack(tensor t, stream_ref s) override {
    packed_entry e;
    e.source = t.data;
    e.bytes = t.bytes;
    e.given_back = std::make_shared<bool>(false);
    auto owner_release = std::move(t.release);
    t.release = [flag = e.given_back, owner_release] {
      *flag = true;
      if (owner_release) owner_release();
    };
    const offload_stats before = inner_.stats();
    const handle h = inner_.pack(std::move(t), s);
    const std::string wrong = reported_decision(before, inner_.stats(), e.bytes, false, e.kept);
    if (!wrong.empty()) fail("handle " + std::to_string(h.id) + ": " + wrong);
    entries_[h.id] = e;
    return h;
  }
  tensor do_unpack(handle h, stream_ref s) override {
    const bool given_back_before = entries_.count(h.id) != 0 && *entries_[h.id].given_back;
    tensor t = inner_.unpack(h, s);
    const auto it = entries_.find(h.id);
    if (it != entries_.end() && it->second.kept && it->second.bytes > 0) {
      if (given_back_before) {
        fail("handle " + std::to_string(h.id) + " (" + std::to_string(it->second.bytes) +
             " bytes) was reported kept, yet its source was handed back before its unpack()");
      } else if (t.data != it->second.source) {
        fail("handle " + std::to_string(h.id) + " (" + std::to_string(it->second.bytes) +
             " bytes) was reported kept, yet unpack() returned it in another buffer");
      }
    }
    if (it != entries_.end()) entries_.erase(it);
    return t;
  }

  std::map<std::uint64_t, packed_entry> entries_;
  std::string violation_;
};

void round_trip_reported(executor& ex, offloader& off, training_step& step, const stack_case& c,
                         std::uint64_t seed) {
  decision_checker checked(off);
  run_steps(ex, checked, step, c, seed);
  if (!checked.violation().empty()) RC_FAIL(checked.violation() + "; " + show(c));
}

/// Forwards to an offloader and checks after every call that the device memory it allocated
/// never exceeded the prefetch bound plus the restored tensors the caller holds at that moment.
class bound_checker final : public forwarding_offloader {
 public:
  bound_checker(offloader& inner, device_bytes_tracker& tracker, std::size_t bound)
      : forwarding_offloader(inner), tracker_(tracker), bound_(bound) {}
  [[nodiscard]] const std::string& violation() const noexcept { return violation_; }

 private:
  /// The caller's holding may change within a call; the peak may use the larger of the two.
  void check(const char* where, std::size_t held_before) {
    const std::size_t peak = tracker_.peak_since_reset();
    const std::size_t held = std::max(held_before, held_by_caller_);
    // Compared without adding, so that a bound at the largest size_t does not wrap.
    if (peak > held && peak - held > bound_ && violation_.empty()) {
      std::ostringstream os;
      os << "after " << where << ": device bytes held by the offloader peaked at " << peak
         << " > bound " << bound_ << " + restored tensors held by the caller " << held;
      violation_ = os.str();
    }
    tracker_.reset_peak();
  }
  handle do_pack(tensor t, stream_ref s) override {
    void* src = t.data;
    const handle h = inner_.pack(std::move(t), s);
    sources_[h.id] = src;
    check("pack", held_by_caller_);
    return h;
  }
  tensor do_unpack(handle h, stream_ref s) override {
    tensor t = inner_.unpack(h, s);
    // A tensor handed back in its own source buffer is the caller's memory, not the offloader's.
    const std::size_t counted = t.data != sources_[h.id] ? t.bytes : 0;
    sources_.erase(h.id);
    held_by_caller_ += counted;
    check("unpack", held_by_caller_);
    auto inner_release = std::move(t.release);
    t.release = [this, inner_release, counted] {
      const std::size_t before = held_by_caller_;
      if (inner_release) inner_release();
      held_by_caller_ -= counted;
      check("release", before);
    };
    return t;
  }
  void do_forward_layer_end(int layer, stream_ref s) override {
    inner_.forward_layer_end(layer, s);
    check("forward_layer_end", held_by_caller_);
  }
  void do_backward_layer_begin(int layer, stream_ref s) override {
    inner_.backward_layer_begin(layer, s);
    check("backward_layer_begin", held_by_caller_);
  }
  void do_synchronize() override {
    inner_.synchronize();
    check("synchronize", held_by_caller_);
  }

  device_bytes_tracker& tracker_;
  std::size_t bound_;
  std::size_t held_by_caller_ = 0;
  std::map<std::uint64_t, void*> sources_;
  std::string violation_;
};

void check_memory_bound(executor& ex, const activation_implementation& impl, const stack_case& c,
                        std::uint64_t seed) {
  training_step step(ex, c.layers, compute_threads);
  device_bytes_tracker tracker(ex);
  auto off = impl.make(tracker, c.options);
  bound_checker checked(*off, tracker, c.options.prefetch_bytes);
  run_steps(ex, checked, step, c, seed);
  if (!checked.violation().empty()) RC_FAIL(checked.violation() + "; " + show(c));
  RC_ASSERT(off->stats().peak_prefetch_bytes <= c.options.prefetch_bytes);
}

/// A layer of one-dimensional u8 tensors of the given sizes, in pack order.
layer_spec bytes_layer(std::initializer_list<std::size_t> sizes) {
  layer_spec l;
  for (const std::size_t b : sizes) {
    tensor_spec t;
    t.shape = {static_cast<std::int64_t>(b)};
    l.saved.push_back(t);
  }
  return l;
}

/// Inputs that reuse a larger cached buffer for a smaller tensor while a prefetch is decided near
/// the bound. Layer 1's tensor (r bytes) is prefetched, lent, given back and cached; in layer 0 the
/// last packed tensor (q < r bytes, at least half of r less 4 KiB, so the buffer serves it) reuses
/// that buffer, and the next one (p bytes, q < p <= r) may be prefetched only if the r - q bytes
/// the lent buffer holds beyond its tensor count against the bound, which lies in [r, r + p - q).
/// A small top layer keeps layer 1 from being the last one packed (whose sources may be served in
/// place); two or more steps, so that buffers cached in one step meet the next.
stack_case near_bound_reuse_case(std::size_t r, std::size_t q, std::size_t p, std::size_t bound,
                                 int steps) {
  stack_case c;
  c.layers = {bytes_layer({p, q}), bytes_layer({r}), bytes_layer({64})};
  c.options.keep_threshold = 0;
  c.options.prefetch_layers = 1;
  c.options.prefetch_bytes = bound;
  c.steps = steps;
  return c;
}

stack_case gen_near_bound_reuse() {
  using rc::gen::inRange;
  const auto full = [](auto gen) { return *rc::gen::resize(100, std::move(gen)); };
  const std::size_t r = full(inRange<std::size_t>(4096, 65536));
  const std::size_t q = full(inRange<std::size_t>((r - 4096 + 1) / 2 + 1, r));
  const std::size_t p = full(inRange<std::size_t>(q + 1, r + 1));
  const std::size_t bound = full(inRange<std::size_t>(r, r + p - q));
  return near_bound_reuse_case(r, q, p, bound, *rc::gen::element(2, 3));
}

/// Device memory held for prefetch and cache stays within prefetch_bytes plus what the caller
/// holds. Every case first runs one fixed input that reuses a larger cached buffer near the bound
/// (so every run reaches that edge), then a drawn one: a quarter of them from the same family.
void memory_bound(executor& ex, const activation_implementation& impl) {
  check_memory_bound(ex, impl, near_bound_reuse_case(8192, 5000, 7000, 8192, 2), 1);
  const bool near = *rc::gen::element(0, 1, 2, 3) == 0;
  const stack_case c = near ? gen_near_bound_reuse() : gen_stack(1);
  check_memory_bound(ex, impl, c, *rc::gen::arbitrary<std::uint64_t>());
}

// ---- pending-source bound ----------------------------------------------------------------------

/// Forwards to an offloader and checks after every pack() that the sources it still holds while
/// their copies are in flight (packed, above the keep threshold, not given back, not unpacked)
/// stay within max_pending_bytes per device, or that a single source is in flight there.
/// Whether a tensor is kept is read from the threshold the offloader reports, or, for one that
/// decides by an opaque predicate (`reported`), from the stats() it reports around the pack().
class pending_checker final : public forwarding_offloader {
 public:
  pending_checker(offloader& inner, std::size_t bound, bool reported = false)
      : forwarding_offloader(inner), bound_(bound), reported_(reported) {}
  [[nodiscard]] const std::string& violation() const noexcept { return violation_; }

 private:
  struct held {
    std::size_t bytes = 0;
    int device = 0;
    bool given_back = false;
  };
  handle do_pack(tensor t, stream_ref s) override {
    bool kept = t.bytes < inner_.keep_threshold();
    auto entry = std::make_shared<held>(held{t.bytes, t.device, false});
    auto owner_release = std::move(t.release);
    t.release = [entry, owner_release] {
      entry->given_back = true;
      if (owner_release) owner_release();
    };
    const std::size_t kept_before = reported_ ? inner_.stats().kept : 0;
    const handle h = inner_.pack(std::move(t), s);
    if (reported_) kept = inner_.stats().kept > kept_before;
    if (!kept) entries_[h.id] = entry;
    std::size_t pending = 0, count = 0;
    for (const auto& [id, e] : entries_) {
      if (e->given_back || e->device != entry->device) continue;
      pending += e->bytes;
      ++count;
    }
    if (pending > bound_ && count > 1 && violation_.empty()) {
      std::ostringstream os;
      os << "after pack of handle " << h.id << " (" << entry->bytes << " bytes, device "
         << entry->device << (kept ? ", kept" : "") << "): " << count
         << " sources held with copies in flight total " << pending << " bytes > max_pending_bytes "
         << bound_;
      violation_ = os.str();
    }
    return h;
  }
  tensor do_unpack(handle h, stream_ref s) override {
    tensor t = inner_.unpack(h, s);
    entries_.erase(h.id);  // the caller's now, whichever buffer it came back in
    return t;
  }

  std::size_t bound_;
  bool reported_;
  std::map<std::uint64_t, std::shared_ptr<held>> entries_;
  std::string violation_;
};

/// Whether the implementation reports its offload decisions instead of following the threshold.
bool reports_decisions(const activation_implementation& impl) {
  return impl.caps.decision == testing::activation_offload_decision::opaque_predicate;
}

// ---- races -------------------------------------------------------------------------------------

/// Forwards to an offloader with the interposer's delays on only while a call runs: the
/// implementation's own CUDA work (a black box's uploads on its own stream) is held back, while
/// the step's reads of what unpack returned are not, so they cannot mask a missing wait by being
/// late themselves.
class delayed_during_calls final : public forwarding_offloader {
 public:
  delayed_during_calls(offloader& inner, offloadkit::testing::driver_delays& delays)
      : forwarding_offloader(inner), delays_(delays) {
    delays_.set_active(false);
  }

 private:
  handle do_pack(tensor t, stream_ref s) override {
    return delays_.during([&] { return inner_.pack(std::move(t), s); });
  }
  tensor do_unpack(handle h, stream_ref s) override {
    return delays_.during([&] { return inner_.unpack(h, s); });
  }
  void do_forward_layer_end(int layer, stream_ref s) override {
    delays_.during([&] { inner_.forward_layer_end(layer, s); });
  }
  void do_backward_layer_begin(int layer, stream_ref s) override {
    delays_.during([&] { inner_.backward_layer_begin(layer, s); });
  }
  void do_synchronize() override {
    delays_.during([&] { inner_.synchronize(); });
  }

  offloadkit::testing::driver_delays& delays_;
};

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

/// Layers spread over two devices where the executor has them and the implementation brings
/// tensors back to their device of origin; one device otherwise.
int stack_devices(executor& ex, const activation_implementation& impl) {
  return impl.caps.return_device == testing::activation_return_device::origin &&
                 ex.device_count() > 1
             ? 2
             : 1;
}

void races(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  c.unpack_device = -1;  // the device of origin is two_devices' to check; this one sees timing
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  const auto max_delay = std::chrono::microseconds(*rc::gen::element<int>(100, 500, 1500, 5000));
  training_step step(ex, c.layers, compute_threads);
  // The offloader's own CUDA work (a black box's streams) is held back too, where interposed,
  // inside its calls only.
  offloadkit::testing::driver_delays own_work_delays;
  delay_adaptor delays(ex);
  delay_new_streams delayed(delays, max_delay, seed);
  auto off = impl.make(delayed, c.options);
  delayed_during_calls calls(*off, own_work_delays);
  run_steps(ex, calls, step, c, seed);
}

/// With copies held back by delays, sources in flight stay within max_pending_bytes after every
/// pack, and results stay exact.
void pending_bound(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  c.unpack_device = -1;  // the device of origin is two_devices' to check
  c.options.max_pending_bytes =
      *rc::gen::element<std::size_t>(1, 256, 4096, 65536, std::size_t{1} << 20);
  // Half the cases take the bound from the stack: one byte less than two tensors packed one after
  // the other on one device, so that each fits alone and the two together do not.
  struct offloaded {
    std::size_t bytes;
    int device;
  };
  std::vector<offloaded> order;
  for (const layer_spec& l : c.layers) {
    for (const tensor_spec& t : l.saved) {
      if (t.bytes() > 0 && t.bytes() >= c.options.keep_threshold) {
        order.push_back({t.bytes(), l.device});
      }
    }
  }
  std::vector<std::size_t> pairs;  // sums of neighbours on one device
  if (order.size() < 2) {  // small cases: a last layer of two tensors gives the stack a pair
    const std::size_t a =
        std::max<std::size_t>(c.options.keep_threshold, 1 + *rc::gen::element(0, 99, 4095));
    const std::size_t b =
        std::max<std::size_t>(c.options.keep_threshold, 1 + *rc::gen::element(0, 99, 4095));
    c.layers.push_back(bytes_layer({a, b}));
    order.push_back({a, 0});
    order.push_back({b, 0});
  }
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {
    if (order[i].device == order[i + 1].device)
      pairs.push_back(order[i].bytes + order[i + 1].bytes);
  }
  if (!pairs.empty() && *rc::gen::arbitrary<bool>()) {
    c.options.max_pending_bytes = pairs[*rc::gen::inRange<std::size_t>(0, pairs.size())] - 1;
  }
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  delay_adaptor delays(ex);
  delay_new_streams delayed(delays, std::chrono::microseconds(300), seed);
  auto off = impl.make(delayed, c.options);
  pending_checker checked(*off, c.options.max_pending_bytes, reports_decisions(impl));
  run_steps(ex, checked, step, c, seed);
  if (!checked.violation().empty()) RC_FAIL(checked.violation() + "; " + show(c));
}

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

std::string show_arrivals(const std::vector<upload_watcher::arrival>& arrivals) {
  std::ostringstream os;
  os << "unpacks in backward order (step/layer/handle: how):";
  for (const auto& a : arrivals) {
    os << " " << a.step << "/" << a.layer << "/" << a.id << ":"
       << (a.prefetched ? "prefetch#" + std::to_string(a.order)
           : a.demand   ? "demand"
                        : "none");
  }
  return os.str();
}

/// Runs `c` through an upload_watcher on a fresh implementation; returns what it saw.
std::vector<upload_watcher::arrival> watch_uploads(executor& ex,
                                                   const activation_implementation& impl,
                                                   const stack_case& c, std::uint64_t seed) {
  training_step step(ex, c.layers, compute_threads);
  upload_log log(ex);
  auto off = impl.make(log, c.options);
  upload_watcher watched(*off, log);
  step_options opt;
  opt.unpack_device = c.unpack_device;
  for (int i = 0; i < c.steps; ++i) {
    const step_report rep = step.run(&watched, seed + static_cast<std::uint64_t>(i), opt);
    if (!rep.ok()) RC_FAIL(off->name() + " step " + std::to_string(i) + ": " + rep.describe());
    watched.next_step();
  }
  return watched.arrivals();
}

/// Prefetch copies are issued in backward order: among the tensors that arrived by prefetch, in
/// the order backward unpacks them, the uploads that brought them were issued in that same order.
/// A prefetch in another order keeps every byte right and loses the overlap: the tensor needed
/// next waits behind one needed later. Decided exactly from the copies the executor was asked for.
void prefetch_order(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  c.unpack_device = -1;  // the device of origin is two_devices' to check
  const auto arrivals = watch_uploads(ex, impl, c, *rc::gen::arbitrary<std::uint64_t>());
  const upload_watcher::arrival* last = nullptr;
  for (const auto& a : arrivals) {
    if (!a.prefetched) continue;
    if (last != nullptr && a.order < last->order) {
      RC_FAIL("handle " + std::to_string(a.id) + " is unpacked after handle " +
              std::to_string(last->id) + " but its prefetch was issued before (upload #" +
              std::to_string(a.order) + " < #" + std::to_string(last->order) + "); " +
              show_arrivals(arrivals) + "; " + show(c));
    }
    last = &a;
  }
}

/// For a schedule that fits the bound (prefetch_bytes above everything offloaded, at least the
/// layer whose backward begins in the window), steps after the first upload nothing on demand:
/// every tensor that is uploaded at all was prefetched before its unpack().
void steady_demand_uploads(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  c.unpack_device = -1;
  c.options.prefetch_bytes = std::size_t{1} << 30;
  c.options.prefetch_layers = *rc::gen::inRange(1, 4);
  c.steps = *rc::gen::inRange(2, 4);
  const auto arrivals = watch_uploads(ex, impl, c, *rc::gen::arbitrary<std::uint64_t>());
  for (const auto& a : arrivals) {
    if (a.step > 0 && a.demand) {
      RC_FAIL("step " + std::to_string(a.step) + ": handle " + std::to_string(a.id) + " of layer " +
              std::to_string(a.layer) + " was uploaded on demand in steady state; " +
              show_arrivals(arrivals) + "; " + show(c));
    }
  }
}

// ---- a released source reused on another stream ----------------------------------------------

/// The owner of a source gives it back to use at once on a stream of its own, another than the one
/// that produced it and handed it to pack(): a random sequence of packs (each buffer from the
/// owner's free list when one fits, overwritten with a poison byte on the reuse stream the moment
/// it comes back), unpacks on either stream, layer hints and synchronizations, with delays on the
/// offloader's own streams. A source given back while its copy may still read it (ordered on the
/// producer's stream only, say) hands the poison to the host copy. Every unpacked tensor holds
/// what was packed once the offloader's and the caller's work is done.
void source_reuse(executor& ex, const activation_implementation& impl) {
  using rc::gen::inRange;
  offload_options o;
  o.keep_threshold = *rc::gen::element<std::size_t>(0, 0, 64);
  o.max_pending_bytes = *rc::gen::element<std::size_t>(0, 0, 1, 4096);
  o.prefetch_bytes = *rc::gen::element<std::size_t>(0, 65536, std::size_t{1} << 30);
  o.prefetch_layers = *inRange(0, 3);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  // The offloader's own CUDA work, where interposed, inside its calls only.
  offloadkit::testing::driver_delays own_work_delays;
  delay_adaptor delays(ex);
  delay_new_streams delayed(delays, std::chrono::microseconds(*rc::gen::element(300, 1500)), seed);
  stream produce(ex), reuse(ex);

  std::deque<buffer> all;                       // every buffer the owner allocated
  std::multimap<std::size_t, void*> free_list;  // given back, by size
  struct packed_tensor {
    handle h;
    std::vector<unsigned char> contents;
    int layer = 0;
  };
  std::vector<packed_tensor> live;
  struct unpacked_tensor {
    tensor t;
    std::vector<unsigned char> expected;
    stream_ref s;
    buffer check;
  };
  std::vector<unpacked_tensor> done;
  // Destroyed first, also when a check fails: the work queued on both streams ends before the
  // buffers it uses go.
  struct sync_at_exit {
    executor& ex;
    stream_ref a, b;
    ~sync_at_exit() {
      // A destructor reports nothing: the check has already failed or is about to.
      try {
        ex.synchronize(a);
        ex.synchronize(b);
      } catch (...) {  // NOLINT(bugprone-empty-catch)
      }
    }
  } const drain{ex, produce.ref(), reuse.ref()};
  std::size_t released = 0, packed_count = 0;
  stream_ref caller_stream{};  // set while the caller releases an unpacked tensor
  std::uint64_t pattern = seed;
  int layer = 0;
  bool backward = false;
  {
    auto made = impl.make(delayed, o);
    auto off = std::make_unique<delayed_during_calls>(*made, own_work_delays);
    const auto steps = *rc::gen::resize(100, inRange(1, 40));
    for (int step = 0; step < steps; ++step) {
      const int op = *rc::gen::element(0, 0, 0, 1, 1, 2, 3);
      if (op == 0 && !backward) {  // pack a tensor produced on `produce`
        const std::size_t bytes = *rc::gen::element<std::size_t>(0, 1, 64, 100, 4096, 65536);
        void* p = nullptr;
        const auto it = free_list.find(bytes);
        if (it != free_list.end()) {
          p = it->second;
          free_list.erase(it);
          ex.synchronize(reuse);  // the owner's own poison write on the reuse stream comes first
        } else {
          all.emplace_back(ex, memory_kind::device, bytes);
          p = all.back().data();
        }
        packed_tensor pt;
        pt.layer = layer;
        pt.contents.resize(bytes);
        for (auto& b : pt.contents) {
          pattern = pattern * 6364136223846793005ull + 1442695040888963407ull;
          b = static_cast<unsigned char>(pattern >> 56);
        }
        buffer staging(ex, memory_kind::pinned, std::max<std::size_t>(bytes, 1));
        if (bytes > 0) {
          std::memcpy(staging.data(), pt.contents.data(), bytes);
          ex.copy(p, staging.data(), bytes, produce);
        }
        ex.synchronize(produce);  // the staging buffer goes at the end of this scope
        tensor t;
        t.data = p;
        t.bytes = bytes;
        t.shape = {static_cast<std::int64_t>(bytes)};
        t.release = [&ex, &free_list, &released, &reuse, &caller_stream, p, bytes] {
          // Reused at once, on the owner's other stream. When the caller itself hands the buffer
          // back (a kept tensor is returned as it was packed), its own reads are only issued on
          // the stream it unpacked on, and it reuses the buffer there.
          const stream_ref on = caller_stream.native != nullptr ? caller_stream : reuse.ref();
          if (bytes > 0) ex.fill(p, 0xA5, bytes, on);
          free_list.emplace(bytes, p);
          ++released;
        };
        pt.h = off->pack(std::move(t), produce);
        ++packed_count;
        live.push_back(std::move(pt));
      } else if (op == 1 && !live.empty()) {  // unpack the last packed, on either stream
        if (!backward) {
          off->backward_layer_begin(live.back().layer, produce);
          backward = true;
        }
        packed_tensor pt = std::move(live.back());
        live.pop_back();
        unpacked_tensor u;
        u.s = *rc::gen::arbitrary<bool>() ? produce.ref() : reuse.ref();
        u.t = off->unpack(pt.h, u.s);
        u.expected = std::move(pt.contents);
        u.check = buffer(ex, memory_kind::pinned, std::max<std::size_t>(u.t.bytes, 1));
        if (u.t.bytes > 0) ex.copy(u.check.data(), u.t.data, u.t.bytes, u.s);
        caller_stream = u.s;
        if (u.t.release) u.t.release();  // its reads are issued on u.s
        caller_stream = {};
        u.t.release = nullptr;
        done.push_back(std::move(u));
        if (!live.empty() && live.back().layer != pt.layer) {
          off->backward_layer_begin(live.back().layer, produce);
        }
      } else if (op == 2 && !backward) {  // a layer ends
        off->forward_layer_end(layer++, produce);
      } else if (op == 3) {
        off->synchronize();
      }
    }
    while (!live.empty()) {
      packed_tensor pt = std::move(live.back());
      live.pop_back();
      unpacked_tensor u;
      u.s = produce.ref();
      u.t = off->unpack(pt.h, u.s);
      u.expected = std::move(pt.contents);
      u.check = buffer(ex, memory_kind::pinned, std::max<std::size_t>(u.t.bytes, 1));
      if (u.t.bytes > 0) ex.copy(u.check.data(), u.t.data, u.t.bytes, u.s);
      caller_stream = u.s;
      if (u.t.release) u.t.release();
      caller_stream = {};
      u.t.release = nullptr;
      done.push_back(std::move(u));
    }
    off->synchronize();
    ex.synchronize(produce);
    ex.synchronize(reuse);
    for (std::size_t i = 0; i < done.size(); ++i) {
      const auto* got = done[i].check.as<unsigned char>();
      const auto& want = done[i].expected;
      const auto m = std::mismatch(want.begin(), want.end(), got);
      if (m.first != want.end()) {
        RC_FAIL("unpacked tensor " + std::to_string(i) + " of " + std::to_string(done.size()) +
                " (" + std::to_string(want.size()) + " bytes): byte " +
                std::to_string(m.first - want.begin()) + " is " + std::to_string(int(*m.second)) +
                ", expected " + std::to_string(int(*m.first)) +
                " (0xa5 is the owner's reuse of a source given back)");
      }
    }
  }
  ex.synchronize(reuse);
  RC_ASSERT(released == packed_count);
}

// ---- the producer's last write, late on the caller's stream -------------------------------------

/// The producer's last write of a source is late on the stream pack() is given: a long hold, then
/// the write, then pack() on that stream at once. pack() copies the source in the order of that
/// stream, so the unpacked tensor must hold the late write; an offloader whose copy runs on a
/// stream of its own without waiting for the caller's copies what the source held before it. The
/// hold (300 to 400 ms, drawn per case) outlasts any bounded wait shorter than that (the other
/// properties' writes, large ones on a loaded machine included, land well within it). The tensor
/// is offloaded whatever the options (keep_threshold 0) and has at least 64 bytes, so that the two
/// patterns differ.
void caller_writes_late(executor& ex, const activation_implementation& impl) {
  offload_options o;
  o.max_pending_bytes = *rc::gen::element<std::size_t>(0, 1, std::size_t{1} << 20);
  o.prefetch_layers = *rc::gen::inRange(0, 3);
  const std::size_t bytes = *rc::gen::inRange<std::size_t>(64, 65536);
  const auto before = *rc::gen::arbitrary<std::uint64_t>();
  const auto late = *rc::gen::distinctFrom(before);
  const int delay_us = *rc::gen::inRange(300000, 400000);
  delay_adaptor delays(ex);
  stream s(ex);
  buffer source(ex, memory_kind::device, bytes);
  buffer written(ex, memory_kind::pinned, bytes), expected(ex, memory_kind::pinned, bytes);
  buffer got(ex, memory_kind::pinned, bytes);
  const auto fill_host = [bytes](buffer& b, std::uint64_t x) {
    auto* p = b.as<unsigned char>();
    for (std::size_t i = 0; i < bytes; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = static_cast<unsigned char>(x >> 56);
    }
  };
  fill_host(written, before);
  fill_host(expected, late);
  ex.copy(source.data(), written.data(), bytes, s);
  ex.synchronize(s);
  std::size_t released = 0;
  {
    auto off = impl.make(delays, o);
    // A failed check unwinds: the late write and the offloader's reads end before the buffers go.
    const offloadkit::testing::sync_on_exit guard(ex, {s});
    tensor t;
    t.data = source.data();
    t.bytes = bytes;
    t.shape = {static_cast<std::int64_t>(bytes)};
    t.release = [&released] { ++released; };
    RC_LOG() << "hold of " << delay_us << " us on the caller's stream, then its last write\n";
    delays.delay_next(std::chrono::microseconds(delay_us), 1, s);
    delays.copy(source.data(), expected.data(), bytes, s);
    const handle h = off->pack(std::move(t), s);
    delays.clear();
    off->forward_layer_end(0, s);
    off->backward_layer_begin(0, s);
    tensor back = off->unpack(h, s);
    ex.copy(got.data(), back.data, bytes, s);
    if (back.release) back.release();  // its read is issued on s
    off->synchronize();
    ex.synchronize(s);
  }
  RC_ASSERT(released == 1u);
  const auto* want = expected.as<unsigned char>();
  const auto* have = got.as<unsigned char>();
  const auto m = std::mismatch(want, want + bytes, have);
  if (m.first != want + bytes) {
    const std::size_t i = static_cast<std::size_t>(m.first - want);
    RC_FAIL(offloadkit::detail::concat("unpacked tensor (", bytes, " bytes): byte ", i, " is ",
                                       int(*m.second), ", expected ", int(*m.first),
                                       " (the write before the late one left ",
                                       int(written.as<unsigned char>()[i]), ")"));
  }
}

// ---- storage dedup -----------------------------------------------------------------------------

/// For an implementation that declares dedup_by_storage: random packs of a few device storages
/// (1 to 65536 bytes), one storage packed again while earlier packs of it are held, with
/// synchronizations and layer ends between, then every handle unpacked in backward order. A pack
/// of a storage that an earlier pack still holds (its source not handed back) adds nothing to
/// offloaded_bytes, any other adds its bytes (under an opaque predicate, one reported kept adds
/// nothing); every handle unpacks to what its storage held when it was packed; each pack's source
/// is handed back exactly once, and the owner rewrites a storage (new contents, packed anew) only
/// once every pack of it has been handed back, so that a copy shared past that point is caught.
void storage_dedup(executor& ex, const activation_implementation& impl) {
  using rc::gen::inRange;
  offload_options o;
  o.keep_threshold = 0;
  o.max_pending_bytes = *rc::gen::element<std::size_t>(0, 0, 0, 4096);
  o.prefetch_bytes = *rc::gen::element<std::size_t>(0, 65536, std::size_t{1} << 30);
  o.prefetch_layers = *inRange(0, 3);
  struct storage {
    buffer mem;
    std::size_t bytes = 0;
    int value = 0;
    int held = 0;  ///< packs of it not handed back
  };
  std::vector<storage> storages;
  const int n_storages = *rc::gen::resize(100, inRange(1, 4));
  for (int k = 0; k < n_storages; ++k) {
    const std::size_t bytes = *rc::gen::element<std::size_t>(1, 64, 4096, 65536);
    storages.push_back({buffer(ex, memory_kind::device, bytes), bytes, 0, 0});
  }
  stream s(ex);
  buffer check(ex, memory_kind::pinned, 65536);
  const offloadkit::testing::sync_on_exit drain(ex, {s});
  struct pack_record {
    std::size_t storage = 0;
    int value = 0;
    int layer = 0;
    handle h;
    std::shared_ptr<int> released = std::make_shared<int>(0);
  };
  std::vector<pack_record> packs;
  std::ostringstream log;  // the calls, for the failure message
  int next_value = 1;
  {
    auto off = impl.make(ex, o);
    int layer = 0;
    const int steps = *rc::gen::resize(100, inRange(1, 24));
    for (int step = 0; step < steps; ++step) {
      const int op = *rc::gen::element(0, 0, 0, 0, 1, 2);
      if (op == 1) {
        off->synchronize();
        log << " sync";
        continue;
      }
      if (op == 2) {
        off->forward_layer_end(layer++, s);
        log << " end" << layer - 1;
        continue;
      }
      const auto k = *rc::gen::inRange<std::size_t>(0, storages.size());
      storage& st = storages[k];
      if (st.held == 0) {  // the owner's again: new contents
        st.value = next_value++ % 250 + 1;
        ex.fill(st.mem.data(), st.value, st.bytes, s);
      }
      // Shared: an earlier pack of this storage still holds it.
      const bool shared = st.held > 0;
      pack_record r;
      r.storage = k;
      r.value = st.value;
      r.layer = layer;
      tensor t;
      t.data = st.mem.data();
      t.bytes = st.bytes;
      t.shape = {static_cast<std::int64_t>(st.bytes)};
      t.release = [&ex, &s, &st, released = r.released] {
        ++*released;
        if (--st.held == 0) ex.fill(st.mem.data(), 0xEE, st.bytes, s);  // reused at once
      };
      const offload_stats before = off->stats();
      st.held += 1;
      r.h = off->pack(std::move(t), s);
      bool kept = false;
      std::string wrong = reported_decision(before, off->stats(), st.bytes, shared, kept);
      if (wrong.empty() && kept && !reports_decisions(impl)) {
        wrong = "a tensor of " + std::to_string(st.bytes) + " bytes was kept at keep_threshold 0";
      }
      log << " pack(storage " << k << ", " << st.bytes << " bytes, value " << r.value
          << (shared ? ", shared" : "") << ")";
      if (!wrong.empty())
        RC_FAIL("pack " + std::to_string(packs.size()) + ": " + wrong + ";" + log.str());
      packs.push_back(r);
    }
    for (std::size_t j = packs.size(); j-- > 0;) {
      const pack_record& r = packs[j];
      if (j + 1 == packs.size() || packs[j + 1].layer != r.layer) {
        off->backward_layer_begin(r.layer, s);
      }
      tensor back = off->unpack(r.h, s);
      const std::size_t bytes = storages[r.storage].bytes;
      if (back.bytes != bytes) {
        RC_FAIL(offloadkit::detail::concat("pack ", j, " came back with ", back.bytes,
                                           " bytes, packed ", bytes, ";", log.str()));
      }
      ex.copy(check.data(), back.data, bytes, s);
      ex.synchronize(s);
      const auto* got = check.as<unsigned char>();
      for (std::size_t b = 0; b < bytes; ++b) {
        if (got[b] != static_cast<unsigned char>(r.value)) {
          RC_FAIL(offloadkit::detail::concat("pack ", j, " (storage ", r.storage, "): byte ", b,
                                             " of ", bytes, " is ", int(got[b]), ", expected ",
                                             r.value, " (0xee: the owner's reuse);", log.str()));
        }
      }
      if (back.release) back.release();
    }
    off->synchronize();
  }
  ex.synchronize(s);
  for (std::size_t j = 0; j < packs.size(); ++j) {
    if (*packs[j].released != 1) {
      RC_FAIL(offloadkit::detail::concat("pack ", j, " (storage ", packs[j].storage,
                                         ")'s source was handed back ", *packs[j].released,
                                         " times, not once;", log.str()));
    }
  }
}

// ---- configuration edges -----------------------------------------------------------------------

/// Every configuration field at its edges (0, 1 and the largest value), all combinations, on a
/// fixed stack of tensors of 0, 1, 63, 64, 4096 and 70000 bytes over three layers and two steps:
/// every result exact, the prefetch and pending bounds held where the implementation honours
/// them, and with prefetch_layers = 0 no tensor uploaded ahead of its unpack().
void config_edges(executor& ex, const activation_implementation& impl) {
  const std::size_t big = std::numeric_limits<std::size_t>::max();
  stack_case base;
  base.layers = {bytes_layer({0, 70000, 1}), bytes_layer({4096, 63}), bytes_layer({64, 4096})};
  base.steps = 2;
  int combination = 0;
  for (const std::size_t keep : {std::size_t{0}, std::size_t{1}, big}) {
    for (const std::size_t prefetch_bytes : {std::size_t{0}, std::size_t{1}, big}) {
      for (const int layers : {0, 1, std::numeric_limits<int>::max()}) {
        for (const std::size_t pending : {std::size_t{0}, std::size_t{1}, big}) {
          stack_case c = base;
          c.options.keep_threshold = keep;
          c.options.prefetch_bytes = prefetch_bytes;
          c.options.prefetch_layers = layers;
          c.options.max_pending_bytes = pending;
          const std::uint64_t seed = 1000 + static_cast<std::uint64_t>(combination++);
          training_step step(ex, c.layers, compute_threads);
          device_bytes_tracker tracker(ex);
          upload_log log(tracker);
          auto off = impl.make(log, c.options);
          bound_checker bounded(*off, tracker, impl.caps.prefetch_bound ? prefetch_bytes : big);
          pending_checker pended(bounded, impl.caps.pending_bound && pending != 0 ? pending : big,
                                 reports_decisions(impl));
          upload_watcher watched(pended, log);
          run_steps(ex, watched, step, c, seed);
          if (!bounded.violation().empty()) RC_FAIL(bounded.violation() + "; " + show(c));
          if (!pended.violation().empty()) RC_FAIL(pended.violation() + "; " + show(c));
          if (layers == 0) {
            for (const auto& a : watched.arrivals()) {
              if (a.prefetched) {
                RC_FAIL("prefetch_layers = 0, yet handle " + std::to_string(a.id) +
                        " was uploaded before its unpack(); " + show(c));
              }
            }
          }
        }
      }
    }
  }
}

// ---- fault countdown ---------------------------------------------------------------------------

/// For N = 0, 1, 2, ... the Nth allocation, copy, fill, launch, host function, event record or
/// wait the offloader makes fails, in a random forward and backward pass over a few layers. Each
/// failure reaches the caller as a typed error; a failed pack() leaves the source with the caller
/// (not given back, its bytes untouched), a failed unpack() leaves the tensor packed, and the
/// failed call, retried once, succeeds. Then every unpacked tensor holds what was packed on its
/// device of origin; stats() counts the packs that succeeded, not the attempts (every run counts
/// what the run without a failure counts); tensors left packed go back to their owner when the
/// offloader is destroyed; every source is given back exactly once; and once the offloader is
/// gone it holds nothing (the resource ledger: allocations, streams, events).
void fault_countdown(executor& ex, const activation_implementation& impl) {
  using rc::gen::inRange;
  struct planned {
    std::size_t bytes;
    int layer;
  };
  std::vector<planned> plan;
  // At full size: rapidcheck scales inRange by the case's size, which would leave the first cases
  // without tensors. The first layer has at least one.
  const int layers = *rc::gen::resize(100, inRange(1, 4));
  for (int l = 0; l < layers; ++l) {
    for (int k = *rc::gen::resize(100, inRange(l == 0 ? 1 : 0, 4)); k > 0; --k) {
      plan.push_back({*rc::gen::element<std::size_t>(0, 1, 64, 3000, 65536), l});
    }
  }
  offload_options o;
  o.keep_threshold = *rc::gen::element<std::size_t>(0, 0, 64, 4096);
  o.prefetch_bytes = *rc::gen::element<std::size_t>(0, 8192, std::size_t{1} << 20);
  o.prefetch_layers = *inRange(0, 3);
  o.max_pending_bytes = *rc::gen::element<std::size_t>(0, 1, std::size_t{1} << 20);
  // The last tensors of the backward pass are never unpacked: destruction gives them back.
  const std::size_t left_packed =
      plan.empty() ? 0 : *rc::gen::element<std::size_t>(0, 0, 0, 1, plan.size());
  RC_TAG(offloadkit::detail::concat(plan.size(), " tensors"));
  RC_LOG() << "keep_threshold=" << o.keep_threshold << " prefetch_bytes=" << o.prefetch_bytes
           << " prefetch_layers=" << o.prefetch_layers
           << " max_pending_bytes=" << o.max_pending_bytes << " left_packed=" << left_packed
           << " tensors (layer:bytes):";
  for (const planned& p : plan) RC_LOG() << " " << p.layer << ":" << p.bytes;
  RC_LOG() << "\n";

  stream s(ex);
  std::vector<buffer> sources;
  sources.reserve(plan.size());
  for (const planned& p : plan) {
    sources.emplace_back(ex, memory_kind::device, std::max<std::size_t>(p.bytes, 1));
  }
  std::size_t largest = 1;
  for (const planned& p : plan) largest = std::max(largest, p.bytes);
  buffer check(ex, memory_kind::pinned, largest);
  const offloadkit::testing::sync_on_exit drain(ex, {s});
  // The bytes of `p` (device memory) at the end of s's work, against the value tensor i holds.
  const auto holds = [&](const void* p, std::size_t bytes, int value) -> std::string {
    if (bytes == 0) return {};
    ex.copy(check.data(), p, bytes, s);
    ex.synchronize(s);
    const auto* got = check.as<unsigned char>();
    for (std::size_t b = 0; b < bytes; ++b) {
      if (got[b] != static_cast<unsigned char>(value)) {
        return offloadkit::detail::concat("byte ", b, " of ", bytes, " is ", int(got[b]),
                                          ", expected ", value);
      }
    }
    return {};
  };
  // Per run: the call that failed (empty in the last run, where none did) and what stats() said.
  struct counted {
    std::string failed_call;
    offload_stats stats;
  };
  std::vector<counted> runs;

  offloadkit::testing::run_fault_countdown(
      ex, offloadkit::testing::offload_fault_kinds(), [&](offloadkit::testing::countdown_run run) {
        const auto value_of = [&run](std::size_t i) {
          return static_cast<int>((i * 37 + run.n * 11) % 255 + 1);
        };
        std::vector<int> released(plan.size(), 0);
        std::string failed_call;  // the call that failed in this run, for messages
        // Runs `call`; on an injected failure checks it with `after_failure`, disarms and runs it
        // once more, which must succeed.
        const auto retried = [&](const std::string& what, auto&& call, auto&& after_failure) {
          try {
            return call();
          } catch (const std::exception& e) {
            offloadkit::testing::expect_injected(e, what);
            if (!failed_call.empty()) {
              RC_FAIL(what + " failed after " + failed_call + " had failed, with one fault armed");
            }
            failed_call = what;
            after_failure();
            run.faults.disarm();
            return call();
          }
        };
        const auto nothing = [] {};
        {
          auto off = impl.make(run.ex, o);
          // A layer hint (forward_layer_end or backward_layer_begin), retried like any call.
          const auto hint = [&](const char* name, void (offloader::*call)(int, stream_ref),
                                int layer) {
            retried(
                offloadkit::detail::concat(name, "(", layer, ")"),
                [&] {
                  ((*off).*call)(layer, s);
                  return 0;
                },
                nothing);
          };
          std::vector<handle> handles(plan.size());
          for (std::size_t i = 0; i < plan.size(); ++i) {
            const planned& p = plan[i];
            void* data = sources[i].data();
            ex.fill(data, value_of(i), std::max<std::size_t>(p.bytes, 1), s);
            const auto pack_once = [&] {
              tensor t;
              t.data = data;
              t.bytes = p.bytes;
              t.shape = {static_cast<std::int64_t>(p.bytes)};
              t.release = [&released, &ex, &s, i, data, bytes = p.bytes] {
                ++released[i];
                ex.fill(data, 0xEE, std::max<std::size_t>(bytes, 1), s);  // reused at once
              };
              return off->pack(std::move(t), s);
            };
            handles[i] = retried("pack of tensor " + std::to_string(i), pack_once, [&] {
              if (released[i] != 0) {
                RC_FAIL(offloadkit::detail::concat(
                    "a failed pack of tensor ", i, " gave its source back ", released[i],
                    " time(s): the caller still owns it and will pack it again"));
              }
              const std::string diff = holds(data, p.bytes, value_of(i));
              if (!diff.empty()) {
                RC_FAIL(offloadkit::detail::concat("a failed pack of tensor ", i,
                                                   " changed its source: ", diff));
              }
            });
            if (i + 1 == plan.size() || plan[i + 1].layer != p.layer) {
              hint("forward_layer_end", &offloader::forward_layer_end, p.layer);
            }
          }
          const std::size_t unpacked = plan.size() - left_packed;
          for (std::size_t j = 0; j < unpacked; ++j) {
            const std::size_t i = plan.size() - 1 - j;
            const planned& p = plan[i];
            if (j == 0 || plan[i + 1].layer != p.layer) {
              hint("backward_layer_begin", &offloader::backward_layer_begin, p.layer);
            }
            tensor back = retried(
                "unpack of tensor " + std::to_string(i), [&] { return off->unpack(handles[i], s); },
                nothing);
            if (back.device != 0 || back.bytes != p.bytes) {
              RC_FAIL(offloadkit::detail::concat("tensor ", i, " came back with ", back.bytes,
                                                 " bytes on device ", back.device, ", packed ",
                                                 p.bytes, " bytes on device 0"));
            }
            const std::string diff = holds(back.data, back.bytes, value_of(i));
            if (!diff.empty()) {
              RC_FAIL(offloadkit::detail::concat(
                  "unpacked tensor ", i, ": ", diff,
                  failed_call.empty() ? std::string() : " (" + failed_call + " had failed)"));
            }
            if (back.release) back.release();
          }
          retried(
              "synchronize()",
              [&] {
                off->synchronize();
                return 0;
              },
              nothing);
          runs.push_back({failed_call, off->stats()});
          run.faults.disarm();  // destruction has no caller to report to
        }
        ex.synchronize(s);
        for (std::size_t i = 0; i < plan.size(); ++i) {
          if (released[i] != 1) {
            RC_FAIL(offloadkit::detail::concat(
                "tensor ", i, "'s source was given back ", released[i], " times, not once",
                failed_call.empty() ? std::string() : " (" + failed_call + " had failed)",
                i >= plan.size() - left_packed ? "; it was left packed at destruction" : ""));
          }
        }
      });
  // The packs that succeeded are counted, not the attempts: every run, whatever failed in it,
  // counts what the last run, where nothing failed, counts.
  const offload_stats& clean = runs.back().stats;
  for (const counted& r : runs) {
    if (r.stats.packed != clean.packed || r.stats.kept != clean.kept ||
        r.stats.offloaded_bytes != clean.offloaded_bytes) {
      RC_FAIL(offloadkit::detail::concat(
          "with ", r.failed_call, " failing once, stats() counts packed=", r.stats.packed,
          " kept=", r.stats.kept, " offloaded_bytes=", r.stats.offloaded_bytes,
          "; with no call failing it counts ", clean.packed, ", ", clean.kept, " and ",
          clean.offloaded_bytes));
    }
  }
}

}  // namespace

}  // namespace offloadkit::activation

namespace offloadkit::testing {

std::vector<check_case> activation_battery(const activation_implementation& impl) {
  const activation_capabilities& caps = impl.caps;
  battery_list<activation_implementation> list("activation", impl);
  list.add("round_trip", &activation::round_trip, 150);
  list.add("two_devices", &activation::two_devices, 100).min_devices = 2;
  list.add_if(caps.prefetch_bound, "prefetch_memory_bound", &activation::memory_bound, 150,
              "profile says prefetch_bytes is not honoured (prefetch_bound not declared)");
  list.add("races_with_delays", &activation::races, 100);
  list.add_if(caps.pending_bound, "pending_source_bound", &activation::pending_bound, 100,
              "profile says max_pending_bytes is not honoured (pending_bound not declared)");
  list.add("source_reuse_other_stream", &activation::source_reuse, 60);
  // Every profile copies a source in the order of the caller's stream: a hold of 300 to 400 ms a
  // case.
  list.add("caller_writes_late", &activation::caller_writes_late, 5);
  const std::string no_prefetch =
      "profile says nothing is uploaded ahead of unpack() (backward_prefetch not declared)";
  list.add_if(caps.backward_prefetch, "prefetch_order", &activation::prefetch_order, 100,
              no_prefetch);
  list.add_if(caps.backward_prefetch, "steady_state_demand_uploads",
              &activation::steady_demand_uploads, 60, no_prefetch);
  list.add_if(caps.dedup == activation_dedup::by_storage, "storage_dedup",
              &activation::storage_dedup, 100,
              "profile says every offloaded pack is copied on its own (dedup_by_storage not "
              "declared)");
  // Deterministic: the same edge configurations every case, so one case is the whole check.
  list.add("config_edges", &activation::config_edges, 1);
  list.add_if(impl.support.executor_allocations, "fault_countdown", &activation::fault_countdown,
              25, allocations_not_through_executor());
  return std::move(list).take();
}

activation_implementation reference_activation_implementation() {
  activation_implementation impl;
  impl.name = "reference";
  impl.make = [](executor& ex, const activation::offload_options& o) {
    return std::unique_ptr<activation::offloader>(
        std::make_unique<activation::reference_offloader>(ex, o));
  };
  return impl;
}

activation_implementation optimized_activation_implementation() {
  activation_implementation impl;
  impl.name = "optimized";
  impl.caps.backward_prefetch = true;
  impl.make = [](executor& ex, const activation::offload_options& o) {
    return std::unique_ptr<activation::offloader>(
        std::make_unique<activation::async_offloader>(ex, o));
  };
  return impl;
}

std::vector<activation_implementation> builtin_activation_implementations() {
  return {reference_activation_implementation(), optimized_activation_implementation()};
}

std::vector<check_case> activation_checks() {
  std::vector<check_case> cases;
  for (const activation_implementation& impl : builtin_activation_implementations()) {
    for (check_case& c : activation_battery(impl)) cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace offloadkit::testing
