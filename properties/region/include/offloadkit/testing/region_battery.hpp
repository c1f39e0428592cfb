// The region battery: every property an offload_region must have, written once against the
// interface and listed for every implementation descriptor (testing::region_implementation), run
// by what it declares and otherwise listed as not applicable: release_is_real and many_cycles only
// when pause releases memory, multi_device only for regions that may live on any device, fault
// countdowns only when the region's allocations go through the executor, address checks only for
// a stable address, and the managed-memory release behaviour only for a managed region; pauses,
// streams and graphs as its profile declares them. Run by the generated GoogleTest suites and by
// `offloadkit check`. The property bodies are in properties/region/src/, compiled once into
// offloadkit_region_battery.
#pragma once

#include <vector>

#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::testing {

/// The cases for one implementation, every property of the battery in the order
/// properties/region/src/battery.cpp lists them (those its profile rules out as not applicable).
std::vector<check_case> region_battery(const region_implementation& impl);

/// The library's regions as descriptors, with their true capabilities: the reference region
/// (moves on resume), the optimized virtual-memory region, and the unified-memory region (keeps
/// its managed allocation while paused and calls CUDA itself, so the executor's fault adaptors
/// cannot fail its allocations).
region_implementation reference_region_implementation();
region_implementation optimized_region_implementation();
region_implementation unified_region_implementation();
std::vector<region_implementation> builtin_region_implementations();

/// The battery of every built-in region implementation.
std::vector<check_case> region_checks();

}  // namespace offloadkit::testing
