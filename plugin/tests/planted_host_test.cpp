// The plugin host's own wrappers face the batteries too: the reference plugin's activation
// offloader, checked through a plugin host built with one planted bug in its pack wrapper (it
// gives the caller's source back when the plugin's pack fails), fails exactly fault_countdown;
// through the host as shipped, built from the same sources without the bug, it fails nothing.
// OFFLOADKIT_EXPECT_FAILING names the property this build must fail ("" for none).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "battery_tests.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/plugin/host.hpp"
#include "offloadkit/testing/activation_battery.hpp"
#include "offloadkit/testing/check.hpp"

namespace {

TEST(PluginHostWrapper, ActivationBatteryFailsExactlyTheExpectedProperty) {
  const auto lib = offloadkit::plugin::library::open(REFERENCE_PLUGIN);
  const auto impl = offloadkit::plugin::activation_of(lib);
  ASSERT_TRUE(impl.has_value()) << "the reference plugin provides an activation offloader";
  offloadkit::host_executor ex;
  offloadkit::check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  const int from_environment = offloadkit::testing::cases_from_environment();
  cfg.cases = from_environment > 0 ? from_environment : 10;
  cfg.shrink = false;
  const std::string expected = OFFLOADKIT_EXPECT_FAILING;
  const std::set<std::string> want =
      expected.empty() ? std::set<std::string>{} : std::set<std::string>{expected};
  EXPECT_EQ(offloadkit::run_battery(
                offloadkit::testing::activation_battery(*impl), cfg,
                [&ex](const offloadkit::check_case&) -> offloadkit::executor& { return ex; })
                .failed,
            want)
      << "seed " << offloadkit::testing::seed();
}

}  // namespace
