// The registry of property batteries that `offloadkit check` runs.
#pragma once

#include <string>
#include <vector>

#include "offloadkit/testing/check.hpp"

namespace offloadkit::tools {

/// Every registered battery's check_cases for the executor named `executor_name` ("host" or
/// "cuda"), in the order `offloadkit check` runs them.
std::vector<check_case> all_check_cases(const std::string& executor_name);

}  // namespace offloadkit::tools
