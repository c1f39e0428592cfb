// The region battery for every implementation the library ships, for `offloadkit check`.
#include "offloadkit/region/battery_impls.hpp"

namespace offloadkit::region {

std::vector<check_case> region_checks() {
  auto out = region_battery<reference_region>();
  auto opt = region_battery<vmm_region>();
  out.insert(out.end(), opt.begin(), opt.end());
  auto unified = unified_region_battery();
  out.insert(out.end(), unified.begin(), unified.end());
  return out;
}

}  // namespace offloadkit::region
