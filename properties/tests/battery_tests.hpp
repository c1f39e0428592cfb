// GoogleTest suites generated from a battery's list: one test per (implementation, property,
// executor), registered with ::testing::RegisterTest from the check_cases themselves. A property
// the battery runs for an implementation is a test; one its profile rules out (listed as not
// applicable, for offloadkit check's table and report) is no test, instead of a hand-written test
// that looks it up by name and skips.
//
// Names: suite "<Executor>/<Suite>", test "<implementation>/<property>", e.g.
// "Cuda/StashBattery.optimized/graph_replay_row_counts". Tests that need the GPU carry "Cuda" in
// their suite name, which is how ctest splits them (the .cuda entry runs *Cuda*, the .host entry
// -*Cuda*); a property that needs more devices than one GPU is under "CudaMultiGpu/<Suite>".
// Only test sources include this header: it needs GoogleTest and core/testing's testing.hpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/implementation.hpp"
#include "testing.hpp"

namespace offloadkit::testing {

/// Runs `c` on `ex` with the process's seed; the test fails with the counterexample and the
/// command that replays it.
inline void expect_case_holds(const check_case& c, executor& ex) {
  check_config cfg;
  cfg.seed = seed();
  cfg.cases = cases_from_environment();
  const check_outcome o = run_check(c, ex, cfg);
  // run_check skips a property that needs more devices than `ex` has, and says so.
  if (o.skipped) GTEST_SKIP() << o.message;
  std::printf("%s/%s/%s on %s: %d of %d cases, seed %llu\n", o.feature.c_str(),
              o.implementation.c_str(), o.name.c_str(), o.executor_name.c_str(), o.cases_run,
              o.cases_planned, static_cast<unsigned long long>(o.seed));
  EXPECT_TRUE(o.passed) << o.feature << "/" << o.implementation << "/" << o.name << " failed on "
                        << o.executor_name << ": seed " << o.seed << "\n"
                        << o.message << "\nreproduce: " << reproduce_command(o);
}

namespace detail {

/// One generated test: a check case on a fresh executor of one back end.
template <class Backend>
class battery_case_test final : public ::testing::Test {
 public:
  explicit battery_case_test(check_case c) : case_(std::move(c)) {}

  void TestBody() override {
    if constexpr (std::is_same_v<Backend, cuda_backend>) {
      // Reached when the binary runs without --offloadkit-require-gpu (which exits 77 first).
      const std::string reason = cuda_unavailable_reason();
      if (!reason.empty()) GTEST_SKIP() << "no usable GPU: " << reason;
    }
    auto ex = Backend::make();
    expect_case_holds(case_, *ex);
  }

 private:
  check_case case_;
};

/// A name GoogleTest filters can match exactly: lower-case letters, digits and '_' (others become
/// '_'). Lower case so that no implementation's name (a plugin's, say "MyCudaStash") can put
/// "Cuda" into a host test's name and move it out of the .host ctest entry.
inline std::string test_name_part(const std::string& s) {
  std::string out = s.empty() ? std::string("unnamed") : s;
  for (char& ch : out) {
    const auto u = static_cast<unsigned char>(ch);
    ch = std::isalnum(u) != 0 ? static_cast<char>(std::tolower(u)) : '_';
  }
  return out;
}

template <class Backend>
int register_on(const char* executor_prefix, const std::string& suite,
                const std::vector<check_case>& cases) {
  int n = 0;
  for (const check_case& c : cases) {
    // What the profile rules out is no test (offloadkit check reports it as not applicable).
    if (!c.not_applicable.empty()) continue;
    std::string suite_name = executor_prefix;
    if (std::is_same_v<Backend, cuda_backend> && c.min_devices > 1) suite_name += "MultiGpu";
    suite_name += "/";
    suite_name += suite;
    const std::string test_name = test_name_part(c.implementation) + "/" + test_name_part(c.name);
    ::testing::RegisterTest(
        suite_name.c_str(), test_name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
        [c]() -> ::testing::Test* { return new battery_case_test<Backend>(c); });
    ++n;
  }
  return n;
}

}  // namespace detail

/// Registers every case of `cases` (one implementation's battery) on each executor `support`
/// says the implementation runs on. Call before RUN_ALL_TESTS (a namespace-scope initializer).
/// Returns the number of tests registered.
inline int register_battery_tests(const std::string& suite, const std::vector<check_case>& cases,
                                  const executor_support& support) {
  int n = 0;
  if (support.host) n += detail::register_on<host_backend>("Host", suite, cases);
  if (support.cuda) n += detail::register_on<cuda_backend>("Cuda", suite, cases);
  return n;
}

/// The battery of every implementation in `implementations`, registered as above.
template <class Implementation>
int register_battery_tests(const std::string& suite,
                           const std::vector<Implementation>& implementations,
                           std::vector<check_case> (*battery)(const Implementation&)) {
  int n = 0;
  for (const Implementation& impl : implementations)
    n += register_battery_tests(suite, battery(impl), impl.support);
  return n;
}

/// How a planted bug faces a whole battery (planted_verdict, failing_properties).
struct planted_run {
  /// Cases per property; 0 keeps each property's default. OFFLOADKIT_CASES, when set, wins over
  /// both.
  int cases = 0;
  /// Properties that keep their default case count whatever `cases` says: caller_writes_late
  /// holds the caller's stream 300 to 400 ms a case, and its one race needs no more cases than its
  /// default (the hold is the window).
  std::set<std::string> keep_default_cases = {"caller_writes_late"};
  /// A fresh host executor per property, so that a leak cannot spill over into the next one; or
  /// one host executor for the whole battery.
  bool fresh_executor = true;
  /// The executor each property runs on, instead of a host executor (a planted executor).
  std::function<executor&(const check_case&)> executor_for = {};
};

/// Runs every property of `battery` as `run` says, with the process's seed and without shrinking
/// (the verdict matters here, not the smallest counterexample), and returns what failed. A
/// failure must come from a property's assertions, never from the harness breaking: a check that
/// itself threw fails the test.
inline battery_verdict planted_verdict(std::vector<check_case> battery,
                                       const planted_run& run = {}) {
  check_config cfg;
  cfg.seed = seed();
  cfg.shrink = false;
  if (const int from_environment = cases_from_environment(); from_environment > 0) {
    cfg.cases = from_environment;
  } else if (run.cases > 0) {
    for (check_case& c : battery) {
      if (run.keep_default_cases.count(c.name) == 0) c.default_cases = run.cases;
    }
  }
  std::unique_ptr<host_executor> ex;
  battery_verdict v = run_battery(battery, cfg, [&](const check_case& c) -> executor& {
    if (run.executor_for) return run.executor_for(c);
    if (ex == nullptr || run.fresh_executor) ex = std::make_unique<host_executor>();
    return *ex;
  });
  for (const auto& [name, message] : v.messages) {
    EXPECT_EQ(message.find("the check itself threw"), std::string::npos) << name << ": " << message;
  }
  return v;
}

/// The properties of `battery` that fail as `run` says (planted_verdict).
inline std::set<std::string> failing_properties(std::vector<check_case> battery,
                                                const planted_run& run = {}) {
  return planted_verdict(std::move(battery), run).failed;
}

}  // namespace offloadkit::testing
