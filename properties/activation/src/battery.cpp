// The activation battery's list of properties, the built-in implementations as descriptors, and
// every case that `offloadkit check` runs.
#include <memory>
#include <string>
#include <utility>

#include "activation_properties.hpp"
#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/testing/activation_battery.hpp"
#include "offloadkit/testing/battery_list.hpp"

namespace offloadkit::testing {

std::vector<check_case> activation_battery(const activation_implementation& impl) {
  namespace props = activation::testing;
  const activation_capabilities& caps = impl.caps;
  battery_list<activation_implementation> list("activation", impl);
  list.add("round_trip", &props::round_trip, 150);
  list.add("two_devices", &props::two_devices, 100).min_devices = 2;
  list.add_if(caps.prefetch_bound, "prefetch_memory_bound", &props::memory_bound, 150,
              "profile says prefetch_bytes is not honoured (prefetch_bound not declared)");
  list.add("races_with_delays", &props::races, 100);
  list.add_if(caps.pending_bound, "pending_source_bound", &props::pending_bound, 100,
              "profile says max_pending_bytes is not honoured (pending_bound not declared)");
  list.add("source_reuse_other_stream", &props::source_reuse, 60);
  // Every profile copies a source in the order of the caller's stream: a hold of 300 to 400 ms a
  // case.
  list.add("caller_writes_late", &props::caller_writes_late, 5);
  const std::string no_prefetch =
      "profile says nothing is uploaded ahead of unpack() (backward_prefetch not declared)";
  list.add_if(caps.backward_prefetch, "prefetch_order", &props::prefetch_order, 100, no_prefetch);
  list.add_if(caps.backward_prefetch, "steady_state_demand_uploads", &props::steady_demand_uploads,
              60, no_prefetch);
  list.add_if(caps.dedup == activation_dedup::by_storage, "storage_dedup", &props::storage_dedup,
              100,
              "profile says every offloaded pack is copied on its own (dedup_by_storage not "
              "declared)");
  // Deterministic: the same edge configurations every case, so one case is the whole check.
  list.add("config_edges", &props::config_edges, 1);
  list.add_if(impl.support.executor_allocations, "fault_countdown", &props::fault_countdown, 25,
              allocations_not_through_executor());
  return std::move(list).take();
}

activation_implementation reference_activation_implementation() {
  activation_implementation impl;
  impl.name = "reference";
  impl.make = [](executor& ex, const activation::offload_options& o) {
    return std::unique_ptr<activation::offloader>(
        std::make_unique<activation::reference_offloader>(ex, o));
  };
  return impl;
}

activation_implementation optimized_activation_implementation() {
  activation_implementation impl;
  impl.name = "optimized";
  impl.caps.backward_prefetch = true;
  impl.make = [](executor& ex, const activation::offload_options& o) {
    return std::unique_ptr<activation::offloader>(
        std::make_unique<activation::async_offloader>(ex, o));
  };
  return impl;
}

std::vector<activation_implementation> builtin_activation_implementations() {
  return {reference_activation_implementation(), optimized_activation_implementation()};
}

std::vector<check_case> activation_checks() {
  std::vector<check_case> cases;
  for (const activation_implementation& impl : builtin_activation_implementations()) {
    for (check_case& c : activation_battery(impl)) cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace offloadkit::testing
