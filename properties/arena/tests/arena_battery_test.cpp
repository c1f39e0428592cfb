// The arena battery as GoogleTest tests: for the reference and the optimized offloader, one test
// per property the battery lists for it, on every executor it runs on (suites Host/ArenaBattery
// and Cuda/ArenaBattery).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "battery_tests.hpp"
#include "offloadkit/testing/arena_checks.hpp"

namespace {

using namespace offloadkit::testing;

const int registered =
    register_battery_tests("ArenaBattery", builtin_arena_implementations(), &arena_battery);

TEST(ArenaBatteryList, RegistersEveryListedProperty) { EXPECT_GT(registered, 0); }

TEST(ArenaChecks, CoverEveryBuiltinImplementation) {
  const auto all = arena_checks();
  for (const arena_implementation& impl : builtin_arena_implementations()) {
    std::set<std::string> names;
    for (const auto& c : all) {
      EXPECT_EQ(c.feature, "arena");
      if (c.implementation == impl.name) names.insert(c.name);
    }
    // The promises decide: a steady state is checked only where one is promised.
    EXPECT_EQ(names.count("steady_state") == 1, impl.caps.pinned_steady_state) << impl.name;
    // Every built-in offloader can be made for any device.
    EXPECT_TRUE(static_cast<bool>(impl.make_for_device)) << impl.name;
    EXPECT_EQ(names.count("multi_device"), 1u) << impl.name;
    for (const char* always : {"round_trip", "event_chain", "lifetime", "fault_allocation",
                               "fault_copy", "concurrent", "model_sequence", "boundary_shapes"}) {
      EXPECT_EQ(names.count(always), 1u) << impl.name << " lacks " << always;
    }
  }
}

}  // namespace
