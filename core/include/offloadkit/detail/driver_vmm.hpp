// The driver's virtual-memory calls as one set of entry points, for code that calls them without
// linking libcuda: offloadkit's cuda executor, and the test programs and planted black boxes that
// call the driver themselves. Each fills them in its own way (cudaGetDriverEntryPointByVersion,
// dlsym) and adds the other entry points it needs by deriving from it.
#pragma once

#include <cudaTypedefs.h>

namespace offloadkit::detail {

/// Reserve an address range and free it, create physical memory and release it, map it into a
/// range and unmap it, and give a device access to a mapped range.
struct driver_vmm_calls {
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
};

}  // namespace offloadkit::detail
