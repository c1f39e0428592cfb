// The activation battery as GoogleTest tests: for the reference and the optimized offloader, one
// test per property the battery lists for it, on every executor it runs on (suites
// Host/ActivationBattery and Cuda/ActivationBattery). A property that needs two devices is under
// CudaMultiGpu/ActivationBattery on the cuda executor, so that its own ctest entry (label
// multigpu) runs it, and it is skipped, with the reason, where fewer than two GPUs are present.
#include "offloadkit/testing/activation_battery.hpp"

#include <gtest/gtest.h>

#include "battery_tests.hpp"

namespace {

using namespace offloadkit::testing;

const int registered = register_battery_tests(
    "ActivationBattery", builtin_activation_implementations(), &activation_battery);

TEST(ActivationBatteryList, RegistersEveryListedProperty) { EXPECT_GT(registered, 0); }

}  // namespace
