// Unit tests of what every paged-stash implementation shares: key codecs (the legacy codec's
// collisions are found by a property, not picked by hand), schedule generators and the validator,
// the capacity planner, and the status messages.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "offloadkit/host_executor.hpp"
#include "offloadkit/stash/key.hpp"
#include "offloadkit/stash/planner.hpp"
#include "offloadkit/stash/schedule.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/stash_battery.hpp"
#include "offloadkit/testing/stash_battery_support.hpp"
#include "testing.hpp"

namespace {

using namespace offloadkit::stash;

/// The message of the `Exception` that f throws, or "" when it throws none.
template <class Exception = offloadkit::out_of_range>
std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.what();
  }
  return "";
}

TEST(StashKey, FieldsAtTheLimitEncodeAndOnePastThrowNamingFieldValueAndLimit) {
  EXPECT_EQ(decode_key(encode_key(make_key(255, 4095, 4095))), (stash_key{255, 4095, 4095}));
  EXPECT_NE(what_of([] { (void)make_key(256, 0, 0); }).find("vp = 256 is outside [0, 256)"),
            std::string::npos);
  EXPECT_NE(what_of([] { (void)make_key(0, 4096, 0); }).find("layer = 4096 is outside [0, 4096)"),
            std::string::npos);
  EXPECT_NE(
      what_of([] { (void)make_key(0, 0, 4096); }).find("microbatch = 4096 is outside [0, 4096)"),
      std::string::npos);
  EXPECT_NE(what_of([] {
              (void)encode_key(stash_key{0, 0, 5000});
            }).find("microbatch = 5000"),
            std::string::npos);
}

TEST(StashKey, CodecPropertiesHold) {
  offloadkit::host_executor ex;
  offloadkit::check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  for (const auto& c : offloadkit::testing::stash_codec_checks()) {
    const auto o = offloadkit::run_check(c, ex, cfg);
    EXPECT_TRUE(o.passed) << c.name << ": " << o.message;
  }
}

// The legacy codec's collisions are found by a property that claims it is injective.
TEST(StashKey, LegacyCodecCollisionIsFoundByAProperty) {
  auto found = std::make_shared<std::pair<stash_key, stash_key>>();
  offloadkit::host_executor ex;
  offloadkit::check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  const auto o =
      offloadkit::run_check(offloadkit::stash::testing::legacy_collision_search(found), ex, cfg);
  ASSERT_FALSE(o.passed) << "the legacy codec looked injective over the full key range";
  const auto& [a, b] = *found;
  EXPECT_NE(a, b);
  EXPECT_EQ(legacy_encode(a), legacy_encode(b)) << to_string(a) << " vs " << to_string(b);
  EXPECT_TRUE(a.layer >= 1000 || a.microbatch >= 1000) << to_string(a);
  EXPECT_NE(encode_key(a), encode_key(b));  // the fixed-width codec keeps them apart
  std::cout << "legacy collision found: " << to_string(a) << " and " << to_string(b)
            << " both encode to " << legacy_encode(a) << "\n";
}

TEST(StashSchedule, OneFOneBHasWarmupSteadyCooldown) {
  const schedule s = one_f_one_b(2, 0, 3, 1);
  const std::vector<schedule_step> want = {
      {step_kind::stash, {0, 0, 0}},   {step_kind::stash, {0, 0, 1}},
      {step_kind::restore, {0, 0, 0}}, {step_kind::stash, {0, 0, 2}},
      {step_kind::restore, {0, 0, 1}}, {step_kind::restore, {0, 0, 2}}};
  EXPECT_EQ(s.steps, want);
  EXPECT_FALSE(validate(s).has_value());
}

TEST(StashSchedule, InterleavedOrdersChunks) {
  const schedule s = interleaved_one_f_one_b(2, 0, 2, 2, 1);
  const std::vector<schedule_step> want = {
      {step_kind::stash, {0, 0, 0}},   {step_kind::stash, {0, 0, 1}},
      {step_kind::stash, {1, 0, 0}},   {step_kind::stash, {1, 0, 1}},
      {step_kind::restore, {1, 0, 0}}, {step_kind::restore, {1, 0, 1}},
      {step_kind::restore, {0, 0, 0}}, {step_kind::restore, {0, 0, 1}}};
  EXPECT_EQ(s.steps, want);
  EXPECT_NE(what_of([] { (void)interleaved_one_f_one_b(2, 0, 2, 3, 1); }).find("multiple"),
            std::string::npos);
}

TEST(StashSchedule, EveryGeneratedScheduleIsValid) {
  for (std::uint32_t p = 1; p <= 4; ++p) {
    for (std::uint32_t r = 0; r < p; ++r) {
      for (std::uint32_t m = 1; m <= 9; ++m) {
        for (std::uint32_t l = 1; l <= 3; ++l) {
          auto e = validate(one_f_one_b(p, r, m, l));
          EXPECT_FALSE(e.has_value())
              << "1F1B " << p << " " << r << " " << m << ": " << e->reason();
          for (std::uint32_t v = 1; v <= 3; ++v) {
            if (m % p != 0) continue;
            auto ei = validate(interleaved_one_f_one_b(p, r, v, m, l));
            EXPECT_FALSE(ei.has_value())
                << "interleaved " << p << " " << r << " " << v << " " << m << ": " << ei->reason();
          }
        }
      }
    }
  }
  std::mt19937_64 rng(offloadkit::testing::seed());
  for (int i = 0; i < 200; ++i) {
    auto e = validate(random_schedule(1 + i % 3, 1 + i % 4, 1 + i % 5, rng));
    EXPECT_FALSE(e.has_value()) << e->reason();
  }
}

TEST(StashSchedule, ValidatorNamesTheFirstOffendingStep) {
  const schedule good = one_f_one_b(1, 0, 1, 2);  // S l0, S l1, R l1, R l0
  schedule s = good;
  std::swap(s.steps[0], s.steps[1]);
  auto e = validate(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step(), 0u);
  EXPECT_NE(e->reason().find("forward order"), std::string::npos) << e->reason();

  s = good;
  s.steps[1] = {step_kind::restore, {0, 0, 0}};
  e = validate(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step(), 1u);
  EXPECT_NE(e->reason().find("forward finished"), std::string::npos) << e->reason();

  s = good;
  std::swap(s.steps[2], s.steps[3]);
  e = validate(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step(), 2u);
  EXPECT_NE(e->reason().find("reverse"), std::string::npos) << e->reason();

  s = good;
  s.steps[1] = s.steps[0];
  e = validate(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step(), 1u);
  EXPECT_NE(e->reason().find("already stashed"), std::string::npos) << e->reason();

  s = good;
  s.steps.pop_back();
  e = validate(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step(), s.steps.size());

  s = good;
  s.steps[0].key.microbatch = 7;
  e = validate(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step(), 0u);
  EXPECT_NE(e->reason().find("outside"), std::string::npos) << e->reason();

  s = good;
  s.steps.push_back({step_kind::restore, {0, 0, 0}});
  e = validate(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step(), 4u);
  EXPECT_NE(e->reason().find("already restored"), std::string::npos) << e->reason();
  EXPECT_THROW(validate_or_throw(s), offloadkit::logic_error);
}

TEST(StashPlanner, PeakPagesAndOversizedBytes) {
  workload w;
  w.sched = one_f_one_b(2, 0, 3, 1);  // live keys: 1, 2, 1, 2, 1, 0
  w.row_bytes = 10;
  w.max_rows = 100;
  w.rows = {{{0, 0, 0}, 100}, {{0, 0, 1}, 5}, {{0, 0, 2}, 33}};
  const capacity_plan p = plan_capacity(w, 8, 10);
  // pages: mb0 13, mb1 1, mb2 5; peak at {mb0, mb1} = 14 pages.
  EXPECT_EQ(p.peak_pages, 14u);
  EXPECT_EQ(p.device_pages, 10u);
  EXPECT_EQ(p.pinned_pages, 4u);
  EXPECT_EQ(p.peak_stash_bytes, 1050u);
  EXPECT_EQ(p.peak_live_keys, 2u);
  EXPECT_EQ(p.oversized_bytes, 2000u);
  EXPECT_EQ(p.peak_page_bytes, 14u * 80u);

  std::vector<stash_key> dropped;
  auto o = predict_overflow(w, 8, 10, 3, &dropped);  // 13 pages: mb1 does not fit
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->key, (stash_key{0, 0, 1}));
  EXPECT_EQ(o->step, 1u);
  EXPECT_EQ(o->needed, 1u);
  EXPECT_EQ(o->free_device, 0u);
  EXPECT_EQ(o->free_pinned, 0u);
  EXPECT_EQ(dropped, (std::vector<stash_key>{{0, 0, 1}}));
  EXPECT_FALSE(predict_overflow(w, 8, 7, 7).has_value());
}

TEST(StashPool, PagesOfMoreWorkItemsThanALaunchNumbersAreRefusedBeforeAllocating) {
  // Pages of 1 GiB are 2^20 work items of 1 KiB: 4095 pages fit under 2^32 items, 4096 do not.
  // The check comes before any allocation, so the refused pool costs no memory.
  offloadkit::host_executor ex;
  offloadkit::stream s{ex};
  stash_config cfg;
  cfg.row_bytes = std::size_t{1} << 20;
  cfg.rows_per_page = 1024;
  cfg.max_rows = 1024;
  cfg.max_keys = 1;
  cfg.pinned_pages = 4096;
  const std::string what = what_of(
      [&] { (void)offloadkit::testing::optimized_stash_implementation().make(ex, cfg, s); });
  EXPECT_NE(what.find("4096 pages of 1073741824 bytes make more work items of 1 KiB than a launch "
                      "numbers (2^32 - 1)"),
            std::string::npos)
      << what;
}

TEST(StashStatus, MessagesNameKeyNeedAndFreePages) {
  stash_status s{status_code::overflow, {1, 2, 3}, 70, 9, 2, 1};
  const std::string m = s.message();
  EXPECT_NE(m.find("(vp 1, layer 2, microbatch 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("needed 9 pages"), std::string::npos) << m;
  EXPECT_NE(m.find("2 device + 1 pinned"), std::string::npos) << m;
}

// ---- batches ------------------------------------------------------------------------------------

namespace batch {

using offloadkit::buffer;
using offloadkit::memory_kind;
using offloadkit::stream;
using offloadkit::stash::testing::device_io;
namespace props = offloadkit::stash::testing;

stash_config small_config(std::size_t keys) {
  stash_config c;
  c.row_bytes = 48;
  c.rows_per_page = 4;
  c.max_rows = 20;
  c.device_pages = 2 * keys;
  c.pinned_pages = 3 * keys;
  c.max_keys = keys;
  return c;
}

/// Per-key source, row count and destination buffers, and the items that name them.
struct keyed_buffers {
  std::vector<stash_key> keys;
  std::vector<buffer> src, rows, dst, rows_out;
  keyed_buffers(offloadkit::executor& ex, device_io& io, std::size_t n, std::size_t bytes) {
    for (std::size_t k = 0; k < n; ++k) {
      keys.push_back(
          stash_key{0, static_cast<std::uint32_t>(k / 8), static_cast<std::uint32_t>(k % 8)});
      src.emplace_back(ex, memory_kind::device, bytes);
      rows.emplace_back(ex, memory_kind::device, sizeof(std::uint64_t));
      dst.emplace_back(ex, memory_kind::device, bytes);
      rows_out.emplace_back(ex, memory_kind::device, sizeof(std::uint64_t));
      io.write_source(src[k].data(), encode_key(keys[k]), 3);
    }
  }
  std::vector<stash_item> stash_items() {
    std::vector<stash_item> out;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      out.push_back(stash_item{keys[k], src[k].data(), rows[k].as<std::uint64_t>()});
    }
    return out;
  }
  std::vector<restore_item> restore_items() {
    std::vector<restore_item> out;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      out.push_back(restore_item{keys[k], dst[k].data(), rows_out[k].as<std::uint64_t>()});
    }
    return out;
  }
};

/// One implementation's stash on the host executor, with small_config(max_keys) and the buffers
/// of n keys. (Lambdas name its members through the rig: a structured binding cannot be captured
/// before C++20.)
struct batch_rig {
  offloadkit::host_executor ex;
  stream s{ex};
  stash_config cfg;
  std::unique_ptr<stash_interface> st;
  device_io io;
  keyed_buffers b;
  batch_rig(const offloadkit::testing::stash_implementation& impl, std::size_t max_keys,
            std::size_t n)
      : cfg(small_config(max_keys)),
        st(impl.make(ex, cfg, s)),
        io(ex, s, cfg.max_rows * cfg.row_bytes),
        b(ex, io, n, io.bytes) {}
};

class stash_batch : public ::testing::TestWithParam<int> {
 protected:
  offloadkit::testing::stash_implementation impl() const {
    return GetParam() == 0 ? offloadkit::testing::reference_stash_implementation()
                           : offloadkit::testing::optimized_stash_implementation();
  }
};

TEST_P(stash_batch, DuplicateKeysAreRefusedNamingBothPositionsAndNothingIsIssued) {
  batch_rig rig(impl(), 4, 3);
  auto& [ex, s, cfg, st, io, b] = rig;
  std::vector<stash_item> items = b.stash_items();
  items[2].key = items[0].key;
  const std::string what =
      what_of<offloadkit::logic_error>([&] { rig.st->stash_batch(items, rig.s); });
  EXPECT_NE(what.find("items 0 and 2 both name key (vp 0, layer 0, microbatch 0)"),
            std::string::npos)
      << what;
  EXPECT_TRUE(st->snapshot(s).entries.empty());
  std::vector<restore_item> back = b.restore_items();
  back[1].key = back[0].key;
  EXPECT_NE(what_of<offloadkit::logic_error>([&] {
              rig.st->restore_batch(back, rig.s);
            }).find("items 0 and 1"),
            std::string::npos);
  st->stash_batch(nullptr, 0, s);  // an empty batch is nothing
  EXPECT_NE(what_of<offloadkit::logic_error>([&] {
              rig.st->stash_batch(nullptr, 2, rig.s);
            }).find("the item array is null"),
            std::string::npos);
}

TEST_P(stash_batch, ARefusedItemThrowsAfterTheItemsBeforeItAsPerKeyCallsWould) {
  batch_rig rig(impl(), 4, 3);
  auto& [ex, s, cfg, st, io, b] = rig;
  for (auto& r : b.rows) io.write_u64(r.data(), 9);
  std::vector<stash_item> items = b.stash_items();
  items[1].rows = nullptr;
  EXPECT_NE(what_of<offloadkit::logic_error>([&] {
              rig.st->stash_batch(items, rig.s);
            }).find("row count pointer is null"),
            std::string::npos);
  const stash_snapshot snap = st->snapshot(s);
  ASSERT_EQ(snap.entries.size(), 1u);
  EXPECT_EQ(snap.entries[0].key, b.keys[0]);
  EXPECT_EQ(snap.entries[0].rows, 9u);
}

TEST_P(stash_batch, ALayerOfMoreThan64KeysRoundTripsAndFillsThePoolAsPerKeyCalls) {
  constexpr std::size_t n = 100;
  batch_rig rig(impl(), n, n);
  auto& [ex, s, cfg, st, io, b] = rig;
  std::uint64_t pages = 0;
  for (std::size_t k = 0; k < n; ++k) {
    io.write_u64(b.rows[k].data(), (k * 7) % (cfg.max_rows + 1));
    pages += pages_for((k * 7) % (cfg.max_rows + 1), cfg.rows_per_page);
  }
  st->stash_batch(b.stash_items(), s);
  const stash_snapshot full = st->snapshot(s);
  EXPECT_TRUE(full.status.ok()) << full.status.message();
  EXPECT_EQ(full.entries.size(), n);
  EXPECT_EQ(cfg.device_pages + cfg.pinned_pages - full.free.device - full.free.pinned, pages);
  for (auto& d : b.dst) io.clear(d.data());
  st->restore_batch(b.restore_items(), s);
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint64_t rows = (k * 7) % (cfg.max_rows + 1);
    EXPECT_EQ(props::first_mismatch(io.read(b.dst[k].data()), encode_key(b.keys[k]), 3,
                                    rows * cfg.row_bytes),
              -1)
        << to_string(b.keys[k]);
    EXPECT_EQ(io.read_u64(b.rows_out[k].data()), rows);
  }
  const stash_snapshot empty = st->snapshot(s);
  EXPECT_TRUE(empty.entries.empty());
  EXPECT_EQ(empty.free.device, cfg.device_pages);
  EXPECT_EQ(empty.free.pinned, cfg.pinned_pages);
}

TEST_P(stash_batch, ARowsOutNamedByTwoItemsHoldsTheLaterItemsCountAsPerKeyCallsWould) {
  batch_rig rig(impl(), 4, 3);
  auto& [ex, s, cfg, st, io, b] = rig;
  io.write_u64(b.rows[0].data(), 5);
  io.write_u64(b.rows[1].data(), 9);
  std::vector<stash_item> two = b.stash_items();
  two.pop_back();
  st->stash_batch(two, s);
  // Both restores succeed: the second's count stays.
  std::vector<restore_item> items = b.restore_items();
  items.pop_back();
  items[1].rows_out = items[0].rows_out;
  st->restore_batch(items, s);
  EXPECT_EQ(io.read_u64(b.rows_out[0].data()), 9u);
  // A later restore of a key that holds nothing writes 0 over an earlier success.
  st->stash_batch(two, s);
  items = b.restore_items();
  std::swap(items[1], items[2]);  // key 0, key 2 (empty), key 1
  items[1].rows_out = items[0].rows_out;
  io.write_u64(b.rows_out[1].data(), 77);
  st->restore_batch(items, s);
  EXPECT_EQ(io.read_u64(b.rows_out[0].data()), 0u);
  EXPECT_EQ(io.read_u64(b.rows_out[1].data()), 9u);
  const stash_snapshot snap = st->snapshot(s);
  EXPECT_EQ(snap.status.code, status_code::restore_empty);
  EXPECT_EQ(snap.status.key, b.keys[2]);
  EXPECT_TRUE(snap.entries.empty());
}

INSTANTIATE_TEST_SUITE_P(Implementations, stash_batch, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(i.param == 0 ? "reference" : "optimized");
                         });

TEST(StashBatchCapture, ACapturedLayerReplaysWithTheRowCountsOfEachReplay) {
  offloadkit::host_executor ex;
  stream s(ex);
  constexpr std::size_t n = 5;
  const stash_config cfg = small_config(n);
  auto st = offloadkit::testing::optimized_stash_implementation().make(ex, cfg, s);
  device_io io(ex, s, cfg.max_rows * cfg.row_bytes);
  keyed_buffers b(ex, io, n, io.bytes);
  ex.synchronize(s);
  ex.begin_capture(s);
  st->stash_batch(b.stash_items(), s);
  st->restore_batch(b.restore_items(), s);
  offloadkit::graph g(ex, ex.end_capture(s));
  for (std::uint64_t replay = 0; replay < 3; ++replay) {
    for (std::size_t k = 0; k < n; ++k) {
      io.write_u64(b.rows[k].data(), (k + 5 * replay) % (cfg.max_rows + 1));
      io.clear(b.dst[k].data());
    }
    g.replay(s);
    ex.synchronize(s);
    for (std::size_t k = 0; k < n; ++k) {
      const std::uint64_t rows = (k + 5 * replay) % (cfg.max_rows + 1);
      EXPECT_EQ(props::first_mismatch(io.read(b.dst[k].data()), encode_key(b.keys[k]), 3,
                                      rows * cfg.row_bytes),
                -1)
          << "replay " << replay << ", " << to_string(b.keys[k]);
    }
    EXPECT_TRUE(st->snapshot(s).status.ok());
  }
}

}  // namespace batch

}  // namespace
