// The arena battery as GoogleTest tests: for the reference and the optimized offloader, one test
// per property the battery lists for it, on every executor it runs on (suites Host/ArenaBattery
// and Cuda/ArenaBattery). The optimized offloader runs a second time as "optimized_lanes", with
// two copies per stream: the battery's sets then spread their copies over side streams, a path
// that the default options take only for sets of more than 512 runs.
#include "offloadkit/testing/arena_battery.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "battery_tests.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"

namespace {

using namespace offloadkit::testing;

std::vector<arena_implementation> tested_implementations() {
  std::vector<arena_implementation> all = builtin_arena_implementations();
  arena_implementation lanes = optimized_arena_implementation();
  lanes.name = "optimized_lanes";
  const auto make = [](offloadkit::executor& ex, int device) {
    offloadkit::arena::coalesced_options o;
    o.device = device;
    o.copies_per_stream = 2;
    return std::unique_ptr<offloadkit::arena::offloader>(
        std::make_unique<offloadkit::arena::coalesced_offloader>(ex, o));
  };
  lanes.make = [make](offloadkit::executor& ex) { return make(ex, 0); };
  lanes.make_for_device = make;
  all.push_back(std::move(lanes));
  return all;
}

const int registered =
    register_battery_tests("ArenaBattery", tested_implementations(), &arena_battery);

TEST(ArenaBatteryList, RegistersEveryListedProperty) { EXPECT_GT(registered, 0); }

TEST(ArenaChecks, CoverEveryBuiltinImplementation) {
  const auto all = arena_checks();
  for (const arena_implementation& impl : builtin_arena_implementations()) {
    std::set<std::string> names;
    std::set<std::string> runs;
    for (const auto& c : all) {
      EXPECT_EQ(c.feature, "arena");
      if (c.implementation != impl.name) continue;
      names.insert(c.name);
      if (c.not_applicable.empty()) runs.insert(c.name);
    }
    // The promises decide: a steady state is checked only where one is promised, and listed as
    // not applicable elsewhere.
    EXPECT_EQ(names.count("steady_state"), 1u) << impl.name;
    EXPECT_EQ(runs.count("steady_state") == 1, impl.caps.pinned_steady_state) << impl.name;
    // Every built-in offloader can be made for any device.
    EXPECT_TRUE(static_cast<bool>(impl.make_for_device)) << impl.name;
    EXPECT_EQ(names.count("multi_device"), 1u) << impl.name;
    for (const char* always : {"round_trip", "event_chain", "lifetime", "fault_allocation",
                               "fault_copy", "concurrent", "model_sequence", "boundary_shapes"}) {
      EXPECT_EQ(runs.count(always), 1u) << impl.name << " lacks " << always;
    }
  }
}

}  // namespace
