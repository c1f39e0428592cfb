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
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/implementation.hpp"
#include "testing.hpp"

namespace offloadkit::testing {

/// OFFLOADKIT_CASES sets the cases per property, fewer or more (0 or unset: each case's default).
inline int cases_from_environment() {
  const char* v = std::getenv("OFFLOADKIT_CASES");
  return v == nullptr ? 0 : std::max(0, std::atoi(v));
}

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

}  // namespace offloadkit::testing
