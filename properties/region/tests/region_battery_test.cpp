// The region battery as GoogleTest tests: for every built-in region implementation, one test per
// property the battery lists for it, on every executor it runs on (suites Host/RegionBattery and
// Cuda/RegionBattery; the Cuda ones run in the gpu-labelled entry).
#include "offloadkit/testing/region_battery.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "battery_tests.hpp"
#include "synchronous_fixed_region.hpp"

namespace {

using namespace offloadkit::testing;

/// The built-in regions, and a double of a common real one that declares other policies (pause
/// mode fixed per allocation, synchronous calls, no graphs of its own).
std::vector<region_implementation> implementations_under_test() {
  std::vector<region_implementation> all = builtin_region_implementations();
  all.push_back(offloadkit::region::testing_doubles::synchronous_fixed_region_implementation());
  return all;
}

const int registered =
    register_battery_tests("RegionBattery", implementations_under_test(), &region_battery);

TEST(RegionBatteryList, RegistersEveryListedProperty) { EXPECT_GT(registered, 0); }

// The lists follow the declared capabilities: every property is listed for every implementation,
// and one the profile rules out (a region that keeps its memory while paused is not asked to
// release it, one whose allocations bypass the executor is not fault-counted) is listed as not
// applicable, with what the profile says.
TEST(RegionBatteryList, FollowsTheCapabilities) {
  std::set<std::string> every_name;
  for (const region_implementation& impl : builtin_region_implementations()) {
    std::set<std::string> runs;
    std::set<std::string> names;
    for (const auto& c : region_battery(impl)) {
      names.insert(c.name);
      if (c.not_applicable.empty()) {
        runs.insert(c.name);
      } else {
        EXPECT_EQ(c.not_applicable.rfind("profile says ", 0), 0u) << c.not_applicable;
      }
    }
    if (every_name.empty()) every_name = names;
    EXPECT_EQ(names, every_name) << impl.name;
    EXPECT_EQ(runs.count("release_is_real") == 1, impl.caps.releases_memory) << impl.name;
    EXPECT_EQ(runs.count("many_cycles") == 1, impl.caps.releases_memory) << impl.name;
    EXPECT_EQ(runs.count("multi_device") == 1, impl.caps.multi_device) << impl.name;
    EXPECT_EQ(runs.count("fault_countdown_pause") == 1, impl.support.executor_allocations)
        << impl.name;
    EXPECT_EQ(runs.count("unified_release_behaviour") == 1, impl.caps.managed_memory) << impl.name;
  }
}

}  // namespace
