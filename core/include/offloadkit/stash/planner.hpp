// Capacity planning for the paged stash, the one planner of offloadkit: how many pages a workload
// needs so that nothing overflows, how they split between the device and the pinned tier, and
// what overflows with fewer. A stash takes all its pages or none, from the device tier first and
// then the pinned tier, so a pool overflows exactly when the pages in use plus the key's need
// exceed both tiers together. page_accounting applies that rule one step at a time; plan() and
// the data replay (traces/) both run it, so they agree on every page and every overflow.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "offloadkit/stash/key.hpp"
#include "offloadkit/stash/schedule.hpp"

namespace offloadkit::stash {

/// Pages a key of `rows` rows needs: ceil(rows / rows_per_page).
constexpr std::uint64_t pages_for(std::uint64_t rows, std::uint64_t rows_per_page) {
  return rows_per_page == 0 ? 0 : rows / rows_per_page + (rows % rows_per_page != 0 ? 1 : 0);
}

/// a * b, or UINT64_MAX where the product does not fit: byte figures of extreme schedules
/// (2^24 keys x 2^31 rows x 2^32 bytes) saturate instead of wrapping.
constexpr std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  return (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a)
             ? std::numeric_limits<std::uint64_t>::max()
             : a * b;
}
constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return b > std::numeric_limits<std::uint64_t>::max() - a
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

/// The two tiers of a pool, in pages.
struct tier_pools {
  std::uint64_t device_pages = 0;
  std::uint64_t pinned_pages = 0;
};

/// The first stash a pool cannot hold.
struct predicted_overflow {
  std::size_t step = 0;  ///< schedule step of the first overflowing stash
  stash_key key;
  std::uint64_t rows = 0;
  std::uint64_t needed = 0;       ///< pages the key needed
  std::uint64_t free_device = 0;  ///< free device pages at that moment
  std::uint64_t free_pinned = 0;  ///< free pinned pages at that moment
};

/// Where a live key's pages came from. held == false: nothing stashed (the stash overflowed).
struct placement {
  bool held = false;
  std::uint64_t device = 0;
  std::uint64_t pinned = 0;
};

struct capacity_plan {
  std::uint64_t page_bytes = 0;    ///< rows_per_page * row_bytes (saturating)
  std::uint64_t peak_pages = 0;    ///< the fewest pages (both tiers together) that never overflow
  std::uint64_t device_pages = 0;  ///< device-tier pages of that plan: min(peak, device budget)
  std::uint64_t pinned_pages = 0;  ///< pinned-tier pages the device budget leaves to the host
  std::uint64_t device_bytes = 0;  ///< device_pages * page_bytes (saturating)
  std::uint64_t pinned_bytes = 0;  ///< pinned_pages * page_bytes (saturating)
  std::uint64_t peak_stash_bytes = 0;  ///< peak of exact stashed bytes (rows * layer row bytes)
  std::uint64_t peak_page_bytes = 0;   ///< peak_pages * page_bytes (saturating)
  std::uint64_t peak_live_keys = 0;    ///< most keys stashed at once
  std::uint64_t oversized_bytes = 0;   ///< peak_live_keys * max_rows * row_bytes: static buffers
  // Under the pools plan() was given (without pools: the device tier is unbounded):
  std::uint64_t peak_device_pages = 0;  ///< most device pages in use at once
  std::uint64_t peak_pinned_pages = 0;  ///< most pinned pages in use at once
  std::optional<predicted_overflow> first_overflow;
  std::uint64_t overflow_count = 0;  ///< stashes that overflow (each takes no pages)
};

/// The page accounting rule, one step at a time, for a validated workload. Without pools the
/// device tier is unbounded.
class page_accounting {
 public:
  /// Validates `w` (validate_workload: schedule_error) and rows_per_page (out_of_range). `w` must
  /// outlive this object.
  page_accounting(const workload& w, std::uint64_t rows_per_page,
                  std::optional<tier_pools> pools = std::nullopt);

  /// Applies schedule step i (steps must be applied in order); returns the step key's placement:
  /// for a stash, where its pages went (held == false: it overflowed), for a restore what it held.
  placement apply(std::size_t i);

  [[nodiscard]] std::uint64_t rows(const stash_key& k) const {
    return rows_[key_index(w_->sched, k)];
  }
  [[nodiscard]] std::uint64_t rows_per_page() const noexcept { return rows_per_page_; }
  [[nodiscard]] const capacity_plan& figures() const noexcept { return plan_; }

 private:
  const workload* w_;
  std::uint64_t rows_per_page_;
  std::optional<tier_pools> pools_;
  std::vector<std::uint64_t> rows_;  // by key_index
  // Where a live key's pages are, by key_index: its device pages (a key needs at most 2^31 pages)
  // and whether it is held; the pinned pages are the rest of its need.
  std::vector<std::uint32_t> device_of_;
  std::vector<bool> held_;
  std::uint64_t device_ = 0, pinned_ = 0;          // pages in use under the pools
  std::uint64_t need_ = 0, bytes_ = 0, live_ = 0;  // as if every stash were held
  capacity_plan plan_;
};

/// Plans `w` with pages of `rows_per_page` rows under `pools` (or an unbounded device tier):
/// every figure of capacity_plan in one pass. device_pages / pinned_pages split peak_pages with
/// the pools' device tier as the budget (no pools: all device). Throws schedule_error for an
/// invalid workload, out_of_range for rows_per_page 0.
capacity_plan plan(const workload& w, std::uint64_t rows_per_page,
                   std::optional<tier_pools> pools = std::nullopt,
                   std::vector<stash_key>* dropped = nullptr);

/// plan() with at most `device_page_budget` pages on the device tier, the rest pinned.
capacity_plan plan_capacity(const workload& w, std::uint64_t rows_per_page,
                            std::uint64_t device_page_budget = UINT64_MAX);

/// plan() on a pool of `device_pages` + `pinned_pages` pages: the first overflow, or nothing.
/// Overflowed keys take no pages and their restores return nothing; when `dropped` is not null it
/// receives every key that overflowed, in schedule order.
std::optional<predicted_overflow> predict_overflow(const workload& w, std::uint64_t rows_per_page,
                                                   std::uint64_t device_pages,
                                                   std::uint64_t pinned_pages,
                                                   std::vector<stash_key>* dropped = nullptr);

}  // namespace offloadkit::stash
