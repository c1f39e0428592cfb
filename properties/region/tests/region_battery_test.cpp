// The region battery as typed GoogleTest suites: every property, for every implementation, on
// both back ends (instantiations Host and Cuda; the Cuda ones run in the gpu-labelled entry).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "offloadkit/check.hpp"
#include "offloadkit/region/battery_impls.hpp"
#include "testing.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::region;

template <class Backend, class Impl>
struct combo {
  using backend_type = Backend;
  using impl_type = Impl;
};

template <class Backend>
void run_case(const std::vector<check_case>& cases, const std::string& name) {
  if (std::string(Backend::name) == "cuda") {
    const std::string reason = cuda_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
  auto ex = Backend::make();
  check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  if (const char* n = std::getenv("OFFLOADKIT_CASES")) cfg.cases = std::atoi(n);
  for (const auto& c : cases) {
    if (c.name != name) continue;
    const check_outcome o = run_check(c, *ex, cfg);
    EXPECT_TRUE(o.passed) << o.message << "\nreproduce: " << reproduce_command(o);
    return;
  }
  FAIL() << "the region battery has no case named " << name;
}

template <class Combo>
void run_named(const std::string& name) {
  run_case<typename Combo::backend_type>(region_battery<typename Combo::impl_type>(), name);
}

template <class Combo>
class RegionBattery : public ::testing::Test {};
TYPED_TEST_SUITE_P(RegionBattery);

TYPED_TEST_P(RegionBattery, ModelBased) { run_named<TypeParam>("model_based"); }
TYPED_TEST_P(RegionBattery, ReleaseIsReal) { run_named<TypeParam>("release_is_real"); }
TYPED_TEST_P(RegionBattery, GraphReplayAfterResume) {
  run_named<TypeParam>("graph_replay_after_resume");
}
TYPED_TEST_P(RegionBattery, FaultCountdownPause) { run_named<TypeParam>("fault_countdown_pause"); }
TYPED_TEST_P(RegionBattery, FaultCountdownResume) {
  run_named<TypeParam>("fault_countdown_resume");
}
TYPED_TEST_P(RegionBattery, ManyCycles) { run_named<TypeParam>("many_cycles"); }
TYPED_TEST_P(RegionBattery, StateErrors) { run_named<TypeParam>("state_errors"); }
TYPED_TEST_P(RegionBattery, MultiDevice) { run_named<TypeParam>("multi_device"); }
TYPED_TEST_P(RegionBattery, CrossStreamOrder) { run_named<TypeParam>("cross_stream_order"); }

REGISTER_TYPED_TEST_SUITE_P(RegionBattery, ModelBased, ReleaseIsReal, GraphReplayAfterResume,
                            FaultCountdownPause, FaultCountdownResume, ManyCycles, StateErrors,
                            MultiDevice, CrossStreamOrder);

using host_types = ::testing::Types<combo<offloadkit::testing::host_backend, reference_region>,
                                    combo<offloadkit::testing::host_backend, vmm_region>>;
using cuda_types = ::testing::Types<combo<offloadkit::testing::cuda_backend, reference_region>,
                                    combo<offloadkit::testing::cuda_backend, vmm_region>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Host, RegionBattery, host_types);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, RegionBattery, cuda_types);

// unified_region faces the properties its documented release behaviour allows.
template <class Backend>
class UnifiedRegion : public ::testing::Test {};
TYPED_TEST_SUITE_P(UnifiedRegion);

TYPED_TEST_P(UnifiedRegion, ModelBased) {
  run_case<TypeParam>(unified_region_battery(), "model_based");
}
TYPED_TEST_P(UnifiedRegion, GraphReplayAfterResume) {
  run_case<TypeParam>(unified_region_battery(), "graph_replay_after_resume");
}
TYPED_TEST_P(UnifiedRegion, StateErrors) {
  run_case<TypeParam>(unified_region_battery(), "state_errors");
}
TYPED_TEST_P(UnifiedRegion, ReleaseBehaviour) {
  run_case<TypeParam>(unified_region_battery(), "unified_release_behaviour");
}
TYPED_TEST_P(UnifiedRegion, CrossStreamOrder) {
  run_case<TypeParam>(unified_region_battery(), "cross_stream_order");
}
REGISTER_TYPED_TEST_SUITE_P(UnifiedRegion, ModelBased, GraphReplayAfterResume, StateErrors,
                            ReleaseBehaviour, CrossStreamOrder);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, UnifiedRegion,
                               ::testing::Types<offloadkit::testing::host_backend>);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, UnifiedRegion,
                               ::testing::Types<offloadkit::testing::cuda_backend>);

}  // namespace
