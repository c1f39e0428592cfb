// The region battery: every property an offload_region must have, written once against the
// interface and instantiated for every implementation (by type, or by factory for test-only
// variants). Run by the typed GoogleTest suites and by `offloadkit check`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offloadkit/check.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/region/region.hpp"

namespace offloadkit::region {

using region_factory = std::function<std::unique_ptr<offload_region>(executor&, region_config)>;

/// The cases for one implementation: model_based, release_is_real, graph_replay_after_resume,
/// fault_countdown_pause, fault_countdown_resume, many_cycles, state_errors, multi_device,
/// cross_stream_order.
std::vector<check_case> region_battery(const std::string& implementation, region_factory make);

/// Name of an implementation type in check results.
template <class Impl>
struct region_impl_name;

template <class Impl>
std::vector<check_case> region_battery() {
  return region_battery(region_impl_name<Impl>::value, [](executor& ex, region_config c) {
    return std::unique_ptr<offload_region>(std::make_unique<Impl>(ex, c));
  });
}

/// The cases that apply to unified_region, whose release behaviour differs (unified_region.hpp):
/// model_based, graph_replay_after_resume, state_errors, cross_stream_order and
/// unified_release_behaviour.
std::vector<check_case> unified_region_battery();

/// The cases of every region implementation in the library (reference, optimized, unified).
std::vector<check_case> region_checks();

}  // namespace offloadkit::region
