// A plugin library named by its path, as `check --plugin` and `check --python` take it: its battery
// cases and its implementations by feature (`check --driver-faults`). The offloadkit command and
// the Python package's extension module both use these.
#pragma once

#include <string>
#include <vector>

#include "offloadkit/interpose/scenarios.hpp"
#include "offloadkit/testing/check.hpp"

namespace offloadkit::tools {

/// The cases of the plugin library at `path` on the executor named `executor_name`; a line per
/// feature that yields none goes to `notes`. Throws plugin::plugin_error when it cannot be loaded.
std::vector<check_case> plugin_check_cases(const std::string& path,
                                           const std::string& executor_name,
                                           std::vector<std::string>& notes);

/// The implementations of the plugin library at `path`, by feature (`check --driver-faults`).
/// Throws plugin::plugin_error when it cannot be loaded.
interpose::fault_subjects plugin_fault_subjects(const std::string& path);

}  // namespace offloadkit::tools
