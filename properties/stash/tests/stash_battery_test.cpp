// The paged-stash battery as GoogleTest tests: for every built-in stash implementation and the
// doubles of common real stashes that declare other policies (sticky_flag_stash.hpp), one test per
// property the battery lists for it, on every executor it runs on (suites Host/StashBattery and
// Cuda/StashBattery). A property that needs two devices is under CudaMultiGpu/StashBattery on the
// cuda executor, so that its own ctest entry (label multigpu) runs it.
#include "offloadkit/testing/stash_battery.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "battery_tests.hpp"
#include "sticky_flag_stash.hpp"

namespace {

using namespace offloadkit::testing;

std::vector<stash_implementation> implementations_under_test() {
  std::vector<stash_implementation> all = builtin_stash_implementations();
  all.push_back(offloadkit::stash::testing_doubles::sticky_flag_stash_implementation());
  all.push_back(offloadkit::stash::testing_doubles::throwing_stash_implementation());
  all.push_back(offloadkit::stash::testing_doubles::single_tier_stash_implementation(
      offloadkit::testing::stash_tier::device));
  all.push_back(offloadkit::stash::testing_doubles::single_tier_stash_implementation(
      offloadkit::testing::stash_tier::pinned));
  all.push_back(offloadkit::stash::testing_doubles::first_use_stash_implementation());
  return all;
}

const int registered =
    register_battery_tests("StashBattery", implementations_under_test(), &stash_battery);

TEST(StashBatteryList, RegistersEveryListedProperty) { EXPECT_GT(registered, 0); }

}  // namespace
