// The executor battery: the properties every executor back end must satisfy (copies in every
// direction, fill, launch with device-scope atomics, stream order, event ordering across streams,
// VMM remap at a fixed address, graph replay after a remap, recovery from injected faults, the
// counting adaptor's accounting, and, with two devices or more, every device's resources placed on
// it). The properties are the same for every back end; the executor to check is handed to
// run_check at run time. The property bodies are in properties/executor/src/, compiled once into
// offloadkit_executor_battery.
#pragma once

#include <string>
#include <vector>

#include "offloadkit/testing/check.hpp"

namespace offloadkit::testing {

/// The battery's check_cases, with feature "executor" and `executor_name` as their implementation.
std::vector<check_case> executor_battery(const std::string& executor_name);

}  // namespace offloadkit::testing
