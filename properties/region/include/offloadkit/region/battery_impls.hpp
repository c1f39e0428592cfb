// The names under which the library's region implementations appear in check results.
#pragma once

#include "offloadkit/region/battery.hpp"
#include "offloadkit/region/reference_region.hpp"
#include "offloadkit/region/unified_region.hpp"
#include "offloadkit/region/vmm_region.hpp"

namespace offloadkit::region {

template <>
struct region_impl_name<reference_region> {
  static constexpr const char* value = "reference";
};
template <>
struct region_impl_name<vmm_region> {
  static constexpr const char* value = "optimized";
};

template <>
struct region_impl_name<unified_region> {
  static constexpr const char* value = "unified";
};

}  // namespace offloadkit::region
