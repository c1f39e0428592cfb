// The arena battery: every property of an offloader, written once against the interface and
// listed for an implementation descriptor (testing::arena_implementation) by what it declares:
// each promise in its caps is checked (and the instance's promises() must agree with them), and
// fault injection applies only when its allocations and copies go through the executor, and the
// second-device property only where the descriptor can make an offloader for that device. Run by
// the generated ctest suites on both executors and by `offloadkit check` through arena_checks().
// The property bodies are in properties/arena/src/, compiled once into offloadkit_arena_battery.
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
