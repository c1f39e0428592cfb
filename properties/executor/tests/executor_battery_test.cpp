// The executor battery as typed GoogleTest suites, registered by type for every back end:
// ExecutorBattery runs each property and expects it to hold; ExecutorBatteryCatches plants one bug
// per property behind the executor interface (an adaptor) and expects that property to fail, so a
// property that cannot fail is noticed.
#include "offloadkit/testing/executor_battery.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

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

/// OFFLOADKIT_CASES sets every property's case count, fewer or more (0 or unset: the defaults).
int cases_from_environment() {
  const char* v = std::getenv("OFFLOADKIT_CASES");
  return v == nullptr ? 0 : std::max(0, std::atoi(v));
}

const check_case* find_case(const std::vector<check_case>& cases, const std::string& name) {
  auto it = std::find_if(cases.begin(), cases.end(),
                         [&name](const check_case& c) { return c.name == name; });
  return it == cases.end() ? nullptr : &*it;
}

std::string describe(const check_outcome& o) {
  return "seed " + std::to_string(o.seed) + ", " + std::to_string(o.cases_run) + " of " +
         std::to_string(o.cases_planned) + " cases\n" + o.message +
         "\nreproduce: " + offloadkit::reproduce_command(o) +
         "\n       or: OFFLOADKIT_SEED=" + std::to_string(o.seed) + " <this test> --gtest_filter=" +
         ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "." +
         ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

template <class Backend>
void expect_holds(const std::string& property) {
  const auto battery = offloadkit::executor_battery(Backend::name);
  const check_case* c = find_case(battery, property);
  ASSERT_NE(c, nullptr) << "the executor battery has no property named " << property;
  auto ex = Backend::make();
  check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  cfg.cases = cases_from_environment();
  const check_outcome o = offloadkit::run_check(*c, *ex, cfg);
  EXPECT_TRUE(o.passed) << property << " failed on the " << Backend::name
                        << " executor: " << describe(o);
}

/// Runs `property` on the back end wrapped in the planted bug and expects it to fail, with a
/// message that holds `symptom`: the intended check caught it, not some unrelated error.
template <class Planted, class Backend>
void expect_caught(const std::string& property, const std::string& symptom) {
  const auto battery = offloadkit::executor_battery(Backend::name);
  const check_case* c = find_case(battery, property);
  ASSERT_NE(c, nullptr) << "the executor battery has no property named " << property;
  auto base = Backend::make();
  check_outcome o;
  {
    Planted planted(*base);
    check_config cfg;
    cfg.seed = offloadkit::testing::seed();
    cfg.shrink = false;  // the verdict is what matters here, not the smallest counterexample
    o = offloadkit::run_check(*c, planted, cfg);
  }
  EXPECT_FALSE(o.passed) << property << " did not catch the planted bug in " << o.cases_run
                         << " cases (seed " << o.seed << ")";
  EXPECT_NE(o.message.find(symptom), std::string::npos)
      << property << " failed, but not with \"" << symptom << "\": " << o.message;
  EXPECT_NE(o.seed, 0u);
}

// ---- planted bugs
// ---------------------------------------------------------------------------------

/// Copies one byte too few.
class short_copy final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override {
    executor_adaptor::do_copy(dst, src, bytes > 0 ? bytes - 1 : 0, s);
  }
};

/// Fills one byte too few.
class short_fill final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_fill(void* dst, int value, std::size_t bytes, stream_ref s) override {
    executor_adaptor::do_fill(dst, value, bytes > 0 ? bytes - 1 : 0, s);
  }
};

/// Launches over one index too few.
class short_launch final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_launch(const offloadkit::launch_request& r, stream_ref s) override {
    offloadkit::launch_request shorter = r;
    if (shorter.n > 0) --shorter.n;
    executor_adaptor::do_launch(shorter, s);
  }
};

/// Issues fills on a private stream that nothing orders with the caller's stream (synchronizing a
/// stream also synchronizes it, so the bytes do arrive, only in the wrong order).
class unordered_fill final : public executor_adaptor {
 public:
  explicit unordered_fill(executor& upstream)
      : executor_adaptor(upstream), side_(upstream.create_stream(0)) {}
  ~unordered_fill() override {
    try {
      upstream().synchronize(side_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): destructors never throw
    }
    upstream().destroy_stream(side_);
  }

 private:
  void do_fill(void* dst, int value, std::size_t bytes, stream_ref /*s*/) override {
    executor_adaptor::do_fill(dst, value, bytes, side_);
  }
  void do_synchronize_stream(stream_ref s) override {
    upstream().synchronize(side_);
    executor_adaptor::do_synchronize_stream(s);
  }
  stream_ref side_;
};

/// Ignores wait(): nothing orders the waiting stream after the event.
class ignored_wait final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

 private:
  void do_wait(offloadkit::event_ref /*e*/, stream_ref /*s*/) override {}
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

/// release_physical() keeps the memory (until the adaptor itself goes away).
class kept_physical final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;
  ~kept_physical() override {
    for (const auto& h : kept_) upstream().release_physical(h);
  }

 private:
  void do_release_physical(offloadkit::physical_handle h) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    kept_.push_back(h);
  }
  std::mutex mutex_;
  std::vector<offloadkit::physical_handle> kept_;
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

// ---- every property holds
// ---------------------------------------------------------------------------

template <class Backend>
class ExecutorBattery : public ::testing::Test {};
TYPED_TEST_SUITE_P(ExecutorBattery);

TYPED_TEST_P(ExecutorBattery, CopyRoundTrip) { expect_holds<TypeParam>("copy_round_trip"); }
TYPED_TEST_P(ExecutorBattery, Fill) { expect_holds<TypeParam>("fill"); }
TYPED_TEST_P(ExecutorBattery, LaunchCount) { expect_holds<TypeParam>("launch_count"); }
TYPED_TEST_P(ExecutorBattery, StreamOrder) { expect_holds<TypeParam>("stream_order"); }
TYPED_TEST_P(ExecutorBattery, EventOrdering) { expect_holds<TypeParam>("event_ordering"); }
TYPED_TEST_P(ExecutorBattery, MissingWaitIsObservable) {
  expect_holds<TypeParam>("missing_wait_is_observable");
}
TYPED_TEST_P(ExecutorBattery, VmmRemap) { expect_holds<TypeParam>("vmm_remap"); }
TYPED_TEST_P(ExecutorBattery, GraphReplayAfterRemap) {
  expect_holds<TypeParam>("graph_replay_after_remap");
}
TYPED_TEST_P(ExecutorBattery, FaultInjectionLeavesExecutorUsable) {
  expect_holds<TypeParam>("fault_injection_leaves_executor_usable");
}
TYPED_TEST_P(ExecutorBattery, CountingAdaptorCounts) {
  expect_holds<TypeParam>("counting_adaptor_counts");
}
TYPED_TEST_P(ExecutorBattery, ExtentOfNamesTheAllocation) {
  expect_holds<TypeParam>("extent_of_names_the_allocation");
}
TYPED_TEST_P(ExecutorBattery, ManagedRoundTrip) { expect_holds<TypeParam>("managed_round_trip"); }

REGISTER_TYPED_TEST_SUITE_P(ExecutorBattery, CopyRoundTrip, Fill, LaunchCount, StreamOrder,
                            EventOrdering, MissingWaitIsObservable, VmmRemap, GraphReplayAfterRemap,
                            FaultInjectionLeavesExecutorUsable, CountingAdaptorCounts,
                            ExtentOfNamesTheAllocation, ManagedRoundTrip);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ExecutorBattery, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ExecutorBattery, offloadkit::testing::cuda_backend);

// ---- the battery catches planted bugs
// -----------------------------------------------------------------

template <class Backend>
class ExecutorBatteryCatches : public ::testing::Test {};
TYPED_TEST_SUITE_P(ExecutorBatteryCatches);

TYPED_TEST_P(ExecutorBatteryCatches, ShortCopy) {
  expect_caught<short_copy, TypeParam>("copy_round_trip", "copy_round_trip hop");
}
TYPED_TEST_P(ExecutorBatteryCatches, ShortFill) {
  expect_caught<short_fill, TypeParam>("fill", "fill of");
}
TYPED_TEST_P(ExecutorBatteryCatches, ShortLaunch) {
  expect_caught<short_launch, TypeParam>("launch_count", "count == ");
}
TYPED_TEST_P(ExecutorBatteryCatches, UnorderedFill) {
  expect_caught<unordered_fill, TypeParam>("stream_order", "buffer");
}
TYPED_TEST_P(ExecutorBatteryCatches, IgnoredWait) {
  expect_caught<ignored_wait, TypeParam>("event_ordering", "after wait on the producer");
}
TYPED_TEST_P(ExecutorBatteryCatches, SerializedStreams) {
  expect_caught<serialized_streams, TypeParam>("missing_wait_is_observable",
                                               "do not run independently");
}
TYPED_TEST_P(ExecutorBatteryCatches, KeptPhysicalMemory) {
  expect_caught<kept_physical, TypeParam>("vmm_remap", "free_released");
}
TYPED_TEST_P(ExecutorBatteryCatches, SkippedReplay) {
  expect_caught<skipped_replay, TypeParam>("graph_replay_after_remap", "graph replay");
}
TYPED_TEST_P(ExecutorBatteryCatches, LeakedDeviceMemory) {
  expect_caught<leaked_device_memory, TypeParam>("fault_injection_leaves_executor_usable",
                                                 "device memory");
}
TYPED_TEST_P(ExecutorBatteryCatches, MisclassifiedPinned) {
  expect_caught<misclassified_pinned, TypeParam>("counting_adaptor_counts", "bytes copied");
}
TYPED_TEST_P(ExecutorBatteryCatches, DiscardingPrefetch) {
  expect_caught<discarding_prefetch, TypeParam>("managed_round_trip", "managed_round_trip of");
}

REGISTER_TYPED_TEST_SUITE_P(ExecutorBatteryCatches, ShortCopy, ShortFill, ShortLaunch,
                            UnorderedFill, IgnoredWait, SerializedStreams, KeptPhysicalMemory,
                            SkippedReplay, LeakedDeviceMemory, MisclassifiedPinned,
                            DiscardingPrefetch);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ExecutorBatteryCatches, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ExecutorBatteryCatches, offloadkit::testing::cuda_backend);

// ---- the suites above cover the whole battery
// -----------------------------------------------------------

/// A property added to the battery without a typed test above would go unchecked by ctest; this
/// keeps the two lists equal.
TEST(ExecutorBatteryRegistry, EveryPropertyHasATypedTest) {
  const std::set<std::string> tested = {"copy_round_trip",
                                        "fill",
                                        "launch_count",
                                        "stream_order",
                                        "event_ordering",
                                        "missing_wait_is_observable",
                                        "vmm_remap",
                                        "graph_replay_after_remap",
                                        "fault_injection_leaves_executor_usable",
                                        "counting_adaptor_counts",
                                        "extent_of_names_the_allocation",
                                        "managed_round_trip"};
  std::set<std::string> in_battery;
  for (const auto& c : offloadkit::executor_battery("host")) {
    EXPECT_TRUE(in_battery.insert(c.name).second) << "duplicate property name " << c.name;
    EXPECT_EQ(c.feature, "executor");
    EXPECT_EQ(c.implementation, "host");
    EXPECT_TRUE(static_cast<bool>(c.property)) << c.name;
    EXPECT_GT(c.default_cases, 0) << c.name;
  }
  EXPECT_EQ(in_battery, tested);
}

}  // namespace
