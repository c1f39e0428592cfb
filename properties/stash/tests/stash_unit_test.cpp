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
#include "testing.hpp"

namespace {

using namespace offloadkit::stash;

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const offloadkit::out_of_range& e) {
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

TEST(StashStatus, MessagesNameKeyNeedAndFreePages) {
  stash_status s{status_code::overflow, {1, 2, 3}, 70, 9, 2, 1};
  const std::string m = s.message();
  EXPECT_NE(m.find("(vp 1, layer 2, microbatch 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("needed 9 pages"), std::string::npos) << m;
  EXPECT_NE(m.find("2 device + 1 pinned"), std::string::npos) << m;
}

}  // namespace
