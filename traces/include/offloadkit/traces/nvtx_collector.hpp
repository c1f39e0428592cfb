// The NVTX collector: offloadkit's own NVTX injection. NVTX (the NVTX3 headers every CUDA library
// and PyTorch compile in, and the older libnvToolsExt) hands its calls to the library named by
// NVTX_INJECTION64_PATH, calling that library's InitializeInjectionNvtx2 at its first call. The
// injection library (traces/injection) exports that function and forwards it to attach(), which
// installs the handlers below into NVTX's callback tables. From then on every range (push/pop and
// start/end), mark, domain and registered string of the process reaches take() as timeline
// records of kind `range` (a mark is a range whose end is its start) with the domain's name, the
// category and the payload of its event attributes.
//
// Nothing here needs a GPU or CUPTI: the clock is CUPTI's when the injection library sets it (so
// that ranges line up with device work), otherwise CLOCK_MONOTONIC.
#pragma once

#include <cstdint>
#include <vector>

#include "offloadkit/traces/timeline.hpp"

namespace offloadkit::traces::nvtx_collector {

/// NVTX's export-table getter, as InitializeInjectionNvtx2 receives it.
using export_table_getter = const void* (*)(std::uint32_t table_id);

/// Installs the handlers through `get`. Returns 1 when they are installed (NVTX then routes its
/// calls here) and 0 when NVTX offers no callback table this collector can fill (NVTX then keeps
/// its no-op implementation). Safe to call more than once: later calls install the same handlers.
int attach(export_table_getter get) noexcept;

/// Whether attach() succeeded in this process.
[[nodiscard]] bool attached() noexcept;

/// The clock for the records' times, in nanoseconds; nullptr restores CLOCK_MONOTONIC.
void set_clock(std::int64_t (*now_ns)()) noexcept;

/// Moves out the ranges that have ended and the marks, in the order they were recorded. Ranges
/// still open stay open and are returned once they end.
std::vector<record> take();

/// Ranges pushed or started and not yet ended (for a report of what a run left open).
[[nodiscard]] std::size_t open_ranges();

}  // namespace offloadkit::traces::nvtx_collector
