// The region battery's list of properties, the library's region implementations as descriptors,
// and every case that `offloadkit check` runs.
#include <memory>
#include <string>
#include <utility>

#include "offloadkit/testing/battery_list.hpp"
#include "offloadkit/testing/region_battery_impls.hpp"
#include "region_properties.hpp"

namespace offloadkit::testing {

std::vector<check_case> region_battery(const region_implementation& impl) {
  namespace props = region::testing;
  const region_capabilities& caps = impl.caps;
  const std::string keeps_memory =
      "profile says pause() keeps the device memory (releases_memory not declared)";
  battery_list<region_implementation> list("region", impl);
  list.add("model_based", &props::model_based, 30);
  list.add_if(caps.releases_memory, "release_is_real", &props::release_is_real, 10, keeps_memory)
      .reads_free_memory = true;
  list.add("graph_replay_after_resume", &props::graph_replay_after_resume, 15);
  list.add("swap_keeps_both", &props::swap_keeps_both, 15).reads_free_memory = true;
  // The fault adaptor fails only what passes through the executor.
  for (const auto& [name, which] : {std::pair{"fault_countdown_pause", props::phase::pause},
                                    std::pair{"fault_countdown_resume", props::phase::resume}}) {
    list.add_if(
            impl.support.executor_allocations, name,
            [which = which](executor& ex, const region_implementation& i) {
              props::fault_countdown(ex, i, which);
            },
            3, allocations_not_through_executor())
        .reads_free_memory = true;
  }
  list.add_if(impl.support.executor_allocations, "fault_countdown_swap",
              &props::fault_countdown_swap, 3, allocations_not_through_executor())
      .reads_free_memory = true;
  list.add_if(caps.releases_memory, "many_cycles", &props::many_cycles, 1, keeps_memory)
      .reads_free_memory = true;
  list.add("state_errors", &props::state_errors, 10).reads_free_memory = true;
  check_case& multi =
      list.add_if(caps.multi_device, "multi_device", &props::multi_device, 5,
                  "profile says a region lives on the current device only (multi_device not "
                  "declared)");
  multi.min_devices = 2;
  multi.reads_free_memory = true;
  list.add("cross_stream_order", &props::cross_stream_order, 5);
  list.add("caller_writes_late", &props::caller_writes_late, 5);
  list.add("adjacent_allocations", &props::adjacent_allocations, 10);
  list.add_if(caps.managed_memory, "unified_release_behaviour", &props::unified_release_behaviour,
              10,
              "profile says the region is not one managed allocation (managed_memory not "
              "declared)")
      .reads_free_memory = true;
  return std::move(list).take();
}
namespace {

template <class Region>
region_factory factory_of() {
  return [](executor& ex, region::region_config c) {
    return std::unique_ptr<region::offload_region>(std::make_unique<Region>(ex, c));
  };
}

}  // namespace

region_implementation reference_region_implementation() {
  region_implementation impl;
  impl.name = "reference";
  impl.caps.address_stable = false;  // cudaMalloc again on resume: a new address
  impl.caps.releases_memory = true;
  impl.caps.multi_device = true;
  impl.make = factory_of<region::reference_region>();
  return impl;
}

region_implementation optimized_region_implementation() {
  region_implementation impl;
  impl.name = "optimized";
  impl.caps.address_stable = true;
  impl.caps.releases_memory = true;
  impl.caps.multi_device = true;
  impl.make = factory_of<region::vmm_region>();
  return impl;
}

region_implementation unified_region_implementation() {
  region_implementation impl;
  impl.name = "unified";
  impl.caps.address_stable = true;
  // Pause migrates the managed pages instead of freeing them (unified_region.hpp).
  impl.caps.releases_memory = false;
  // Managed memory (host memory on the host back end) belongs to no device: a region placed on a
  // second device is not that device's memory, which is what multi_device checks.
  impl.caps.multi_device = false;
  impl.caps.managed_memory = true;
  impl.make = factory_of<region::unified_region>();
  return impl;
}

std::vector<region_implementation> builtin_region_implementations() {
  return {reference_region_implementation(), optimized_region_implementation(),
          unified_region_implementation()};
}

std::vector<check_case> region_checks() {
  std::vector<check_case> out;
  for (const region_implementation& impl : builtin_region_implementations()) {
    for (check_case& c : region_battery(impl)) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace offloadkit::testing
