// NVTX's static injection hook for the tests of this folder: NVTX calls the function this
// pointer names at the process's first NVTX call (when NVTX_INJECTION64_PATH is not set), as it
// would call InitializeInjectionNvtx2 in a library that variable names. It attaches the collector.
#include <cstdint>

#include "offloadkit/traces/nvtx_collector.hpp"

namespace {
int attach_collector(const void* (*get_export_table)(std::uint32_t)) {
  return offloadkit::traces::nvtx_collector::attach(get_export_table);
}
}  // namespace

extern "C" {
// NOLINTNEXTLINE(readability-identifier-naming): the name NVTX looks for
int (*InitializeInjectionNvtx2_fnptr)(const void* (*)(std::uint32_t)) = &attach_collector;
}
