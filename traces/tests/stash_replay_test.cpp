// Schedule files joined with the paged-stash feature: errors of the model point into the file, and
// replay through the reference and optimized implementations on
// the host executor restores every byte and reports the planner's first overflow.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <random>

#include "offloadkit/host_executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/planner.hpp"
#include "offloadkit/traces/replay.hpp"

namespace ot = offloadkit::traces;
namespace os = offloadkit::stash;

namespace {

ot::schedule_file random_file() {
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  return ot::random_schedule_file(rng, true);
}

}  // namespace

// The file's step positions survive the round trip through JSON: a broken schedule is reported
// at the "steps" entry its offending step came from, with the model's reason.
RC_GTEST_PROP(StashBridge, FileErrorsNameTheModelsStep, ()) {
  ot::schedule_file f = random_file();
  auto& steps = f.work.sched.steps;
  RC_PRE(!steps.empty());
  const auto i = *rc::gen::inRange<std::size_t>(0, steps.size());
  const auto j = *rc::gen::inRange<std::size_t>(0, steps.size());
  if (*rc::gen::arbitrary<bool>()) {
    std::swap(steps[i], steps[j]);
  } else {
    steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(i));
  }
  const auto verdict = os::validate(f.work.sched);
  // Written with one entry per step, the file's positions are the model's.
  std::string text = ot::to_json(f);
  bool file_ok = true;
  std::string where;
  try {
    (void)ot::parse_schedule(text);
  } catch (const ot::schedule_error& e) {
    file_ok = false;
    where = e.where();
  }
  RC_ASSERT(file_ok == !verdict.has_value());
  if (verdict) RC_ASSERT(where.rfind("/steps", 0) == 0);
  if (verdict && verdict->step() == steps.size()) RC_ASSERT(where == "/steps");
}

// Replay through both implementations with pools from empty to ample: every key that fits
// restores exactly, and the status word names the planner's first overflow.
RC_GTEST_PROP(StashBridge, ReplayRestoresEveryByteThroughBothImplementations, ()) {
  const ot::schedule_file f = random_file();
  const auto need = os::plan(f.work, f.page_rows).peak_pages;
  offloadkit::host_executor ex;
  for (const char* impl : {"reference", "optimized"}) {
    const os::tier_pools pools{*rc::gen::inRange<std::uint64_t>(0, need + 2),
                               *rc::gen::inRange<std::uint64_t>(0, need + 2)};
    offloadkit::stream st(ex);
    auto stash = ot::make_stash(impl, ex, ot::config_for(f, pools), st);
    st.synchronize();  // the constructor initializes its pool in stream order
    ot::data_check r;
    try {
      r = ot::replay_stash(f, *stash, ex);
    } catch (const std::exception& e) {
      RC_FAIL(std::string(impl) + " threw: " + e.what());
    }
    if (r.mismatches != 0) {
      RC_FAIL(std::string(impl) + " with " + std::to_string(pools.device_pages) + " device + " +
              std::to_string(pools.pinned_pages) + " pinned pages: " + r.first_mismatch + "\n" +
              ot::to_json(f));
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
  const os::stash_config cfg =
      ot::config_for(s, os::tier_pools{os::plan(s.work, s.page_rows).peak_pages, 0}, 16);
  offloadkit::stream st(ex);
  swapping_stash bad(ex, ot::make_stash("optimized", ex, cfg, st));
  st.synchronize();
  ot::replay_options o;
  o.data_row_bytes = 16;
  const auto r = ot::replay_stash(s, bad, ex, o);
  EXPECT_GT(r.mismatches, 0u);
  EXPECT_NE(r.first_mismatch.find("bytes differ"), std::string::npos) << r.first_mismatch;
}
