// The arena battery's entry points without its property bodies (and without rapidcheck): the
// list of properties for an implementation descriptor, the built-in implementations as
// descriptors, and every case `offloadkit check` runs.
#pragma once

#include <vector>

#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::testing {

/// The battery for one implementation: the properties its promises and executor support call for,
/// named after it in the results.
std::vector<check_case> arena_battery(const arena_implementation& impl);

/// The built-in offloaders as descriptors, with the promises they make: the per-tensor reference
/// (none) and the coalesced pinned arena (all three).
arena_implementation reference_arena_implementation();
arena_implementation optimized_arena_implementation();
std::vector<arena_implementation> builtin_arena_implementations();

/// The battery of every built-in arena implementation ("arena" feature cases).
std::vector<check_case> arena_checks();

}  // namespace offloadkit::testing
