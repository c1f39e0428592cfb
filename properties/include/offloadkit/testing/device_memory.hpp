// Free device memory as the batteries judge it, per device: the executor's device_memory(), which
// is the driver's figure on the cuda back end (other processes and the driver's own bookkeeping
// move it there) and an exact account on the host back end.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"

namespace offloadkit::testing {

/// Device-memory slack tolerated when comparing the driver's free memory of `device`: two
/// granules on a GPU, none on the host back end.
inline std::size_t memory_slack(executor& ex, int device) {
  return ex.kind() == backend::cuda ? 2 * ex.granularity(device) : 0;
}

inline bool near(std::size_t a, std::size_t b, std::size_t slack) {
  return (a > b ? a - b : b - a) <= slack;
}

/// Whether the device's free memory comes back to within `slack` of `target`. A GPU's driver may
/// hand freed memory back a little after the free returns (managed memory especially), so there
/// it is polled for up to a second before the answer is no.
inline bool free_memory_settles_near(executor& ex, int device, std::size_t target,
                                     std::size_t slack) {
  const auto settled = [&] { return near(ex.device_memory(device).free, target, slack); };
  if (settled()) return true;
  if (ex.kind() == backend::host) return false;
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (settled()) return true;
  }
  return false;
}

/// Free memory of every device of `ex`, indexed by device.
inline std::vector<std::size_t> free_per_device(executor& ex) {
  const int devices = ex.device_count();
  std::vector<std::size_t> out;
  out.reserve(static_cast<std::size_t>(devices));
  for (int d = 0; d < devices; ++d) out.push_back(ex.device_memory(d).free);
  return out;
}

/// The first device other than `except` whose free memory is not back within its slack of
/// `before` (polled on a GPU, as above), with the figures, or an empty string when every one is.
inline std::string other_devices_moved(executor& ex, const std::vector<std::size_t>& before,
                                       int except) {
  for (int d = 0; d < static_cast<int>(before.size()); ++d) {
    if (d == except) continue;
    const auto i = static_cast<std::size_t>(d);
    if (!free_memory_settles_near(ex, d, before[i], memory_slack(ex, d))) {
      return ::offloadkit::detail::concat("device ", d, "'s free memory moved from ", before[i],
                                          " to ", ex.device_memory(d).free, " bytes");
    }
  }
  return {};
}

}  // namespace offloadkit::testing
