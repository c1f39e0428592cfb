// Capacity planning for the paged stash: how many pages a workload needs so that nothing
// overflows, and what the first overflow would be with fewer. A stash takes all its pages or
// none, from the device tier first and then the pinned tier, so a pool overflows exactly when the
// pages in use plus the key's need exceed both tiers together; the planner replays that rule.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "offloadkit/stash/key.hpp"
#include "offloadkit/stash/schedule.hpp"

namespace offloadkit::stash {

/// Pages a key of `rows` rows needs: ceil(rows / rows_per_page).
constexpr std::uint64_t pages_for(std::uint64_t rows, std::uint64_t rows_per_page) {
  return rows_per_page == 0 ? 0 : (rows + rows_per_page - 1) / rows_per_page;
}

struct capacity_plan {
  std::uint64_t peak_pages = 0;    ///< the fewest pages (both tiers together) that never overflow
  std::uint64_t device_pages = 0;  ///< device-tier pages of the plan (min(peak, device budget))
  std::uint64_t pinned_pages = 0;  ///< pinned-tier pages the device budget leaves to the host
  std::uint64_t peak_stash_bytes = 0;  ///< peak of exact stashed bytes (rows * row_bytes)
  std::uint64_t peak_page_bytes = 0;   ///< peak_pages * page bytes
  std::uint64_t peak_live_keys = 0;    ///< most keys stashed at once
  std::uint64_t oversized_bytes = 0;   ///< peak_live_keys * max_rows * row_bytes: static buffers
};

/// Plans `w` with pages of `rows_per_page` rows; at most `device_page_budget` pages go to the
/// device tier, the rest to pinned host memory. Validates the schedule first (logic_error).
capacity_plan plan_capacity(const workload& w, std::uint64_t rows_per_page,
                            std::uint64_t device_page_budget = UINT64_MAX);

/// What the sticky status word must hold after running `w` on a pool of the given tiers.
struct predicted_overflow {
  std::size_t step = 0;  ///< schedule step of the first overflowing stash
  stash_key key;
  std::uint64_t rows = 0;
  std::uint64_t needed = 0;       ///< pages the key needed
  std::uint64_t free_device = 0;  ///< free device pages at that moment
  std::uint64_t free_pinned = 0;  ///< free pinned pages at that moment
};

/// Replays `w` on a pool of `device_pages` + `pinned_pages` pages: the first overflow, or nothing.
/// Overflowed keys take no pages and their restores return nothing; when `dropped` is not null it
/// receives every key that overflowed, in schedule order.
std::optional<predicted_overflow> predict_overflow(const workload& w, std::uint64_t rows_per_page,
                                                   std::uint64_t device_pages,
                                                   std::uint64_t pinned_pages,
                                                   std::vector<stash_key>* dropped = nullptr);

}  // namespace offloadkit::stash
