// The library's region implementations as battery descriptors, and their cases for
// `offloadkit check`.
#include <memory>

#include "offloadkit/testing/region_battery_impls.hpp"

namespace offloadkit::testing {
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
