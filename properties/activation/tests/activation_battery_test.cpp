// The activation battery as GoogleTest tests: for the reference and the optimized offloader and
// the saved-tensor-hooks doubles of each declared policy (hooks_offloader.hpp), one test per
// property the battery lists for it, on every executor it runs on (suites
// Host/ActivationBattery and Cuda/ActivationBattery). A property that needs two devices is under
// CudaMultiGpu/ActivationBattery on the cuda executor, so that its own ctest entry (label
// multigpu) runs it, and it is skipped, with the reason, where fewer than two GPUs are present.
#include "offloadkit/testing/activation_battery.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "battery_tests.hpp"
#include "hooks_offloader.hpp"

namespace {

using namespace offloadkit::testing;

std::vector<activation_implementation> implementations_under_test() {
  namespace doubles = offloadkit::activation::testing_doubles;
  std::vector<activation_implementation> all = builtin_activation_implementations();
  all.push_back(doubles::current_device_hooks_implementation());
  all.push_back(doubles::predicate_hooks_implementation());
  all.push_back(doubles::dedup_hooks_implementation());
  all.push_back(doubles::all_policies_hooks_implementation());
  return all;
}

const int registered =
    register_battery_tests("ActivationBattery", implementations_under_test(), &activation_battery);

TEST(ActivationBatteryList, RegistersEveryListedProperty) { EXPECT_GT(registered, 0); }

}  // namespace
