// The activation battery on both executors, for the reference and the optimized offloader. The
// Cuda instantiation runs in the gpu-labelled ctest entry; the two-GPU test has its own entry
// (label multigpu) and is skipped, with the reason, where fewer than two GPUs are present.
#include <gtest/gtest.h>

#include <cstdio>

#include "battery_support.hpp"
#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/activation/battery.hpp"
#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "testing.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::activation;
using offloadkit::activation::testing::describe;
using offloadkit::activation::testing::run_named;

template <class Backend>
class ActivationBattery : public ::testing::Test {
 protected:
  void run(const std::vector<check_case>& cases, const char* property) {
    auto ex = Backend::make();
    if (std::string(property) == two_devices_property && ex->device_count() < 2) {
      GTEST_SKIP() << "needs two devices, " << ex->name() << " has " << ex->device_count();
    }
    const check_outcome o = run_named(cases, property, *ex);
    std::printf("%s\n", describe(o).c_str());
    EXPECT_TRUE(o.passed) << describe(o);
  }
  static std::vector<check_case> reference() {
    return activation_battery<reference_offloader>("reference");
  }
  static std::vector<check_case> optimized() {
    return activation_battery<async_offloader>("optimized");
  }
};
TYPED_TEST_SUITE_P(ActivationBattery);

TYPED_TEST_P(ActivationBattery, ReferenceRoundTrip) {
  this->run(this->reference(), round_trip_property);
}
TYPED_TEST_P(ActivationBattery, OptimizedRoundTrip) {
  this->run(this->optimized(), round_trip_property);
}
TYPED_TEST_P(ActivationBattery, ReferenceTwoDevices) {
  this->run(this->reference(), two_devices_property);
}
TYPED_TEST_P(ActivationBattery, OptimizedTwoDevices) {
  this->run(this->optimized(), two_devices_property);
}
TYPED_TEST_P(ActivationBattery, ReferenceMemoryBound) {
  this->run(this->reference(), memory_bound_property);
}
TYPED_TEST_P(ActivationBattery, OptimizedMemoryBound) {
  this->run(this->optimized(), memory_bound_property);
}
TYPED_TEST_P(ActivationBattery, ReferenceRaces) { this->run(this->reference(), races_property); }
TYPED_TEST_P(ActivationBattery, OptimizedRaces) { this->run(this->optimized(), races_property); }
TYPED_TEST_P(ActivationBattery, ReferencePendingBound) {
  this->run(this->reference(), pending_bound_property);
}
TYPED_TEST_P(ActivationBattery, OptimizedPendingBound) {
  this->run(this->optimized(), pending_bound_property);
}

REGISTER_TYPED_TEST_SUITE_P(ActivationBattery, ReferenceRoundTrip, OptimizedRoundTrip,
                            ReferenceTwoDevices, OptimizedTwoDevices, ReferenceMemoryBound,
                            OptimizedMemoryBound, ReferenceRaces, OptimizedRaces,
                            ReferencePendingBound, OptimizedPendingBound);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ActivationBattery, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ActivationBattery, offloadkit::testing::cuda_backend);

// Two real GPUs: tensors from device 0 and device 1 come back on their own devices. Separate from
// the typed suite so that its ctest entry can say "skipped" on a one-GPU machine.
TEST(ActivationCudaMultiGpu, TensorsReturnToTheirDevices) {
  const std::string reason = cuda_unavailable_reason();
  if (!reason.empty()) GTEST_SKIP() << "no usable GPU: " << reason;
  auto ex = offloadkit::testing::cuda_backend::make();
  if (ex->device_count() < 2) {
    GTEST_SKIP() << "needs two GPUs, this machine has " << ex->device_count();
  }
  for (const auto& cases : {activation_battery<reference_offloader>("reference"),
                            activation_battery<async_offloader>("optimized")}) {
    const check_outcome o = run_named(cases, two_devices_property, *ex);
    EXPECT_TRUE(o.passed) << describe(o);
  }
}

}  // namespace
