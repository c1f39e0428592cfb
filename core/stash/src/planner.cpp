// The capacity planner: replays a workload's stash/restore order against page counts.
#include "offloadkit/stash/planner.hpp"

#include <algorithm>
#include <cstdint>
#include <map>

#include "offloadkit/error.hpp"

namespace offloadkit::stash {

capacity_plan plan_capacity(const workload& w, std::uint64_t rows_per_page,
                            std::uint64_t device_page_budget) {
  OFFLOADKIT_EXPECTS(rows_per_page > 0, out_of_range, "rows_per_page = ", rows_per_page,
                     " must be in [1, inf)");
  validate_or_throw(w.sched);
  capacity_plan p;
  std::map<stash_key, std::uint64_t> live;  // key -> rows
  std::uint64_t pages = 0, bytes = 0;
  for (const auto& st : w.sched.steps) {
    if (st.kind == step_kind::stash) {
      const std::uint64_t r = rows_of(w, st.key);
      OFFLOADKIT_EXPECTS(r <= w.max_rows, out_of_range, "rows of ", to_string(st.key), " = ", r,
                         " is outside [0, max_rows = ", w.max_rows, "]");
      live[st.key] = r;
      pages += pages_for(r, rows_per_page);
      bytes += r * w.row_bytes;
    } else {
      const std::uint64_t r = live.at(st.key);
      live.erase(st.key);
      pages -= pages_for(r, rows_per_page);
      bytes -= r * w.row_bytes;
    }
    p.peak_pages = std::max(p.peak_pages, pages);
    p.peak_stash_bytes = std::max(p.peak_stash_bytes, bytes);
    p.peak_live_keys = std::max<std::uint64_t>(p.peak_live_keys, live.size());
  }
  p.device_pages = std::min(p.peak_pages, device_page_budget);
  p.pinned_pages = p.peak_pages - p.device_pages;
  p.peak_page_bytes = p.peak_pages * rows_per_page * w.row_bytes;
  p.oversized_bytes = p.peak_live_keys * w.max_rows * w.row_bytes;
  return p;
}

std::optional<predicted_overflow> predict_overflow(const workload& w, std::uint64_t rows_per_page,
                                                   std::uint64_t device_pages,
                                                   std::uint64_t pinned_pages,
                                                   std::vector<stash_key>* dropped) {
  OFFLOADKIT_EXPECTS(rows_per_page > 0, out_of_range, "rows_per_page = ", rows_per_page,
                     " must be in [1, inf)");
  std::uint64_t free_dev = device_pages, free_pin = pinned_pages;
  std::optional<predicted_overflow> first;
  if (dropped != nullptr) dropped->clear();
  std::map<stash_key, std::pair<std::uint64_t, std::uint64_t>> held;  // key -> (device, pinned)
  for (std::size_t i = 0; i < w.sched.steps.size(); ++i) {
    const auto& st = w.sched.steps[i];
    if (st.kind == step_kind::stash) {
      const std::uint64_t r = rows_of(w, st.key);
      const std::uint64_t need = pages_for(r, rows_per_page);
      if (need > free_dev + free_pin) {
        if (!first) first = predicted_overflow{i, st.key, r, need, free_dev, free_pin};
        if (dropped != nullptr) dropped->push_back(st.key);
        continue;
      }
      const std::uint64_t d = std::min(need, free_dev);
      free_dev -= d;
      free_pin -= need - d;
      held[st.key] = {d, need - d};
    } else {
      auto it = held.find(st.key);
      if (it == held.end()) continue;
      free_dev += it->second.first;
      free_pin += it->second.second;
      held.erase(it);
    }
  }
  return first;
}

}  // namespace offloadkit::stash
