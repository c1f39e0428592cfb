// The capacity planner: replays a workload's stash/restore order against page counts.
#include "offloadkit/stash/planner.hpp"

#include <algorithm>
#include <cstdint>

#include "offloadkit/error.hpp"

namespace offloadkit::stash {

page_accounting::page_accounting(const workload& w, std::uint64_t rows_per_page,
                                 std::optional<tier_pools> pools)
    : w_(&w), rows_per_page_(rows_per_page), pools_(pools) {
  OFFLOADKIT_EXPECTS(rows_per_page >= 1 && rows_per_page <= schedule_limits::rows_per_page,
                     out_of_range, "rows_per_page = ", rows_per_page, " is outside [1, ",
                     schedule_limits::rows_per_page, "]");
  validate_workload(w);
  rows_ = dense_rows(w);
  device_of_.assign(rows_.size(), 0);
  held_.assign(rows_.size(), false);
  plan_.page_bytes = saturating_mul(rows_per_page, w.row_bytes);
}

placement page_accounting::apply(std::size_t i) {
  const schedule_step& st = w_->sched.steps.at(i);
  const std::size_t ki = key_index(w_->sched, st.key);
  const std::uint64_t r = rows_[ki];
  const std::uint64_t need = pages_for(r, rows_per_page_);
  const std::uint64_t bytes = saturating_mul(r, row_bytes_of(*w_, st.key.layer));
  if (st.kind == step_kind::restore) {
    placement p;
    if (held_[ki]) p = {true, device_of_[ki], need - device_of_[ki]};
    device_ -= p.device;
    pinned_ -= p.pinned;
    need_ -= need;
    // bytes_ saturates only at the top, where it then stays: the peak is already UINT64_MAX.
    if (bytes_ != UINT64_MAX) bytes_ -= bytes;
    --live_;
    held_[ki] = false;
    return p;
  }
  need_ += need;
  bytes_ = saturating_add(bytes_, bytes);
  ++live_;
  placement p;
  const std::uint64_t dfree = pools_ ? pools_->device_pages - device_ : UINT64_MAX - device_;
  const std::uint64_t pfree = pools_ ? pools_->pinned_pages - pinned_ : 0;
  if (need <= dfree || need - dfree <= pfree) {
    p.held = true;
    p.device = std::min(need, dfree);
    p.pinned = need - p.device;
    device_ += p.device;
    pinned_ += p.pinned;
  } else {
    ++plan_.overflow_count;
    if (!plan_.first_overflow)
      plan_.first_overflow = predicted_overflow{i, st.key, r, need, dfree, pfree};
  }
  held_[ki] = p.held;
  device_of_[ki] = static_cast<std::uint32_t>(p.device);
  plan_.peak_pages = std::max(plan_.peak_pages, need_);
  plan_.peak_stash_bytes = std::max(plan_.peak_stash_bytes, bytes_);
  plan_.peak_live_keys = std::max(plan_.peak_live_keys, live_);
  plan_.peak_device_pages = std::max(plan_.peak_device_pages, device_);
  plan_.peak_pinned_pages = std::max(plan_.peak_pinned_pages, pinned_);
  return p;
}

capacity_plan plan(const workload& w, std::uint64_t rows_per_page, std::optional<tier_pools> pools,
                   std::vector<stash_key>* dropped) {
  page_accounting acc(w, rows_per_page, pools);
  if (dropped != nullptr) dropped->clear();
  for (std::size_t i = 0; i < w.sched.steps.size(); ++i) {
    const placement p = acc.apply(i);
    if (dropped != nullptr && !p.held && w.sched.steps[i].kind == step_kind::stash) {
      dropped->push_back(w.sched.steps[i].key);
    }
  }
  capacity_plan p = acc.figures();
  const std::uint64_t budget = pools ? pools->device_pages : UINT64_MAX;
  p.device_pages = std::min(p.peak_pages, budget);
  p.pinned_pages = p.peak_pages - p.device_pages;
  p.device_bytes = saturating_mul(p.device_pages, p.page_bytes);
  p.pinned_bytes = saturating_mul(p.pinned_pages, p.page_bytes);
  p.peak_page_bytes = saturating_mul(p.peak_pages, p.page_bytes);
  p.oversized_bytes = saturating_mul(saturating_mul(p.peak_live_keys, w.max_rows), w.row_bytes);
  return p;
}

capacity_plan plan_capacity(const workload& w, std::uint64_t rows_per_page,
                            std::uint64_t device_page_budget) {
  capacity_plan p = plan(w, rows_per_page);
  p.device_pages = std::min(p.peak_pages, device_page_budget);
  p.pinned_pages = p.peak_pages - p.device_pages;
  p.device_bytes = saturating_mul(p.device_pages, p.page_bytes);
  p.pinned_bytes = saturating_mul(p.pinned_pages, p.page_bytes);
  return p;
}

std::optional<predicted_overflow> predict_overflow(const workload& w, std::uint64_t rows_per_page,
                                                   std::uint64_t device_pages,
                                                   std::uint64_t pinned_pages,
                                                   std::vector<stash_key>* dropped) {
  return plan(w, rows_per_page, tier_pools{device_pages, pinned_pages}, dropped).first_overflow;
}

}  // namespace offloadkit::stash
