// The reset of a pool: every page back in its freelist, the page table empty, the status clear.
#pragma once

#include "pool_layout.cuh"

namespace offloadkit::stash::kernels {

/// Fills both freelists with every page, empties the page table and clears the status word.
/// Index space: max(D, P, max_keys, 1).
struct reset_body {
  pool_view v;
  std::uint64_t max_keys;

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    if (i < v.capacity[0]) v.ids[0][i] = static_cast<std::uint32_t>(i);
    if (i < v.capacity[1]) v.ids[1][i] = static_cast<std::uint32_t>(i);
    if (i < max_keys) v.entries[i].state = entry_empty;
    if (i == 0) {
      v.control->ring[0].head = 0;
      v.control->ring[0].tail = v.capacity[0];
      v.control->ring[1].head = 0;
      v.control->ring[1].tail = v.capacity[1];
      v.control->done = 0;
      v.control->next = 0;
      v.control->status = status_word{};
    }
  }
};

}  // namespace offloadkit::stash::kernels
