// The activation battery's properties and their list for an implementation descriptor (see
// activation_battery.hpp), and the built-in implementations as descriptors.
#include <rapidcheck.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <utility>

#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/adaptors.hpp"
#include "offloadkit/testing/activation_battery.hpp"
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

void round_trip(executor& ex, const activation_implementation& impl) {
  const stack_case c = gen_stack(1);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  auto off = impl.make(ex, c.options);
  run_steps(ex, *off, step, c, seed);
}

// ---- two devices -------------------------------------------------------------------------------

void two_devices(executor& ex, const activation_implementation& impl) {
  if (ex.device_count() < 2) {
    RC_SUCCEED("skipped: " + ex.name() + " has " + std::to_string(ex.device_count()) +
               " device(s), needs 2");
  }
  stack_case c = gen_stack(2);
  // At least one layer on each device, so that both origins are exercised every case.
  c.layers.front().device = 0;
  if (c.layers.size() > 1) c.layers.back().device = 1;
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  auto off = impl.make(ex, c.options);
  run_steps(ex, *off, step, c, seed);
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
    if (peak > bound_ + held && violation_.empty()) {
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

void memory_bound(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(1);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  device_bytes_tracker tracker(ex);
  auto off = impl.make(tracker, c.options);
  bound_checker checked(*off, tracker, c.options.prefetch_bytes);
  run_steps(ex, checked, step, c, seed);
  if (!checked.violation().empty()) RC_FAIL(checked.violation() + "; " + show(c));
  RC_ASSERT(off->stats().peak_prefetch_bytes <= c.options.prefetch_bytes);
}

// ---- pending-source bound ----------------------------------------------------------------------

/// Forwards to an offloader and checks after every pack() that the sources it still holds while
/// their copies are in flight (packed, above the keep threshold, not given back, not unpacked)
/// stay within max_pending_bytes per device, or that a single source is in flight there.
class pending_checker final : public forwarding_offloader {
 public:
  pending_checker(offloader& inner, std::size_t bound)
      : forwarding_offloader(inner), bound_(bound) {}
  [[nodiscard]] const std::string& violation() const noexcept { return violation_; }

 private:
  struct held {
    std::size_t bytes = 0;
    int device = 0;
    bool given_back = false;
  };
  handle do_pack(tensor t, stream_ref s) override {
    const bool kept = t.bytes < inner_.keep_threshold();
    auto entry = std::make_shared<held>(held{t.bytes, t.device, false});
    auto owner_release = std::move(t.release);
    t.release = [entry, owner_release] {
      entry->given_back = true;
      if (owner_release) owner_release();
    };
    const handle h = inner_.pack(std::move(t), s);
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
  std::map<std::uint64_t, std::shared_ptr<held>> entries_;
  std::string violation_;
};

// ---- races -------------------------------------------------------------------------------------

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
  return impl.caps.origin_device && ex.device_count() > 1 ? 2 : 1;
}

void races(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  const auto max_delay = std::chrono::microseconds(*rc::gen::element<int>(100, 500, 1500));
  training_step step(ex, c.layers, compute_threads);
  delay_adaptor delays(ex);
  delay_new_streams delayed(delays, max_delay, seed);
  auto off = impl.make(delayed, c.options);
  run_steps(ex, *off, step, c, seed);
}

/// With copies held back by delays, sources in flight stay within max_pending_bytes after every
/// pack, and results stay exact.
void pending_bound(executor& ex, const activation_implementation& impl) {
  stack_case c = gen_stack(stack_devices(ex, impl));
  c.options.max_pending_bytes =
      *rc::gen::element<std::size_t>(1, 256, 4096, 65536, std::size_t{1} << 20);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  training_step step(ex, c.layers, compute_threads);
  delay_adaptor delays(ex);
  delay_new_streams delayed(delays, std::chrono::microseconds(300), seed);
  auto off = impl.make(delayed, c.options);
  pending_checker checked(*off, c.options.max_pending_bytes);
  run_steps(ex, checked, step, c, seed);
  if (!checked.violation().empty()) RC_FAIL(checked.violation() + "; " + show(c));
}

}  // namespace

}  // namespace offloadkit::activation

namespace offloadkit::testing {

std::vector<check_case> activation_battery(const activation_implementation& impl) {
  // Every case shares one copy of the descriptor.
  const auto shared = std::make_shared<const activation_implementation>(impl);
  using property_fn = void (*)(executor&, const activation_implementation&);
  auto c = [&shared](const char* name, property_fn prop, int cases) {
    return check_case{"activation", shared->name, name,
                      [shared, prop](executor& ex) { prop(ex, *shared); }, cases};
  };
  const activation_capabilities& caps = impl.caps;
  std::vector<check_case> cases;
  cases.push_back(c("round_trip", &activation::round_trip, 150));
  if (caps.origin_device) {
    check_case two = c("two_devices", &activation::two_devices, 100);
    two.min_devices = 2;
    cases.push_back(std::move(two));
  }
  if (caps.prefetch_bound) {
    cases.push_back(c("prefetch_memory_bound", &activation::memory_bound, 150));
  }
  cases.push_back(c("races_with_delays", &activation::races, 100));
  if (caps.pending_bound) {
    cases.push_back(c("pending_source_bound", &activation::pending_bound, 100));
  }
  return cases;
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
