// The page accounting shared by the planner and the data replay (private to traces/src), so both
// agree on where every key's pages come from and on the first overflow.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "offloadkit/traces/replay.hpp"

namespace offloadkit::traces::detail {

inline std::uint64_t max_row_bytes_of(const schedule& s) {
  std::uint64_t m = 0;
  for (auto b : s.row_bytes) m = std::max(m, b);
  return m;
}

inline std::string key_text(schedule_key k) {
  return "(vp " + std::to_string(k.vp) + ", layer " + std::to_string(k.layer) + ", microbatch " +
         std::to_string(k.microbatch) + ")";
}

/// Where a live key's pages came from: a stash takes all its pages or none, from the device
/// tier first and the rest from the pinned tier (offloadkit::stash's rule), so a key may span
/// both tiers. held == false: nothing stashed (overflow, or not stashed yet).
struct placement {
  bool held = false;
  std::uint64_t device = 0;
  std::uint64_t pinned = 0;
};

/// The allocation policy shared by the planner and the data replay, so both agree on overflows.
class tier_accounting {
 public:
  tier_accounting(const schedule& s, const std::optional<schedule_pools>& pools)
      : s_(s), pools_(pools), where_(s.key_count()) {}

  /// Applies step i; returns the placement of the step's key (for a restore: what it held).
  placement apply(std::size_t i, replay_result& r) {
    const schedule_step& st = s_.steps[i];
    const std::size_t ki = s_.key_index(st.key);
    const std::uint64_t need = s_.pages_of(st.key);
    const std::uint64_t oversized =
        std::uint64_t{s_.max_rows} * s_.row_bytes[static_cast<std::size_t>(st.key.layer)];
    if (st.op == schedule_op::stash) {
      placement p;
      if (!pools_) {
        p = {true, need, 0};
      } else {
        const std::uint64_t dfree = pools_->device_pages - device_;
        const std::uint64_t pfree = pools_->pinned_pages - pinned_;
        if (dfree + pfree >= need) {
          p.held = true;
          p.device = std::min(need, dfree);
          p.pinned = need - p.device;
        } else if (!r.overflow) {
          r.overflow = overflow_info{i, st.source_index, st.key, need, dfree, pfree};
        }
      }
      where_[ki] = p;
      if (p.held) {
        device_ += p.device;
        pinned_ += p.pinned;
        stashed_ += s_.bytes_of(st.key);
        live_keys_bytes_ += oversized;
      }
      r.peak_device_pages = std::max(r.peak_device_pages, device_);
      r.peak_pinned_pages = std::max(r.peak_pinned_pages, pinned_);
      r.peak_pages = std::max(r.peak_pages, device_ + pinned_);
      r.peak_stashed_bytes = std::max(r.peak_stashed_bytes, stashed_);
      r.peak_oversized_bytes = std::max(r.peak_oversized_bytes, live_keys_bytes_);
      return p;
    }
    const placement p = where_[ki];
    if (p.held) {
      device_ -= p.device;
      pinned_ -= p.pinned;
      stashed_ -= s_.bytes_of(st.key);
      live_keys_bytes_ -= oversized;
    }
    where_[ki] = {};
    return p;
  }

 private:
  const schedule& s_;
  std::optional<schedule_pools> pools_;
  std::vector<placement> where_;
  std::uint64_t device_ = 0, pinned_ = 0, stashed_ = 0, live_keys_bytes_ = 0;
};

}  // namespace offloadkit::traces::detail
