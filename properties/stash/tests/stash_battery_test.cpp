// The paged-stash battery for one implementation (OFFLOADKIT_STASH_IMPL, set by CMake) as typed
// GoogleTest suites, registered by type for both executors (instantiations Host and Cuda).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "offloadkit/check.hpp"
#include "offloadkit/stash/battery.hpp"
#include "testing.hpp"

namespace {

using Impl = offloadkit::stash::OFFLOADKIT_STASH_IMPL;

int cases_from_environment() {
  const char* v = std::getenv("OFFLOADKIT_CASES");
  return v == nullptr ? 0 : std::max(0, std::atoi(v));
}

template <class Backend>
void expect_holds(const std::string& property) {
  const auto battery = offloadkit::stash::stash_battery<Impl>();
  auto it = std::find_if(battery.begin(), battery.end(),
                         [&](const offloadkit::check_case& c) { return c.name == property; });
  if (it == battery.end()) GTEST_SKIP() << property << " does not apply to " << Impl::name;
  auto ex = Backend::make();
  offloadkit::check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  cfg.cases = cases_from_environment();
  const offloadkit::check_outcome o = offloadkit::run_check(*it, *ex, cfg);
  std::cout << Impl::name << "/" << property << ": " << o.cases_run << " of " << o.cases_planned
            << " cases, seed " << o.seed << "\n";
  EXPECT_TRUE(o.passed) << Impl::name << "/" << property << " failed on " << Backend::name
                        << ": seed " << o.seed << "\n"
                        << o.message << "\nreproduce: " << offloadkit::reproduce_command(o);
}

template <class Backend>
class StashBattery : public ::testing::Test {};
TYPED_TEST_SUITE_P(StashBattery);

TYPED_TEST_P(StashBattery, RoundTripAndConservation) {
  expect_holds<TypeParam>("round_trip_and_conservation");
}
TYPED_TEST_P(StashBattery, CapacitySweepFirstOverflow) {
  expect_holds<TypeParam>("capacity_sweep_first_overflow");
}
TYPED_TEST_P(StashBattery, KeyLimits) { expect_holds<TypeParam>("key_limits"); }
TYPED_TEST_P(StashBattery, InjectedFaultsCountdown) {
  expect_holds<TypeParam>("injected_faults_countdown");
}
TYPED_TEST_P(StashBattery, ModelBased) { expect_holds<TypeParam>("model_based"); }
TYPED_TEST_P(StashBattery, GraphReplayRowCounts) {
  expect_holds<TypeParam>("graph_replay_row_counts");
}

REGISTER_TYPED_TEST_SUITE_P(StashBattery, RoundTripAndConservation, CapacitySweepFirstOverflow,
                            KeyLimits, InjectedFaultsCountdown, ModelBased, GraphReplayRowCounts);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, StashBattery, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, StashBattery, offloadkit::testing::cuda_backend);

}  // namespace
