// run_check(): runs one check_case's property under rapidcheck with an explicit seed, case count
// and size bound, and turns rapidcheck's result into a check_outcome. A failing property is a
// result, never an exception, so one failure does not stop a battery.
#include "offloadkit/testing/check.hpp"

#include <rapidcheck.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>

#include "offloadkit/teardown.hpp"
#include "offloadkit/testing/fixed_cases.hpp"

namespace offloadkit {
namespace {

/// The draws one fixed_then_random() call site has made in a run: each random source it was
/// given, with the index it was given first.
struct fixed_draws {
  std::size_t next = 0;
  std::map<rc::Random, std::size_t> index;
};

/// What each fixed_then_random() call site has drawn in the run_check() run in progress on this
/// thread.
thread_local std::map<std::string, fixed_draws> tls_fixed_cases_drawn;

// rapidcheck's global listener prints to stderr and, at exit, a hint in RC_PARAMS terms; offloadkit
// reports the seed and the command that replays it itself, so the run listens to nothing.
class silent_listener final : public rc::detail::TestListener {
 public:
  void onTestCaseFinished(const rc::detail::CaseDescription& /*description*/) override {}
  void onShrinkTried(const rc::detail::CaseDescription& /*shrink*/, bool /*accepted*/) override {}
  void onTestFinished(const rc::detail::TestMetadata& /*metadata*/,
                      const rc::detail::TestResult& /*result*/) override {}
};

std::uint64_t fresh_seed() {
  std::random_device rd;
  std::uint64_t s = 0;
  while (s == 0) s = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return s;
}

/// What the property's runs said, as seen from inside: rapidcheck re-runs the final (shrunk) case
/// to describe it, and a failure that depends on timing may not recur in that run.
struct observations {
  bool last_run_failed = false;
  std::string last_failure;
};

std::string describe(const rc::detail::FailureResult& f, const observations& seen) {
  std::ostringstream os;
  os << "falsified after " << f.numSuccess << " successful case(s): ";
  if (seen.last_run_failed || seen.last_failure.empty()) {
    os << f.description;
  } else {
    os << seen.last_failure
       << "\n(this failure did not recur when the case was run again to report it: it depends on "
          "timing or on state outside the case)";
  }
  if (!f.counterExample.empty()) {
    os << "\ncounterexample:";
    for (const auto& [type, value] : f.counterExample) os << "\n  " << type << ": " << value;
  }
  return os.str();
}

/// `description` with what the run in progress logged (RC_LOG), as rapidcheck appends it to the
/// description of the run it reports: a failure that does not recur in that run keeps its log (the
/// drawn delays, say), which is often what explains it.
std::string with_run_log(const std::string& description) {
  rc::detail::PropertyContext* context =
      rc::detail::ImplicitParam<rc::detail::param::CurrentPropertyContext>::value();
  const auto* log =
      context != nullptr ? dynamic_cast<const std::ostringstream*>(&context->logStream()) : nullptr;
  if (log == nullptr || log->str().empty()) return description;
  return description + "\n\nLog:\n" + log->str();
}

/// Teardown failures (teardown.hpp) recorded outside any run of a property: an object that outlived
/// the run that made it and went between runs. No case can be blamed; they are printed.
void print_stray_teardown_errors() {
  for (const std::string& e : take_teardown_errors()) {
    std::fprintf(stderr, "offloadkit: a teardown failure outside any case of the property: %s\n",
                 e.c_str());
  }
}

/// Fails the run in progress when it recorded teardown failures, as RC_FAIL does (so that the case
/// shrinks and is described like any other failure): `description` is the run's own failure, or
/// empty when the body returned normally (or only discarded or succeeded early).
void fail_on_teardown_errors(observations& seen, const std::string& description) {
  const std::string teardown = join_teardown_errors(take_teardown_errors());
  if (teardown.empty()) return;
  seen.last_run_failed = true;
  seen.last_failure =
      description.empty()
          ? "teardown failed:\n" + teardown
          : description + "\nand while the case unwound, teardown failed:\n" + teardown;
  throw rc::detail::CaseResult(rc::detail::CaseResult::Type::Failure, seen.last_failure);
}

}  // namespace

namespace testing::detail {
std::size_t fixed_case_index(const char* tag, const rc::Random& r) {
  fixed_draws& draws = tls_fixed_cases_drawn[tag];
  const auto [it, fresh] = draws.index.try_emplace(r, draws.next);
  if (fresh) ++draws.next;
  return it->second;
}
}  // namespace testing::detail

int planned_cases(const check_case& c, const check_config& cfg) {
  // An explicit count wins both ways: a user hunting a rare failure runs longer than the default,
  // and a quick smoke run shorter.
  return std::max(1, cfg.cases > 0 ? cfg.cases : c.default_cases);
}

check_case not_applicable_case(std::string feature, std::string implementation, std::string name,
                               std::string why) {
  check_case c;
  c.feature = std::move(feature);
  c.implementation = std::move(implementation);
  c.name = std::move(name);
  c.not_applicable = std::move(why);
  c.default_cases = 1;
  return c;
}

check_outcome outcome_before_run(const check_case& c, const std::string& executor_name,
                                 const check_config& cfg) {
  check_outcome o;
  o.feature = c.feature;
  o.implementation = c.implementation;
  o.name = c.name;
  o.executor_name = executor_name;
  o.seed = cfg.seed != 0 ? cfg.seed : fresh_seed();
  o.cases_planned = planned_cases(c, cfg);
  if (!c.not_applicable.empty()) {
    o.skipped = true;
    o.not_applicable = true;
    o.message = "not applicable: " + c.not_applicable;
  }
  return o;
}

check_outcome run_check(const check_case& c, executor& ex, const check_config& cfg) {
  check_outcome o = outcome_before_run(c, to_string(ex.kind()), cfg);
  if (o.not_applicable) return o;

  if (ex.device_count() < c.min_devices) {
    o.skipped = true;
    o.message = "skipped: needs " + std::to_string(c.min_devices) + " devices, " + ex.name() +
                " has " + std::to_string(ex.device_count());
    return o;
  }

  if (!c.property) {
    o.message = "the check case has no property body";
    return o;
  }

  // Every run starts with its property's fixed cases.
  tls_fixed_cases_drawn.clear();

  rc::detail::TestParams params;
  params.seed = o.seed;
  params.maxSuccess = o.cases_planned;
  params.maxSize = cfg.max_size;
  params.disableShrinking = !cfg.shrink;

  rc::detail::TestMetadata metadata;
  metadata.id = c.feature + "/" + c.implementation + "/" + c.name;
  metadata.description = c.name;

  silent_listener listener;
  const std::unordered_map<std::string, rc::detail::Reproduce> no_reproduce;
  const auto& property = c.property;
  observations seen;
  // A destructor that fails (a plugin's close) records the failure instead of throwing; each run
  // starts with an empty record and fails when the objects it destroyed recorded something.
  const auto run_once = [&property, &ex, &seen] {
    seen.last_run_failed = false;
    print_stray_teardown_errors();
    try {
      property(ex);
    } catch (const rc::detail::CaseResult& r) {
      const bool failed = r.type == rc::detail::CaseResult::Type::Failure;
      if (failed) {
        seen.last_run_failed = true;
        seen.last_failure = with_run_log(r.description);
      }
      fail_on_teardown_errors(seen, failed ? seen.last_failure : "");
      throw;
    } catch (const std::exception& e) {
      seen.last_run_failed = true;
      seen.last_failure = with_run_log(std::string("exception thrown: ") + e.what());
      fail_on_teardown_errors(seen, seen.last_failure);
      throw;
    } catch (...) {
      seen.last_run_failed = true;
      seen.last_failure = with_run_log("a non-standard exception was thrown");
      fail_on_teardown_errors(seen, seen.last_failure);
      throw;
    }
    fail_on_teardown_errors(seen, "");
  };
  try {
    const auto result =
        rc::detail::checkTestable(run_once, metadata, params, listener, no_reproduce);
    if (result.is<rc::detail::SuccessResult>()) {
      o.passed = true;
      o.cases_run = result.get<rc::detail::SuccessResult>().numSuccess;
    } else if (result.is<rc::detail::FailureResult>()) {
      const auto& failure = result.get<rc::detail::FailureResult>();
      o.cases_run = failure.numSuccess + 1;
      o.message = describe(failure, seen);
    } else if (result.is<rc::detail::GaveUpResult>()) {
      const auto& gave_up = result.get<rc::detail::GaveUpResult>();
      o.cases_run = gave_up.numSuccess;
      o.message = "gave up after " + std::to_string(gave_up.numSuccess) +
                  " successful case(s): " + gave_up.description;
    } else if (result.is<rc::detail::Error>()) {
      o.message =
          "rapidcheck could not run the property: " + result.get<rc::detail::Error>().description;
    } else {
      o.message = "rapidcheck returned an unknown result";
    }
  } catch (const std::exception& e) {
    o.message = std::string("the check itself threw: ") + e.what();
  } catch (...) {
    o.message = "the check itself threw a non-standard exception";
  }
  if (!o.passed && o.message.empty()) o.message = "failed without a description";
  return o;
}

battery_verdict run_battery(const std::vector<check_case>& battery, const check_config& cfg,
                            const std::function<executor&(const check_case&)>& executor_for) {
  battery_verdict v;
  for (const check_case& c : battery) {
    const check_outcome o = run_check(c, executor_for(c), cfg);
    if (o.passed || o.skipped) continue;
    v.failed.insert(c.name);
    v.messages[c.name] = o.message;
    std::printf("%s failed (seed %llu): %s\n", c.name.c_str(),
                static_cast<unsigned long long>(o.seed), o.message.substr(0, 400).c_str());
  }
  return v;
}

std::string reproduce_command(const check_outcome& o) { return reproduce_command(o, "offloadkit"); }

std::string reproduce_command(const check_outcome& o, const std::string& program) {
  std::ostringstream os;
  os << program << " check --executor " << o.executor_name << " --feature " << o.feature
     << " --implementation " << o.implementation << " --property " << o.name << " --seed " << o.seed
     << " --cases " << o.cases_planned;
  return os.str();
}

}  // namespace offloadkit
