// The paged-stash battery as GoogleTest tests for one implementation (OFFLOADKIT_STASH_IMPL, set by
// CMake to the function that returns its descriptor): one test per property the battery lists for
// it, on every executor it runs on (suites Host/StashBattery and Cuda/StashBattery).
#include "offloadkit/testing/stash_battery.hpp"

#include <gtest/gtest.h>

#include "battery_tests.hpp"

namespace {

const int registered = offloadkit::testing::register_battery_tests(
    "StashBattery", {offloadkit::testing::OFFLOADKIT_STASH_IMPL()},
    &offloadkit::testing::stash_battery);

TEST(StashBatteryList, RegistersEveryListedProperty) { EXPECT_GT(registered, 0); }

}  // namespace
