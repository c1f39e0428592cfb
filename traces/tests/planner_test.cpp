// The planner (offloadkit::stash::plan) against an independent model of the page rule: a
// deliberately plain simulation written here, which recomputes every tier's use from the set of
// held keys at every step. Over random schedules, rows, page sizes and pools, the planner's peak
// pages (unbounded and per tier), first overflow (step, key, pages needed, free pages per tier)
// and number of overflowing stashes must equal the model's. Two planted planners, kept here, show
// the property catches real mistakes: one frees a restored key's pages one step late, one takes
// pinned pages before device pages.
#include "offloadkit/stash/planner.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>

#include "offloadkit/traces/replay.hpp"

namespace os = offloadkit::stash;
namespace ot = offloadkit::traces;

namespace {

struct model_result {
  std::uint64_t peak_pages = 0, peak_device = 0, peak_pinned = 0, overflows = 0;
  std::optional<std::size_t> first_step;
  os::stash_key first_key;
  std::uint64_t first_need = 0, first_free_device = 0, first_free_pinned = 0;
};

/// The page rule from its statement alone: a stash of n pages is held when n fits the free pages
/// of both tiers together, taking device pages first; otherwise it overflows and holds nothing.
/// A restore gives back what its key holds. Use per tier is summed over the held keys afresh at
/// every step.
model_result model(const os::workload& w, std::uint64_t rows_per_page,
                   std::optional<os::tier_pools> pools) {
  std::map<os::stash_key, std::uint64_t> rows;
  for (const auto& kr : w.rows) rows[kr.key] = kr.rows;
  auto pages = [&](const os::stash_key& k) {
    std::uint64_t n = 0;
    for (std::uint64_t r = 0; r < rows.at(k); r += rows_per_page) ++n;
    return n;
  };
  std::map<os::stash_key, std::pair<std::uint64_t, std::uint64_t>> held;  // key -> device, pinned
  std::map<os::stash_key, std::uint64_t> live;  // every stashed key, held or not: its pages
  model_result m;
  for (std::size_t i = 0; i < w.sched.steps.size(); ++i) {
    const auto& st = w.sched.steps[i];
    if (st.kind == os::step_kind::restore) {
      held.erase(st.key);
      live.erase(st.key);
      continue;
    }
    const std::uint64_t need = pages(st.key);
    live[st.key] = need;
    std::uint64_t dev = 0, pin = 0;
    for (const auto& h : held) {
      dev += h.second.first;
      pin += h.second.second;
    }
    if (!pools) {
      held[st.key] = {need, 0};
    } else {
      const std::uint64_t free_dev = pools->device_pages - dev;
      const std::uint64_t free_pin = pools->pinned_pages - pin;
      if (need > free_dev + free_pin) {
        ++m.overflows;
        if (!m.first_step) {
          m.first_step = i;
          m.first_key = st.key;
          m.first_need = need;
          m.first_free_device = free_dev;
          m.first_free_pinned = free_pin;
        }
      } else {
        const std::uint64_t d = std::min(need, free_dev);
        held[st.key] = {d, need - d};
      }
    }
    std::uint64_t all = 0;
    dev = pin = 0;
    for (const auto& h : held) {
      dev += h.second.first;
      pin += h.second.second;
    }
    for (const auto& l : live) all += l.second;
    m.peak_pages = std::max(m.peak_pages, all);
    m.peak_device = std::max(m.peak_device, dev);
    m.peak_pinned = std::max(m.peak_pinned, pin);
  }
  return m;
}

using planner = std::function<os::capacity_plan(const os::workload&, std::uint64_t,
                                                std::optional<os::tier_pools>)>;

os::capacity_plan real_planner(const os::workload& w, std::uint64_t rpp,
                               std::optional<os::tier_pools> pools) {
  return os::plan(w, rpp, pools);
}

/// Planted: a restore's pages come back one step late (after the next stash).
os::capacity_plan late_free_planner(const os::workload& w, std::uint64_t rpp,
                                    std::optional<os::tier_pools> pools) {
  os::workload late = w;
  auto& steps = late.sched.steps;
  for (std::size_t i = 0; i + 1 < steps.size(); ++i) {
    if (steps[i].kind == os::step_kind::restore && steps[i + 1].kind == os::step_kind::stash) {
      std::swap(steps[i], steps[i + 1]);
      ++i;
    }
  }
  return os::plan(late, rpp, pools);
}

/// Planted: the pinned tier is used before the device tier.
os::capacity_plan pinned_first_planner(const os::workload& w, std::uint64_t rpp,
                                       std::optional<os::tier_pools> pools) {
  if (!pools) return os::plan(w, rpp, pools);
  os::capacity_plan p = os::plan(w, rpp, os::tier_pools{pools->pinned_pages, pools->device_pages});
  std::swap(p.peak_device_pages, p.peak_pinned_pages);
  if (p.first_overflow) std::swap(p.first_overflow->free_device, p.first_overflow->free_pinned);
  return p;
}

/// The property: the planner's figures equal the model's on a random schedule file's workload,
/// with the file's pools and without.
void planner_matches_model(const planner& plan_fn) {
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  const ot::schedule_file f = ot::random_schedule_file(rng);
  for (const auto& pools : {f.pools, std::optional<os::tier_pools>{}}) {
    const os::capacity_plan p = plan_fn(f.work, f.page_rows, pools);
    const model_result m = model(f.work, f.page_rows, pools);
    RC_ASSERT(p.peak_pages == m.peak_pages);
    RC_ASSERT(p.peak_device_pages == m.peak_device);
    RC_ASSERT(p.peak_pinned_pages == m.peak_pinned);
    RC_ASSERT(p.overflow_count == m.overflows);
    RC_ASSERT(p.first_overflow.has_value() == m.first_step.has_value());
    if (m.first_step) {
      RC_ASSERT(p.first_overflow->step == *m.first_step);
      RC_ASSERT(p.first_overflow->key == m.first_key);
      RC_ASSERT(p.first_overflow->needed == m.first_need);
      RC_ASSERT(p.first_overflow->free_device == m.first_free_device);
      RC_ASSERT(p.first_overflow->free_pinned == m.first_free_pinned);
    }
    // Tiers of the plan: the pools' device tier as the budget, the rest pinned.
    RC_ASSERT(p.device_pages + p.pinned_pages == p.peak_pages);
    if (pools) RC_ASSERT(p.device_pages == std::min(p.peak_pages, pools->device_pages));
  }
}

}  // namespace

RC_GTEST_PROP(PlannerPeaks, MatchTheIndependentModel, ()) { planner_matches_model(real_planner); }

TEST(PlannerPeaks, CatchesAPlannerThatFreesOneStepLate) {
  EXPECT_FALSE(rc::check("late free", [] { planner_matches_model(late_free_planner); }));
}

TEST(PlannerPeaks, CatchesAPlannerThatTakesPinnedPagesFirst) {
  EXPECT_FALSE(rc::check("pinned first", [] { planner_matches_model(pinned_first_planner); }));
}

// The plan's page count is exact: pools of that many pages never overflow, one fewer does, and
// the overflow names a stash whose pages did not fit.
RC_GTEST_PROP(PlannerPeaks, PlannedPagesAreTheFewestThatNeverOverflow, ()) {
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  const ot::schedule_file f = ot::random_schedule_file(rng);
  const std::uint64_t need = os::plan(f.work, f.page_rows).peak_pages;
  const std::uint64_t d = *rc::gen::inRange<std::uint64_t>(0, need + 1);
  RC_ASSERT(!os::plan(f.work, f.page_rows, os::tier_pools{d, need - d}).first_overflow);
  if (need > 0) {
    const std::uint64_t d2 = *rc::gen::inRange<std::uint64_t>(0, need);
    const auto p = os::plan(f.work, f.page_rows, os::tier_pools{d2, need - 1 - d2});
    RC_ASSERT(p.first_overflow.has_value());
    RC_ASSERT(f.work.sched.steps[p.first_overflow->step].kind == os::step_kind::stash);
    RC_ASSERT(p.first_overflow->needed >
              p.first_overflow->free_device + p.first_overflow->free_pinned);
  }
}

// Byte figures of the largest valid schedule saturate instead of wrapping: 2^31 rows of 2^32 bytes
// in each of two live keys exceed 64 bits.
TEST(PlannerPeaks, ByteFiguresSaturateAtExtremeValidValues) {
  os::workload w;
  w.sched = os::one_f_one_b(1, 0, 2, 1);
  w.sched.steps = {{os::step_kind::stash, {0, 0, 0}},
                   {os::step_kind::stash, {0, 0, 1}},
                   {os::step_kind::restore, {0, 0, 0}},
                   {os::step_kind::restore, {0, 0, 1}}};
  w.row_bytes = os::schedule_limits::row_bytes;
  w.max_rows = os::schedule_limits::max_rows;
  w.rows = {{{0, 0, 0}, w.max_rows}, {{0, 0, 1}, w.max_rows}};
  const os::capacity_plan p = os::plan(w, os::schedule_limits::rows_per_page);
  EXPECT_EQ(p.peak_live_keys, 2u);
  EXPECT_EQ(p.oversized_bytes, UINT64_MAX);
  EXPECT_EQ(p.peak_stash_bytes, UINT64_MAX);
  EXPECT_EQ(p.peak_pages, 2u * 2048u);
  EXPECT_EQ(ot::format_bytes(p.oversized_bytes), ">= 16 EiB");
  EXPECT_EQ(ot::format_bytes(std::uint64_t{1} << 62), "4.00 EiB");
  EXPECT_EQ(ot::format_bytes(8619294720ull * (1ull << 30)), "8.03 EiB");
  EXPECT_EQ(ot::format_bytes(3ull << 40), "3.00 TiB");
  EXPECT_EQ(ot::format_bytes(512), "512 B");
}
