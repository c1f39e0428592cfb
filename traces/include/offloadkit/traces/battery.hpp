// The traces battery for `offloadkit check` and ctest: replay of random valid schedules on the
// given executor (through the built-in page model and, where the paged stash is built, its
// reference and optimized implementations) restores every byte and agrees with the planner, and
// schedule and timeline files round-trip.
#pragma once

#include <vector>

#include "offloadkit/testing/check.hpp"

namespace offloadkit::traces {

std::vector<check_case> traces_checks();

}  // namespace offloadkit::traces
