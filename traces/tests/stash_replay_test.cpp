// Schedule files joined with the paged-stash feature: the file layer and offloadkit::stash agree
// on validity and on capacity, and replay through the reference and optimized implementations on
// the host executor restores every byte and reports the planner's first overflow.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <random>

#include "offloadkit/host_executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/planner.hpp"
#include "offloadkit/traces/stash_bridge.hpp"

namespace ot = offloadkit::traces;
namespace os = offloadkit::stash;

namespace {

ot::schedule random_file_schedule() {
  const auto vp = *rc::gen::inRange<std::uint32_t>(1, 4);
  const auto layers = *rc::gen::inRange<std::uint32_t>(1, 4);
  const auto mb = *rc::gen::inRange<std::uint32_t>(1, 7);
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  os::workload w;
  w.sched = os::random_schedule(vp, layers, mb, rng);
  w.row_bytes = *rc::gen::inRange<std::uint64_t>(1, 200);
  w.max_rows = *rc::gen::inRange<std::uint64_t>(0, 150);
  for (std::uint32_t v = 0; v < vp; ++v)
    for (std::uint32_t l = 0; l < layers; ++l)
      for (std::uint32_t m = 0; m < mb; ++m)
        w.rows.push_back(
            {os::make_key(v, l, m), *rc::gen::inRange<std::uint64_t>(0, w.max_rows + 1)});
  return ot::from_workload(w, *rc::gen::inRange<std::uint32_t>(1, 40));
}

}  // namespace

// The stash feature's generators produce schedules the file format accepts, and both validators
// agree on arbitrary step sequences.
RC_GTEST_PROP(StashBridge, ValidatorsAgree, ()) {
  ot::schedule s = random_file_schedule();
  RC_ASSERT(!os::validate(ot::to_workload(s).sched).has_value());
  RC_ASSERT(ot::parse_schedule(ot::to_json(s)).steps.size() == s.steps.size());
  // Break it at random: swap two steps or drop one; both validators must reach the same verdict.
  if (!s.steps.empty()) {
    const auto i = *rc::gen::inRange<std::size_t>(0, s.steps.size());
    const auto j = *rc::gen::inRange<std::size_t>(0, s.steps.size());
    if (*rc::gen::arbitrary<bool>()) {
      std::swap(s.steps[i], s.steps[j]);
    } else {
      s.steps.erase(s.steps.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (std::size_t k = 0; k < s.steps.size(); ++k) s.steps[k].source_index = k;
  }
  bool file_ok = true;
  std::size_t file_step = 0;
  try {
    ot::validate(s);
  } catch (const ot::schedule_error& e) {
    file_ok = false;
    file_step = e.where() == "/steps" ? s.steps.size() : std::stoul(e.where().substr(7));
  }
  const auto stash_verdict = os::validate(ot::to_workload(s).sched);
  RC_ASSERT(file_ok == !stash_verdict.has_value());
  if (stash_verdict) RC_ASSERT(file_step == stash_verdict->step);
}

RC_GTEST_PROP(StashBridge, PlannersAgree, ()) {
  const ot::schedule s = random_file_schedule();
  const auto w = ot::to_workload(s);
  const auto cap = os::plan_capacity(w, s.page_rows);
  const auto mine = ot::plan(s, std::nullopt);
  RC_ASSERT(cap.peak_pages == mine.peak_pages);
  RC_ASSERT(cap.peak_stash_bytes == mine.peak_stashed_bytes);
  const auto d = *rc::gen::inRange<std::uint64_t>(0, cap.peak_pages + 2);
  const auto p = *rc::gen::inRange<std::uint64_t>(0, cap.peak_pages + 2);
  const auto theirs = os::predict_overflow(w, s.page_rows, d, p);
  const auto ours = ot::plan(s, ot::schedule_pools{d, p}).overflow;
  RC_ASSERT(theirs.has_value() == ours.has_value());
  if (theirs) {
    RC_ASSERT(theirs->step == ours->step);
    RC_ASSERT(theirs->needed == ours->pages_needed);
    RC_ASSERT(theirs->free_device == ours->device_free);
    RC_ASSERT(theirs->free_pinned == ours->pinned_free);
  }
}

// Replay through both implementations with pools from empty to ample: every key that fits
// restores exactly, and the status word names the planner's first overflow.
RC_GTEST_PROP(StashBridge, ReplayRestoresEveryByteThroughBothImplementations, ()) {
  const ot::schedule s = random_file_schedule();
  const auto need = ot::plan(s, std::nullopt).peak_pages;
  offloadkit::host_executor ex;
  for (const char* impl : {"reference", "optimized"}) {
    os::stash_config cfg;
    cfg.row_bytes = s.row_bytes.front();
    cfg.rows_per_page = s.page_rows;
    cfg.max_rows = s.max_rows;
    cfg.device_pages = *rc::gen::inRange<std::uint64_t>(0, need + 2);
    cfg.pinned_pages = *rc::gen::inRange<std::uint64_t>(0, need + 2);
    cfg.max_keys = s.key_count();
    offloadkit::stream st(ex);
    auto stash = ot::make_stash(impl, ex, cfg, st);
    st.synchronize();  // the constructor initializes its pool in stream order
    ot::replay_result r;
    try {
      r = ot::replay_stash(s, *stash, ex, {});
    } catch (const std::exception& e) {
      RC_FAIL(std::string(impl) + " threw: " + e.what());
    }
    if (r.mismatches != 0) {
      RC_FAIL(std::string(impl) + " with " + std::to_string(cfg.device_pages) + " device + " +
              std::to_string(cfg.pinned_pages) + " pinned pages: " + r.first_mismatch + "\n" +
              ot::to_json(s));
    }
  }
}

namespace {

/// Planted bug: a stash that restores every key but swaps the first two bytes of each restore.
class swapping_stash final : public os::stash_interface {
 public:
  swapping_stash(offloadkit::executor& ex, std::unique_ptr<os::stash_interface> inner)
      : ex_(&ex), inner_(std::move(inner)) {}

 private:
  std::string do_name() const override { return "swapping"; }
  const os::stash_config& do_config() const noexcept override { return inner_->config(); }
  bool do_capturable() const noexcept override { return false; }
  void do_stash(const os::stash_key& k, const void* src, const std::uint64_t* rows,
                offloadkit::stream_ref s) override {
    inner_->stash(k, src, rows, s);
  }
  void do_restore(const os::stash_key& k, void* dst, std::uint64_t* rows_out,
                  offloadkit::stream_ref s) override {
    inner_->restore(k, dst, rows_out, s);
    auto* d = static_cast<unsigned char*>(dst);
    ex_->copy(d, d + 1, 1, s);  // a one-byte corruption, in stream order
  }
  void do_reset(offloadkit::stream_ref s) override { inner_->reset(s); }
  void do_clear_status(offloadkit::stream_ref s) override { inner_->clear_status(s); }
  os::stash_snapshot do_snapshot(offloadkit::stream_ref s) override { return inner_->snapshot(s); }
  offloadkit::executor* ex_;
  std::unique_ptr<os::stash_interface> inner_;
};

}  // namespace

TEST(StashBridge, SuiteCatchesACorruptedRestore) {
  const auto s = ot::read_schedule(OFFLOADKIT_TRACES_EXAMPLES "/1f1b_pp4_mb32.json");
  offloadkit::host_executor ex;
  os::stash_config cfg;
  cfg.row_bytes = 16;
  cfg.rows_per_page = s.page_rows;
  cfg.max_rows = s.max_rows;
  cfg.device_pages = ot::plan(s, std::nullopt).peak_pages;
  cfg.max_keys = s.key_count();
  offloadkit::stream st(ex);
  swapping_stash bad(ex, ot::make_stash("optimized", ex, cfg, st));
  st.synchronize();
  ot::replay_options o;
  o.data_row_bytes = 16;
  const auto r = ot::replay_stash(s, bad, ex, o);
  EXPECT_GT(r.mismatches, 0u);
  EXPECT_NE(r.first_mismatch.find("bytes differ"), std::string::npos) << r.first_mismatch;
}
