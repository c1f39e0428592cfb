// The activation battery: the properties of any activation offloader, written once against the
// offloader interface and run through the training-step driver: bit-exact round trips for random
// layer stacks, tensors back on their device of origin with two devices, the prefetch memory
// bound, exact results with delays injected on the offloader's own streams, and the bound on
// sources held while their copies are in flight. Instantiated for every implementation type
// (reference, optimized, and the planted bugs of the test sources); run by the ctest suites on
// both executors and by `offloadkit check` through activation_checks().
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/check.hpp"
#include "offloadkit/executor.hpp"

namespace offloadkit::activation {

/// Builds one offloader of an implementation on an executor.
using offloader_factory =
    std::function<std::unique_ptr<offloader>(executor& ex, const offload_options& options)>;

/// Property names, as in check_case::name.
inline constexpr const char* round_trip_property = "round_trip";
inline constexpr const char* two_devices_property = "two_devices";
inline constexpr const char* memory_bound_property = "prefetch_memory_bound";
inline constexpr const char* races_property = "races_with_delays";
inline constexpr const char* pending_bound_property = "pending_source_bound";

/// The battery for one implementation given by a factory.
std::vector<check_case> activation_battery_for(const std::string& implementation,
                                               offloader_factory make);

/// The battery for an implementation type constructible as Impl(executor&, offload_options).
template <class Impl>
std::vector<check_case> activation_battery(const std::string& implementation) {
  return activation_battery_for(implementation, [](executor& ex, const offload_options& o) {
    return std::unique_ptr<offloader>(std::make_unique<Impl>(ex, o));
  });
}

/// Every battery case for every shipped implementation (reference and optimized).
std::vector<check_case> activation_checks();

}  // namespace offloadkit::activation
