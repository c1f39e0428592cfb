// Unit tests of the property runner (run_check, reproduce_command): a failing property yields a
// failed outcome with its seed and a message, the same seed gives the same outcome, case counts
// follow the configuration, exceptions become failures instead of escaping, and a teardown failure
// recorded by a destructor (teardown.hpp) fails the run that recorded it.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <stdexcept>
#include <string>

#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/teardown.hpp"
#include "offloadkit/testing/check.hpp"

namespace {

using offloadkit::check_case;
using offloadkit::check_config;
using offloadkit::executor;
using offloadkit::run_check;

check_case make_case(std::function<void(executor&)> property, int default_cases = 100) {
  check_case c;
  c.feature = "runner";
  c.implementation = "test";
  c.name = "property_under_test";
  c.property = std::move(property);
  c.default_cases = default_cases;
  return c;
}

/// Fails for every x >= 500: found quickly, and shrinks to exactly 500.
void fails_above_limit(executor& /*ex*/) {
  const int x = *rc::gen::inRange(0, 1000);
  RC_ASSERT(x < 500);
}

TEST(CheckRunner, AFailingPropertyFailsWithItsSeedAndAMessage) {
  offloadkit::host_executor ex;
  check_config cfg;
  cfg.seed = 12345;
  const auto o = run_check(make_case(&fails_above_limit), ex, cfg);
  EXPECT_FALSE(o.passed);
  EXPECT_EQ(o.seed, 12345u);
  EXPECT_FALSE(o.message.empty());
  EXPECT_NE(o.message.find("x < 500"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("500"), std::string::npos) << "shrunk counterexample: " << o.message;
  EXPECT_GE(o.cases_run, 1);
  EXPECT_EQ(o.feature, "runner");
  EXPECT_EQ(o.implementation, "test");
  EXPECT_EQ(o.name, "property_under_test");
  EXPECT_EQ(o.executor_name, "host");
}

TEST(CheckRunner, TheSameSeedGivesTheSameOutcome) {
  offloadkit::host_executor ex;
  check_config cfg;
  cfg.seed = 987654321;
  const auto a = run_check(make_case(&fails_above_limit), ex, cfg);
  const auto b = run_check(make_case(&fails_above_limit), ex, cfg);
  EXPECT_EQ(a.passed, b.passed);
  EXPECT_EQ(a.cases_run, b.cases_run);
  EXPECT_EQ(a.message, b.message);
  cfg.shrink = false;
  const auto c = run_check(make_case(&fails_above_limit), ex, cfg);
  const auto d = run_check(make_case(&fails_above_limit), ex, cfg);
  EXPECT_EQ(c.message, d.message);
  EXPECT_EQ(c.cases_run, a.cases_run) << "shrinking does not change which case failed first";
}

TEST(CheckRunner, SeedZeroDrawsAFreshSeedAndReportsIt) {
  offloadkit::host_executor ex;
  const auto o = run_check(make_case(&fails_above_limit), ex, check_config{});
  EXPECT_FALSE(o.passed);
  EXPECT_NE(o.seed, 0u);
  // The reported seed replays the run.
  check_config replay;
  replay.seed = o.seed;
  const auto again = run_check(make_case(&fails_above_limit), ex, replay);
  EXPECT_EQ(again.cases_run, o.cases_run);
  EXPECT_EQ(again.message, o.message);
}

TEST(CheckRunner, CaseCountsFollowTheConfiguration) {
  offloadkit::host_executor ex;
  int runs = 0;
  const auto counting = [&runs](executor& /*ex*/) { ++runs; };
  check_config cfg;
  cfg.seed = 1;

  auto o = run_check(make_case(counting, 30), ex, cfg);
  EXPECT_TRUE(o.passed) << o.message;
  EXPECT_EQ(o.cases_run, 30);
  EXPECT_EQ(o.cases_planned, 30);
  EXPECT_EQ(runs, 30);

  cfg.cases = 7;  // fewer than the default
  o = run_check(make_case(counting, 30), ex, cfg);
  EXPECT_EQ(o.cases_run, 7);
  EXPECT_EQ(o.cases_planned, 7);

  cfg.cases = 50;  // more than the default: a rare failure can be hunted for longer
  o = run_check(make_case(counting, 30), ex, cfg);
  EXPECT_EQ(o.cases_run, 50);
  EXPECT_EQ(o.cases_planned, 50);
  EXPECT_TRUE(o.message.empty());
}

TEST(CheckRunner, ThePropertyGetsTheExecutorItWasGiven) {
  offloadkit::host_executor ex;
  const executor* seen = nullptr;
  check_config cfg;
  cfg.seed = 3;
  cfg.cases = 1;
  const auto o = run_check(make_case([&seen](executor& e) { seen = &e; }), ex, cfg);
  EXPECT_TRUE(o.passed);
  EXPECT_EQ(seen, &ex);
}

TEST(CheckRunner, AnExceptionIsAFailureWithItsMessage) {
  offloadkit::host_executor ex;
  check_config cfg;
  cfg.seed = 5;
  const auto o = run_check(make_case([](executor& /*ex*/) {
                             throw offloadkit::out_of_range("index 9 is outside [0, 4)");
                           }),
                           ex, cfg);
  EXPECT_FALSE(o.passed);
  EXPECT_NE(o.message.find("index 9 is outside [0, 4)"), std::string::npos) << o.message;
}

TEST(CheckRunner, AFailureThatDoesNotRecurKeepsItsMessage) {
  // rapidcheck re-runs the final case to describe it; a timing-dependent failure may pass then.
  offloadkit::host_executor ex;
  int runs = 0;
  check_config cfg;
  cfg.seed = 11;
  const auto o = run_check(make_case([&runs](executor& /*ex*/) {
                             RC_LOG() << "drawn delays: up to " << 100 * (runs + 1) << " us\n";
                             if (runs++ == 0) RC_FAIL("only the first run fails");
                           }),
                           ex, cfg);
  EXPECT_FALSE(o.passed);
  EXPECT_NE(o.message.find("only the first run fails"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("did not recur"), std::string::npos) << o.message;
  // The log is the failing run's, not the passing re-run's.
  EXPECT_NE(o.message.find("Log:\ndrawn delays: up to 100 us"), std::string::npos) << o.message;
  EXPECT_EQ(o.message.find("up to 200 us"), std::string::npos) << o.message;
}

/// An object whose teardown fails, as a plugin wrapper whose close returned an error does: its
/// destructor records the failure.
struct failing_teardown {
  failing_teardown() = default;
  failing_teardown(const failing_teardown&) = delete;
  failing_teardown& operator=(const failing_teardown&) = delete;
  ~failing_teardown() {
    offloadkit::record_teardown_error("arena planted: close failed (state error): slot 3 twice");
  }
};

TEST(CheckRunner, ATeardownFailureFailsTheCaseThatRecordedItAndShrinks) {
  offloadkit::host_executor ex;
  check_config cfg;
  cfg.seed = 21;
  // Objects made for x >= 300 fail to close; the body itself asserts nothing.
  const auto o = run_check(make_case([](executor& /*ex*/) {
                             const int x = *rc::gen::inRange(0, 1000);
                             if (x >= 300) {
                               const failing_teardown object;
                             }
                           }),
                           ex, cfg);
  EXPECT_FALSE(o.passed);
  EXPECT_NE(o.message.find("teardown failed:\narena planted: close failed (state error)"),
            std::string::npos)
      << o.message;
  EXPECT_NE(o.message.find("300"), std::string::npos) << "shrunk counterexample: " << o.message;
  EXPECT_EQ(o.message.find("did not recur"), std::string::npos) << o.message;
  EXPECT_TRUE(offloadkit::take_teardown_errors().empty()) << "run_check took every record";
}

TEST(CheckRunner, ATeardownFailureWhileAFailureUnwindsJoinsItsMessage) {
  offloadkit::host_executor ex;
  check_config cfg;
  cfg.seed = 22;
  cfg.shrink = false;
  const auto assertion = run_check(make_case([](executor& /*ex*/) {
                                     failing_teardown object;
                                     RC_FAIL("the bytes differ");
                                   }),
                                   ex, cfg);
  EXPECT_FALSE(assertion.passed);
  EXPECT_NE(assertion.message.find("the bytes differ"), std::string::npos) << assertion.message;
  EXPECT_NE(assertion.message.find("while the case unwound, teardown failed:\narena planted"),
            std::string::npos)
      << assertion.message;
  const auto thrown = run_check(make_case([](executor& /*ex*/) {
                                  failing_teardown object;
                                  throw offloadkit::state_error("paused twice");
                                }),
                                ex, cfg);
  EXPECT_FALSE(thrown.passed);
  EXPECT_NE(thrown.message.find("paused twice"), std::string::npos) << thrown.message;
  EXPECT_NE(thrown.message.find("close failed"), std::string::npos) << thrown.message;
  // A discarded case that recorded a teardown failure is a failure, not a discard.
  const auto discarded = run_check(make_case([](executor& /*ex*/) {
                                     failing_teardown object;
                                     RC_PRE(false);
                                   }),
                                   ex, cfg);
  EXPECT_FALSE(discarded.passed);
  EXPECT_NE(discarded.message.find("close failed"), std::string::npos) << discarded.message;
}

TEST(CheckRunner, ATeardownFailureFromBeforeTheCheckIsNotBlamedOnIt) {
  // Recorded outside any run (an object that outlived its case): printed, not a failure here.
  offloadkit::record_teardown_error("region stray: close failed (cuda error): unmap");
  offloadkit::host_executor ex;
  check_config cfg;
  cfg.seed = 23;
  cfg.cases = 5;
  testing::internal::CaptureStderr();
  const auto o = run_check(make_case([](executor& /*ex*/) {}), ex, cfg);
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(o.passed) << o.message;
  EXPECT_NE(printed.find("outside any case of the property: region stray: close failed"),
            std::string::npos)
      << printed;
  EXPECT_TRUE(offloadkit::take_teardown_errors().empty());
}

TEST(CheckRunner, ACaseWithoutABodyFails) {
  offloadkit::host_executor ex;
  const auto o = run_check(make_case(nullptr), ex, check_config{});
  EXPECT_FALSE(o.passed);
  EXPECT_FALSE(o.message.empty());
}

TEST(CheckRunner, ReproduceCommandReplaysTheSeedAndCaseCount) {
  offloadkit::host_executor ex;
  check_config cfg;
  cfg.seed = 4242;
  cfg.cases = 20;
  const auto o = run_check(make_case(&fails_above_limit), ex, cfg);
  const std::string cmd = offloadkit::reproduce_command(o);
  EXPECT_EQ(cmd,
            "offloadkit check --executor host --feature runner --implementation test --property "
            "property_under_test --seed 4242 --cases 20");
}

}  // namespace

TEST(CheckRunner, APropertyNeedingMoreDevicesIsSkippedNotPassed) {
  offloadkit::host_executor ex;
  bool ran = false;
  check_case c = make_case([&ran](executor&) { ran = true; });
  c.min_devices = ex.device_count() + 1;
  const auto o = run_check(c, ex, check_config{});
  EXPECT_FALSE(ran);
  EXPECT_TRUE(o.skipped);
  EXPECT_FALSE(o.passed);
  EXPECT_NE(o.message.find("needs " + std::to_string(c.min_devices) + " devices"),
            std::string::npos)
      << o.message;
}

TEST(CheckRunner, APropertyTheProfileRulesOutIsNotApplicableNeverRun) {
  offloadkit::host_executor ex;
  bool ran = false;
  check_case c = make_case([&ran](executor&) { ran = true; });
  c.not_applicable = "profile says no graph can capture it";
  const auto o = run_check(c, ex, check_config{});
  EXPECT_FALSE(ran);
  EXPECT_TRUE(o.not_applicable);
  EXPECT_TRUE(o.skipped);
  EXPECT_FALSE(o.passed);
  EXPECT_EQ(o.message, "not applicable: profile says no graph can capture it");
  // The listing helper gives the same outcome without a body.
  const auto listed = offloadkit::not_applicable_case("runner", "test", "graphs", "profile says x");
  EXPECT_FALSE(static_cast<bool>(listed.property));
  EXPECT_TRUE(run_check(listed, ex, check_config{}).not_applicable);
}
