// The registry of property batteries that `offloadkit check` runs.
#pragma once

#include <string>
#include <vector>

#include "offloadkit/interpose/scenarios.hpp"
#include "offloadkit/testing/check.hpp"

namespace offloadkit::tools {

/// Every registered battery's check_cases for the executor named `executor_name` ("host" or
/// "cuda"), in the order `offloadkit check` runs them.
std::vector<check_case> all_check_cases(const std::string& executor_name);

/// The cases of the plugin library at `path` on the executor named `executor_name`; a line per
/// feature that yields none goes to `notes`. Throws plugin::plugin_error when it cannot be loaded.
std::vector<check_case> plugin_check_cases(const std::string& path,
                                           const std::string& executor_name,
                                           std::vector<std::string>& notes);

/// The implementations of the plugin library at `path`, by feature (`check --driver-faults`).
/// Throws plugin::plugin_error when it cannot be loaded.
interpose::fault_subjects plugin_fault_subjects(const std::string& path);

}  // namespace offloadkit::tools
