// The region battery together with the library's region classes, for suites that build test-only
// variants on top of them (planted bugs forward to a vmm_region or a reference_region).
#pragma once

#include "offloadkit/region/reference_region.hpp"
#include "offloadkit/region/unified_region.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/testing/region_battery.hpp"
