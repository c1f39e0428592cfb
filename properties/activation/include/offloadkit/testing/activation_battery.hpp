// The activation battery: the properties of any activation offloader, written once against the
// offloader interface and run through the training-step driver: bit-exact round trips for random
// layer stacks, tensors back on their device of origin with two devices, the prefetch memory
// bound, exact results with delays injected on the offloader's own streams, and the bound on
// sources held while their copies are in flight. Listed for an implementation descriptor
// (testing::activation_implementation) by what it declares; run by the generated ctest suites on
// both executors and by `offloadkit check` through activation_checks().
#pragma once

#include <vector>

#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::testing {

/// The battery for one implementation: round_trip, two_devices and races_with_delays always
/// (round_trip checks the threshold, or under an opaque predicate the decisions reported in
/// stats(); two_devices the declared return device); prefetch_memory_bound with
/// caps.prefetch_bound, pending_source_bound with caps.pending_bound, storage_dedup with
/// caps.dedup == by_storage.
std::vector<check_case> activation_battery(const activation_implementation& impl);

/// The built-in offloaders as descriptors: the synchronous reference and the asynchronous
/// optimized offloader, both honouring every bound and the device of origin.
activation_implementation reference_activation_implementation();
activation_implementation optimized_activation_implementation();
std::vector<activation_implementation> builtin_activation_implementations();

/// The battery of every built-in activation implementation.
std::vector<check_case> activation_checks();

}  // namespace offloadkit::testing
