// Helpers the activation suites share: run one battery case by name and report its outcome.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "offloadkit/testing/activation_battery.hpp"
#include "offloadkit/testing/check.hpp"
#include "testing.hpp"

namespace offloadkit::activation::testing {

/// OFFLOADKIT_CASES sets the cases per property, fewer or more (0 or unset: each case's default).
inline int cases_from_env() {
  const char* v = std::getenv("OFFLOADKIT_CASES");
  return v != nullptr ? std::atoi(v) : 0;
}

inline check_outcome run_named(const std::vector<check_case>& cases, const std::string& name,
                               executor& ex, int cases_cap = 0) {
  for (const auto& c : cases) {
    if (c.name != name) continue;
    check_config cfg;
    cfg.seed = offloadkit::testing::seed();
    cfg.cases = cases_cap != 0 ? cases_cap : cases_from_env();
    return run_check(c, ex, cfg);
  }
  ADD_FAILURE() << "no battery case named " << name;
  return {};
}

inline std::string describe(const check_outcome& o) {
  return o.feature + "/" + o.implementation + "/" + o.name + " on " + o.executor_name + ": " +
         (o.passed ? "passed" : "FAILED") + " after " + std::to_string(o.cases_run) +
         " cases, seed " + std::to_string(o.seed) + "\n" + o.message;
}

}  // namespace offloadkit::activation::testing
