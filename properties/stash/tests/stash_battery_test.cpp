// The paged-stash battery as GoogleTest tests for one implementation (OFFLOADKIT_STASH_IMPL, set by
// CMake to the function that returns its descriptor): one test per property the battery lists for
// it, on every executor it runs on (suites Host/StashBattery and Cuda/StashBattery); with
// OFFLOADKIT_STASH_WITH_DOUBLES, the sticky-flag double's in each profile it is declared with.
#include "offloadkit/testing/stash_battery.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "battery_tests.hpp"
#include "sticky_flag_stash.hpp"

namespace {

std::vector<offloadkit::testing::stash_implementation> implementations_under_test() {
  std::vector<offloadkit::testing::stash_implementation> all = {
      offloadkit::testing::OFFLOADKIT_STASH_IMPL()};
#ifdef OFFLOADKIT_STASH_WITH_DOUBLES
  all.push_back(offloadkit::stash::testing_doubles::sticky_flag_stash_implementation());
  all.push_back(offloadkit::stash::testing_doubles::throwing_stash_implementation());
  all.push_back(offloadkit::stash::testing_doubles::single_tier_stash_implementation(
      offloadkit::testing::stash_tier::device));
  all.push_back(offloadkit::stash::testing_doubles::single_tier_stash_implementation(
      offloadkit::testing::stash_tier::pinned));
  all.push_back(offloadkit::stash::testing_doubles::first_use_stash_implementation());
#endif
  return all;
}

const int registered = offloadkit::testing::register_battery_tests(
    "StashBattery", implementations_under_test(), &offloadkit::testing::stash_battery);

TEST(StashBatteryList, RegistersEveryListedProperty) { EXPECT_GT(registered, 0); }

}  // namespace
