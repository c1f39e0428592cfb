// The arena battery, run for the reference and the optimized offloader on both executors.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "offloadkit/arena/battery.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/check.hpp"
#include "testing.hpp"

namespace {

using offloadkit::arena::coalesced_offloader;
using offloadkit::arena::reference_offloader;

template <class Backend, class Impl>
struct combo {
  using backend = Backend;
  using impl = Impl;
};

template <class Impl>
const char* impl_name() {
  return std::is_same_v<Impl, reference_offloader> ? "reference" : "optimized";
}

offloadkit::check_config config() {
  offloadkit::check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  if (const char* n = std::getenv("OFFLOADKIT_CASES")) cfg.cases = std::atoi(n);
  return cfg;
}

template <class C>
class ArenaBattery : public ::testing::Test {
 protected:
  void run(const std::string& name) {
    using impl = typename C::impl;
    auto ex = C::backend::make();
    for (const offloadkit::check_case& c :
         offloadkit::arena::testing::arena_battery<impl>(impl_name<impl>())) {
      if (c.name != name) continue;
      const offloadkit::check_outcome o = offloadkit::run_check(c, *ex, config());
      std::printf("%s/%s: %d cases\n", o.implementation.c_str(), o.name.c_str(), o.cases_run);
      EXPECT_TRUE(o.passed) << o.message << "\nreproduce: " << offloadkit::reproduce_command(o);
      return;
    }
    FAIL() << "no battery case named " << name;
  }
};

TYPED_TEST_SUITE_P(ArenaBattery);
TYPED_TEST_P(ArenaBattery, RoundTrip) { this->run("round_trip"); }
TYPED_TEST_P(ArenaBattery, EventChain) { this->run("event_chain"); }
TYPED_TEST_P(ArenaBattery, SteadyState) { this->run("steady_state"); }
TYPED_TEST_P(ArenaBattery, Lifetime) { this->run("lifetime"); }
TYPED_TEST_P(ArenaBattery, FaultAllocation) { this->run("fault_allocation"); }
TYPED_TEST_P(ArenaBattery, FaultCopy) { this->run("fault_copy"); }
TYPED_TEST_P(ArenaBattery, Concurrent) { this->run("concurrent"); }
TYPED_TEST_P(ArenaBattery, ModelSequence) { this->run("model_sequence"); }
REGISTER_TYPED_TEST_SUITE_P(ArenaBattery, RoundTrip, EventChain, SteadyState, Lifetime,
                            FaultAllocation, FaultCopy, Concurrent, ModelSequence);

using host_types = ::testing::Types<combo<offloadkit::testing::host_backend, reference_offloader>,
                                    combo<offloadkit::testing::host_backend, coalesced_offloader>>;
using cuda_types = ::testing::Types<combo<offloadkit::testing::cuda_backend, reference_offloader>,
                                    combo<offloadkit::testing::cuda_backend, coalesced_offloader>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ArenaBattery, host_types);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ArenaBattery, cuda_types);

TEST(ArenaChecks, CoverBothImplementations) {
  const auto all = offloadkit::arena::arena_checks();
  std::size_t reference = 0, optimized = 0;
  for (const auto& c : all) {
    EXPECT_EQ(c.feature, "arena");
    reference += c.implementation == "reference";
    optimized += c.implementation == "optimized";
  }
  EXPECT_EQ(reference, optimized);
  EXPECT_GE(reference, 8u);
}

}  // namespace
