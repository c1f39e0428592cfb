// The executor battery as typed GoogleTest suites, registered by type for every back end:
// ExecutorBattery runs each property and expects it to hold; ExecutorBatteryCatches plants one bug
// per property behind the executor interface (an adaptor), runs the whole battery on it and
// expects exactly that property to fail: every property can fail, and each sees a bug no other
// property sees.
#include "offloadkit/testing/executor_battery.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "battery_tests.hpp"
#include "offloadkit/adaptors.hpp"
#include "offloadkit/testing/check.hpp"
#include "testing.hpp"

namespace {

using offloadkit::check_case;
using offloadkit::check_config;
using offloadkit::check_outcome;
using offloadkit::executor;
using offloadkit::executor_adaptor;
using offloadkit::stream_ref;

const check_case* find_case(const std::vector<check_case>& cases, const std::string& name) {
  auto it = std::find_if(cases.begin(), cases.end(),
                         [&name](const check_case& c) { return c.name == name; });
  return it == cases.end() ? nullptr : &*it;
}

/// Cases per property when a planted executor faces the whole battery (OFFLOADKIT_CASES raises or
/// lowers it): enough for every property to meet its bug, few enough to stay fast.
constexpr int planted_cases = 40;

/// Runs every property of the battery on the back end wrapped in the planted bug and expects
/// exactly `property` to fail, with a message that holds `symptom`: the intended check caught it,
/// not some unrelated error, and no other property sees the bug.
template <class Planted, class Backend>
void expect_caught_only_by(const std::string& property, const std::string& symptom) {
  const auto battery = offloadkit::testing::executor_battery(Backend::name);
  ASSERT_NE(find_case(battery, property), nullptr)
      << "the executor battery has no property named " << property;
  auto base = Backend::make();
  if (base->device_count() < find_case(battery, property)->min_devices) {
    GTEST_SKIP() << property << " needs " << find_case(battery, property)->min_devices
                 << " devices, the " << Backend::name << " executor has " << base->device_count();
  }
  offloadkit::battery_verdict verdict;
  {
    Planted planted(*base);
    offloadkit::testing::planted_run run;
    run.cases = planted_cases;
    run.keep_default_cases = {};
    run.executor_for = [&planted](const check_case&) -> executor& { return planted; };
    verdict = offloadkit::testing::planted_verdict(battery, run);
  }
  const std::set<std::string>& failed = verdict.failed;
  const std::string message = verdict.messages[property];
  EXPECT_EQ(failed, std::set<std::string>{property})
      << "the planted bug must fail exactly " << property << " (seed "
      << offloadkit::testing::seed() << ")";
  EXPECT_NE(message.find(symptom), std::string::npos)
      << property << " failed, but not with \"" << symptom << "\": " << message;
}

// ---- planted bugs
// ---------------------------------------------------------------------------------

/// Copies between two pageable buffers drop their last byte (the host-to-host path only).
class short_pageable_copy final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override {
    const bool host_to_host = classify(dst).kind == offloadkit::pointer_kind::pageable &&
                              classify(src).kind == offloadkit::pointer_kind::pageable;
    executor_adaptor::do_copy(dst, src, host_to_host && bytes > 0 ? bytes - 1 : bytes, s);
  }
};

/// Fills whole 4-byte words only: a length that is not a multiple of 4 loses its partial word.
class whole_word_fill final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_fill(void* dst, int value, std::size_t bytes, stream_ref s) override {
    executor_adaptor::do_fill(dst, value, bytes / 4 * 4, s);
  }
};

/// A launch with the largest block size (1024 threads) loses its last index.
class largest_block_short final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_launch(const offloadkit::launch_request& r, stream_ref s) override {
    offloadkit::launch_request shorter = r;
    if (shorter.block == 1024 && shorter.n > 0) --shorter.n;
    executor_adaptor::do_launch(shorter, s);
  }
};

/// What the last operation issued to each stream was, not counting the delay adaptor's holds.
class last_op_tracker {
 public:
  enum class kind { other, copy, fill, launch };
  kind last(stream_ref s) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = last_.find(s.native);
    return it == last_.end() ? kind::other : it->second;
  }
  void set(stream_ref s, kind k) {
    std::lock_guard<std::mutex> lock(mutex_);
    last_[s.native] = k;
  }
  static bool is_hold(const offloadkit::launch_request& r) {
    return r.name != nullptr && std::strcmp(r.name, "offloadkit_hold") == 0;
  }

 private:
  std::mutex mutex_;
  std::map<void*, kind> last_;
};

/// A fill issued right after a launch on the same stream does not wait for that launch (it runs on
/// a side stream ordered after what came before the launch, and the stream waits for the fill).
/// Each launch takes at least 200 us, as a real kernel over a buffer does, so that the race shows
/// whenever such a fill follows a launch, not only when an injected delay happens to hold it.
class fill_overtakes_launch final : public executor_adaptor {
 public:
  explicit fill_overtakes_launch(executor& upstream)
      : executor_adaptor(upstream), side_(upstream.create_stream(0)) {}
  ~fill_overtakes_launch() override {
    try {
      upstream().synchronize(side_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): destructors never throw
    }
    for (const auto& [s, e] : before_launch_) upstream().destroy_event(e);
    for (const auto e : fill_done_) upstream().destroy_event(e);
    upstream().destroy_stream(side_);
  }

 private:
  /// Marks the point before a launch, or before the hold a delay adaptor puts ahead of it, so that
  /// a fill after the launch does not wait for the hold either.
  void mark_before_launch(stream_ref s) {
    auto it = before_launch_.find(s.native);
    if (it == before_launch_.end()) {
      it = before_launch_.emplace(s.native, upstream().create_event(s.device)).first;
    } else if (it->second.device != s.device) {
      // A stream of another device now has the address of a destroyed one: its events are its
      // device's.
      upstream().destroy_event(it->second);
      it->second = upstream().create_event(s.device);
    }
    upstream().record(it->second, s);
  }
  void do_launch(const offloadkit::launch_request& r, stream_ref s) override {
    if (last_op_tracker::is_hold(r)) {
      if (tracker_.last(s) != last_op_tracker::kind::launch) {
        mark_before_launch(s);
        held_[s.native] = true;
      }
    } else {
      if (!held_[s.native]) mark_before_launch(s);
      held_[s.native] = false;
      tracker_.set(s, last_op_tracker::kind::launch);
      upstream().host_function([] { std::this_thread::sleep_for(std::chrono::microseconds(200)); },
                               s);
    }
    executor_adaptor::do_launch(r, s);
  }
  void do_fill(void* dst, int value, std::size_t bytes, stream_ref s) override {
    held_[s.native] = false;
    if (tracker_.last(s) != last_op_tracker::kind::launch) {
      tracker_.set(s, last_op_tracker::kind::fill);
      executor_adaptor::do_fill(dst, value, bytes, s);
      return;
    }
    tracker_.set(s, last_op_tracker::kind::fill);
    upstream().wait(before_launch_.at(s.native), side_);
    executor_adaptor::do_fill(dst, value, bytes, side_);
    fill_done_.push_back(upstream().create_event(side_.device));
    upstream().record(fill_done_.back(), side_);
    upstream().wait(fill_done_.back(), s);
  }
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override {
    held_[s.native] = false;
    tracker_.set(s, last_op_tracker::kind::copy);
    executor_adaptor::do_copy(dst, src, bytes, s);
  }
  void do_record(offloadkit::event_ref e, stream_ref s) override {
    held_[s.native] = false;
    tracker_.set(s, last_op_tracker::kind::other);
    executor_adaptor::do_record(e, s);
  }
  void do_host_function(std::function<void()> fn, stream_ref s) override {
    held_[s.native] = false;
    tracker_.set(s, last_op_tracker::kind::other);
    executor_adaptor::do_host_function(std::move(fn), s);
  }
  stream_ref side_;
  std::map<void*, bool> held_;  // a hold was issued since the last marked point
  last_op_tracker tracker_;
  std::map<void*, offloadkit::event_ref> before_launch_;
  std::vector<offloadkit::event_ref> fill_done_;
};

/// wait() ignores an event recorded right after a fill or a launch: events cover copies only.
class wait_ignores_kernels final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override {
    tracker_.set(s, last_op_tracker::kind::copy);
    executor_adaptor::do_copy(dst, src, bytes, s);
  }
  void do_fill(void* dst, int value, std::size_t bytes, stream_ref s) override {
    tracker_.set(s, last_op_tracker::kind::fill);
    executor_adaptor::do_fill(dst, value, bytes, s);
  }
  void do_launch(const offloadkit::launch_request& r, stream_ref s) override {
    if (!last_op_tracker::is_hold(r)) tracker_.set(s, last_op_tracker::kind::launch);
    executor_adaptor::do_launch(r, s);
  }
  void do_record(offloadkit::event_ref e, stream_ref s) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto k = tracker_.last(s);
      after_kernel_[e.native] =
          k == last_op_tracker::kind::fill || k == last_op_tracker::kind::launch;
    }
    executor_adaptor::do_record(e, s);
  }
  void do_wait(offloadkit::event_ref e, stream_ref s) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = after_kernel_.find(e.native);
      if (it != after_kernel_.end() && it->second) return;
    }
    executor_adaptor::do_wait(e, s);
  }
  last_op_tracker tracker_;
  std::mutex mutex_;
  std::map<void*, bool> after_kernel_;
};

/// Runs every stream's work on the first stream created: streams are not independent.
class serialized_streams final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  stream_ref route(stream_ref s) {
    std::lock_guard<std::mutex> lock(mutex_);
    return has_primary_ ? primary_ : s;
  }
  stream_ref do_create_stream(int device) override {
    const stream_ref s = executor_adaptor::do_create_stream(device);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!has_primary_) {
      primary_ = s;
      has_primary_ = true;
    }
    return s;
  }
  void do_destroy_stream(stream_ref s) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (has_primary_ && s == primary_) has_primary_ = false;
    }
    executor_adaptor::do_destroy_stream(s);
  }
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override {
    executor_adaptor::do_copy(dst, src, bytes, route(s));
  }
  void do_fill(void* dst, int value, std::size_t bytes, stream_ref s) override {
    executor_adaptor::do_fill(dst, value, bytes, route(s));
  }
  void do_launch(const offloadkit::launch_request& r, stream_ref s) override {
    executor_adaptor::do_launch(r, route(s));
  }
  void do_host_function(std::function<void()> fn, stream_ref s) override {
    executor_adaptor::do_host_function(std::move(fn), route(s));
  }
  void do_record(offloadkit::event_ref e, stream_ref s) override {
    executor_adaptor::do_record(e, route(s));
  }
  void do_wait(offloadkit::event_ref e, stream_ref s) override {
    executor_adaptor::do_wait(e, route(s));
  }
  void do_synchronize_stream(stream_ref s) override {
    executor_adaptor::do_synchronize_stream(route(s));
  }
  std::mutex mutex_;
  stream_ref primary_{};
  bool has_primary_ = false;
};

/// classify() does not know mapped virtual ranges: it calls them pageable host memory.
class unclassified_mapping final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void* do_reserve(std::size_t bytes, int device) override {
    void* va = executor_adaptor::do_reserve(bytes, device);
    std::lock_guard<std::mutex> lock(mutex_);
    reserved_[va] = bytes;
    return va;
  }
  void do_unreserve(void* va, std::size_t bytes) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reserved_.erase(va);
    }
    executor_adaptor::do_unreserve(va, bytes);
  }
  [[nodiscard]] offloadkit::pointer_info do_classify(const void* p) const override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto* b = static_cast<const unsigned char*>(p);
      for (const auto& [va, bytes] : reserved_) {
        const auto* base = static_cast<const unsigned char*>(va);
        if (b >= base && b < base + bytes) return {offloadkit::pointer_kind::pageable, -1};
      }
    }
    return executor_adaptor::do_classify(p);
  }
  mutable std::mutex mutex_;
  std::map<void*, std::size_t> reserved_;
};

/// replay() does nothing.
class skipped_replay final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_replay(offloadkit::graph_ref /*g*/, stream_ref /*s*/) override {}
};

/// deallocate() keeps device memory (until the adaptor itself goes away).
class leaked_device_memory final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;
  ~leaked_device_memory() override {
    for (const auto& [p, bytes] : kept_) {
      upstream().deallocate(offloadkit::memory_kind::device, p, bytes);
    }
  }

 private:
  void do_deallocate(offloadkit::memory_kind kind, void* p, std::size_t bytes) noexcept override {
    if (kind == offloadkit::memory_kind::device) {
      std::lock_guard<std::mutex> lock(mutex_);
      kept_.emplace_back(p, bytes);
      return;
    }
    executor_adaptor::do_deallocate(kind, p, bytes);
  }
  std::mutex mutex_;
  std::vector<std::pair<void*, std::size_t>> kept_;
};

/// classify() calls pinned memory pageable.
class misclassified_pinned final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  [[nodiscard]] offloadkit::pointer_info do_classify(const void* p) const override {
    offloadkit::pointer_info info = executor_adaptor::do_classify(p);
    if (info.kind == offloadkit::pointer_kind::pinned)
      info.kind = offloadkit::pointer_kind::pageable;
    return info;
  }
};

/// extent_of() reports the allocation as starting at the queried address.
class extent_from_pointer final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  [[nodiscard]] offloadkit::allocation_extent do_extent_of(const void* p) const override {
    offloadkit::allocation_extent e = executor_adaptor::do_extent_of(p);
    if (e.bytes == 0) return e;
    const auto skipped = static_cast<std::size_t>(static_cast<const unsigned char*>(p) -
                                                  static_cast<const unsigned char*>(e.base));
    e.base = p;
    e.bytes -= skipped;
    return e;
  }
};

/// prefetch() discards the pages' contents, as a prefetch that maps fresh pages at the
/// destination instead of migrating the old ones would.
class discarding_prefetch final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) override {
    executor_adaptor::do_prefetch(p, bytes, device, s);
    executor_adaptor::do_fill(const_cast<void*>(p), 0, bytes, s);
  }
};

/// Allocates device memory on device 0 whatever device it is asked for, as a bare cudaMalloc on
/// the current device does.
class device_zero_allocations final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void* do_allocate(offloadkit::memory_kind kind, std::size_t bytes, int device) override {
    return executor_adaptor::do_allocate(kind, bytes,
                                         kind == offloadkit::memory_kind::device ? 0 : device);
  }
};

// ---- every property holds
// ---------------------------------------------------------------------------

/// One test per property of the battery on each back end, generated from the battery's list
/// (suites Host/ExecutorBattery, Cuda/ExecutorBattery, and CudaMultiGpu/ExecutorBattery for what
/// needs two devices), so that no property can be left without a test.
int register_executor_battery() {
  offloadkit::testing::executor_support host_only;
  host_only.cuda = false;
  offloadkit::testing::executor_support cuda_only;
  cuda_only.host = false;
  return offloadkit::testing::register_battery_tests(
             "ExecutorBattery", offloadkit::testing::executor_battery("host"), host_only) +
         offloadkit::testing::register_battery_tests(
             "ExecutorBattery", offloadkit::testing::executor_battery("cuda"), cuda_only);
}
const int registered = register_executor_battery();

// ---- the battery catches planted bugs
// -----------------------------------------------------------------

template <class Backend>
// NOLINTNEXTLINE(readability-identifier-naming)
class ExecutorBatteryCatches : public ::testing::Test {};
TYPED_TEST_SUITE_P(ExecutorBatteryCatches);

TYPED_TEST_P(ExecutorBatteryCatches, ShortPageableCopy) {
  expect_caught_only_by<short_pageable_copy, TypeParam>("copy_round_trip", "copy_round_trip hop");
}
TYPED_TEST_P(ExecutorBatteryCatches, WholeWordFill) {
  expect_caught_only_by<whole_word_fill, TypeParam>("fill", "fill of");
}
TYPED_TEST_P(ExecutorBatteryCatches, LargestBlockShort) {
  expect_caught_only_by<largest_block_short, TypeParam>("launch_count", "count == ");
}
TYPED_TEST_P(ExecutorBatteryCatches, FillOvertakesLaunch) {
  expect_caught_only_by<fill_overtakes_launch, TypeParam>("stream_order", "buffer");
}
TYPED_TEST_P(ExecutorBatteryCatches, WaitIgnoresKernels) {
  expect_caught_only_by<wait_ignores_kernels, TypeParam>("event_ordering",
                                                         "after wait on the producer");
}
TYPED_TEST_P(ExecutorBatteryCatches, SerializedStreams) {
  expect_caught_only_by<serialized_streams, TypeParam>("missing_wait_is_observable",
                                                       "do not run independently");
}
TYPED_TEST_P(ExecutorBatteryCatches, UnclassifiedMapping) {
  expect_caught_only_by<unclassified_mapping, TypeParam>("vmm_remap", "classify()");
}
TYPED_TEST_P(ExecutorBatteryCatches, SkippedReplay) {
  expect_caught_only_by<skipped_replay, TypeParam>("graph_replay_after_remap", "graph replay");
}
TYPED_TEST_P(ExecutorBatteryCatches, LeakedDeviceMemory) {
  expect_caught_only_by<leaked_device_memory, TypeParam>("fault_injection_leaves_executor_usable",
                                                         "device memory");
}
TYPED_TEST_P(ExecutorBatteryCatches, MisclassifiedPinned) {
  expect_caught_only_by<misclassified_pinned, TypeParam>("counting_adaptor_counts", "bytes copied");
}
TYPED_TEST_P(ExecutorBatteryCatches, ExtentFromPointer) {
  expect_caught_only_by<extent_from_pointer, TypeParam>("extent_of_names_the_allocation",
                                                        "extent_of(");
}
TYPED_TEST_P(ExecutorBatteryCatches, DiscardingPrefetch) {
  expect_caught_only_by<discarding_prefetch, TypeParam>("managed_round_trip",
                                                        "managed_round_trip of");
}

REGISTER_TYPED_TEST_SUITE_P(ExecutorBatteryCatches, ShortPageableCopy, WholeWordFill,
                            LargestBlockShort, FillOvertakesLaunch, WaitIgnoresKernels,
                            SerializedStreams, UnclassifiedMapping, SkippedReplay,
                            LeakedDeviceMemory, MisclassifiedPinned, ExtentFromPointer,
                            DiscardingPrefetch);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ExecutorBatteryCatches, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ExecutorBatteryCatches, offloadkit::testing::cuda_backend);

// ---- two devices or more
// -----------------------------------------------------------------------------

// On the cuda back end these need two GPUs: their instantiation is CudaMultiGpu, which ctest runs
// in its own entry; where fewer devices exist they are skipped.
template <class Backend>
// NOLINTNEXTLINE(readability-identifier-naming)
class ExecutorMultiDeviceBattery : public ::testing::Test {};
TYPED_TEST_SUITE_P(ExecutorMultiDeviceBattery);

TYPED_TEST_P(ExecutorMultiDeviceBattery, CatchesDeviceZeroAllocations) {
  expect_caught_only_by<device_zero_allocations, TypeParam>("device_placement",
                                                            "a device allocation");
}

REGISTER_TYPED_TEST_SUITE_P(ExecutorMultiDeviceBattery, CatchesDeviceZeroAllocations);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ExecutorMultiDeviceBattery, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(CudaMultiGpu, ExecutorMultiDeviceBattery,
                               offloadkit::testing::cuda_backend);

// ---- the suites above cover the whole battery
// -----------------------------------------------------------

/// The list the tests above are generated from: every property once, named for the executor.
TEST(ExecutorBatteryList, RegistersEveryListedProperty) {
  std::set<std::string> in_battery;
  for (const auto& c : offloadkit::testing::executor_battery("host")) {
    EXPECT_TRUE(in_battery.insert(c.name).second) << "duplicate property name " << c.name;
    EXPECT_EQ(c.feature, "executor");
    EXPECT_EQ(c.implementation, "host");
    EXPECT_TRUE(static_cast<bool>(c.property)) << c.name;
    EXPECT_GT(c.default_cases, 0) << c.name;
  }
  EXPECT_EQ(static_cast<std::size_t>(registered), 2 * in_battery.size());
}

}  // namespace
