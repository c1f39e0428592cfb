// The traces battery through run_check (as `offloadkit check` runs it) on the host executor, and
// the planted bug it must catch: an executor that loses one copy.
#include "offloadkit/traces/battery.hpp"

#include <gtest/gtest.h>

#include "dropping_adaptor.hpp"
#include "offloadkit/host_executor.hpp"

namespace {

using offloadkit::testing::dropping_adaptor;

offloadkit::check_config config() {
  offloadkit::check_config c;
  c.cases = 30;
  return c;
}

}  // namespace

TEST(TracesBattery, PassesOnHost) {
  const auto cases = offloadkit::traces::traces_checks();
  ASSERT_GE(cases.size(), 3u);
  for (const auto& c : cases) {
    offloadkit::host_executor ex;
    const auto o = offloadkit::run_check(c, ex, config());
    EXPECT_TRUE(o.passed) << c.implementation << "/" << c.name << ": " << o.message << "\n"
                          << offloadkit::reproduce_command(o);
  }
}

// Planted: every replay case run on an executor that silently drops its third non-empty copy.
TEST(TracesBattery, SuiteCatchesALostCopy) {
  for (auto c : offloadkit::traces::traces_checks()) {
    if (c.name != "replay_restores_every_byte") continue;
    auto inner = c.property;
    c.property = [inner](offloadkit::executor& ex) {
      dropping_adaptor bad(ex, 2);
      inner(bad);
    };
    offloadkit::host_executor ex;
    const auto o = offloadkit::run_check(c, ex, config());
    EXPECT_FALSE(o.passed) << c.implementation << ": a lost copy went unnoticed";
  }
}
