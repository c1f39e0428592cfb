// The suite catches planted bugs: each variant below is a final class behind stash_interface with
// one defect, and the property that guards against that defect must FAIL on it. A property that
// cannot fail would pass here and be noticed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "battery_tests.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/eager_stash.hpp"
#include "offloadkit/stash/paged_stash.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/fixed_cases.hpp"
#include "offloadkit/testing/stash_battery.hpp"
#include "sticky_flag_stash.hpp"
#include "testing.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::stash;

/// Forwards to the optimized stash; the variants override one thing.
class forwarding_stash : public stash_interface {
 public:
  forwarding_stash(executor& ex, const stash_config& reported, const stash_config& real,
                   stream_ref s)
      : ex_(&ex), reported_(reported), inner_(std::make_unique<paged_stash>(ex, real, s)) {}

 protected:
  executor* ex_;
  stash_config reported_;
  std::unique_ptr<paged_stash> inner_;

 private:
  std::string do_name() const override { return "planted"; }
  const stash_config& do_config() const noexcept override { return reported_; }
  bool do_capturable() const noexcept override { return true; }
  void do_stash(const stash_key& k, const void* src, const std::uint64_t* rows,
                stream_ref s) override {
    inner_->stash(k, src, rows, s);
    after_stash(s);
  }
  void do_restore(const stash_key& k, void* dst, std::uint64_t* rows_out, stream_ref s) override {
    inner_->restore(k, dst, rows_out, s);
    after_restore(k, dst, s);
  }
  void do_reset(stream_ref s) override { inner_->reset(s); }
  void do_clear_status(stream_ref s) override { inner_->clear_status(s); }
  stash_snapshot do_snapshot(stream_ref s) override { return inner_->snapshot(s); }
  virtual void after_stash(stream_ref) {}
  virtual void after_restore(const stash_key&, void*, stream_ref) {}
};

/// Restore writes one wrong byte.
class corrupting_stash final : public forwarding_stash {
 public:
  using forwarding_stash::forwarding_stash;

 private:
  void after_restore(const stash_key&, void* dst, stream_ref s) override {
    if (reported_.max_rows * reported_.row_bytes > 0) ex_->fill(dst, 0, 1, s);
  }
};

/// Restore hands the key's pages back and takes them again: the pages never return.
class leaking_stash final : public forwarding_stash {
 public:
  leaking_stash(executor& ex, const stash_config& c, stream_ref s)
      : forwarding_stash(ex, c, c, s), rows_(ex, memory_kind::device, sizeof(std::uint64_t)) {
    ex.fill(rows_.data(), 0, sizeof(std::uint64_t), s);
    ex.fill(rows_.data(), 1, 1, s);  // one row
  }

 private:
  buffer rows_;
  void after_restore(const stash_key& k, void* dst, stream_ref s) override {
    inner_->stash(k, dst, rows_.as<std::uint64_t>(), s);
  }
};

/// Forgets the sticky status: clears it after every stash.
class forgetful_stash final : public forwarding_stash {
 public:
  using forwarding_stash::forwarding_stash;

 private:
  void after_stash(stream_ref s) override { inner_->clear_status(s); }
};

/// Swallows a failed stash: the caller is never told that the key was not stored.
class swallowing_stash final : public forwarding_stash {
 public:
  using forwarding_stash::forwarding_stash;

 private:
  void do_stash(const stash_key& k, const void* src, const std::uint64_t* rows,
                stream_ref s) override {
    try {
      inner_->stash(k, src, rows, s);
    } catch (const runtime_error&) {
    }
  }
};

stash_config one_page_short(stash_config c) {
  if (c.device_pages > 0) {
    --c.device_pages;
  } else if (c.pinned_pages > 0) {
    --c.pinned_pages;
  }
  return c;
}

/// A planted variant's descriptor: the optimized stash's capabilities (it forwards to it), its
/// own factory.
offloadkit::testing::stash_implementation planted_descriptor(
    offloadkit::testing::stash_factory make) {
  offloadkit::testing::stash_implementation impl =
      offloadkit::testing::optimized_stash_implementation();
  impl.name = "planted";
  impl.make = std::move(make);
  return impl;
}

template <class Variant>
offloadkit::testing::stash_implementation planted() {
  return planted_descriptor([](executor& ex, const stash_config& c, stream_ref s) {
    std::unique_ptr<stash_interface> st;
    if constexpr (std::is_constructible_v<Variant, executor&, const stash_config&, stream_ref>) {
      st = std::make_unique<Variant>(ex, c, s);
    } else {
      st = std::make_unique<Variant>(ex, c, c, s);
    }
    return st;
  });
}

/// A pool one page smaller than it reports: the planner's capacity overflows.
class undersized_stash final : public forwarding_stash {
 public:
  using forwarding_stash::forwarding_stash;
};

offloadkit::testing::stash_implementation undersized() {
  return planted_descriptor([](executor& ex, const stash_config& c, stream_ref s) {
    return std::unique_ptr<stash_interface>(
        std::make_unique<undersized_stash>(ex, c, one_page_short(c), s));
  });
}

// ---- bugs that exactly one property of the battery catches -------------------------------------

/// No bug: the control.
class plain_stash final : public forwarding_stash {
 public:
  using forwarding_stash::forwarding_stash;
};

/// Bug (round_trip_and_conservation): buffers for at most 30 rows whatever max_rows says; a key
/// with more rows is refused (rows_too_large) and restores nothing.
offloadkit::testing::stash_implementation capped_rows() {
  return planted_descriptor([](executor& ex, const stash_config& c, stream_ref s) {
    stash_config real = c;
    real.max_rows = std::min<std::size_t>(c.max_rows, 30);
    return std::unique_ptr<stash_interface>(std::make_unique<plain_stash>(ex, c, real, s));
  });
}

/// Bug (capacity_sweep_first_overflow): the status word reports the overflowing key's page need
/// where its row count belongs.
class misreporting_stash final : public forwarding_stash {
 public:
  using forwarding_stash::forwarding_stash;

 private:
  stash_snapshot do_snapshot(stream_ref s) override {
    stash_snapshot snap = inner_->snapshot(s);
    if (!snap.status.ok()) snap.status.rows = snap.status.needed;
    return snap;
  }
};

/// Bug (key_limits): stash() wraps key fields into their widths instead of refusing them.
class wrapping_key_stash final : public forwarding_stash {
 public:
  using forwarding_stash::forwarding_stash;

 private:
  void do_stash(const stash_key& k, const void* src, const std::uint64_t* rows,
                stream_ref s) override {
    const stash_key wrapped{k.vp % key_limits::vp, k.layer % key_limits::layer,
                            k.microbatch % key_limits::microbatch};
    inner_->stash(wrapped, src, rows, s);
  }
};

/// Bug (config_limits): rows_per_page = 0 is taken as 1 instead of being refused.
offloadkit::testing::stash_implementation lenient_config() {
  return planted_descriptor([](executor& ex, const stash_config& c, stream_ref s) {
    stash_config fixed = c;
    if (fixed.rows_per_page == 0) fixed.rows_per_page = 1;
    return std::unique_ptr<stash_interface>(std::make_unique<plain_stash>(ex, fixed, fixed, s));
  });
}

/// Bug (model_based): every call runs on the stream the stash was made with, not the one given.
class own_stream_stash final : public forwarding_stash {
 public:
  own_stream_stash(executor& ex, const stash_config& c, stream_ref s)
      : forwarding_stash(ex, c, c, s), made_on_(s) {}

 private:
  stream_ref made_on_;
  void do_stash(const stash_key& k, const void* src, const std::uint64_t* rows,
                stream_ref) override {
    inner_->stash(k, src, rows, made_on_);
  }
  void do_restore(const stash_key& k, void* dst, std::uint64_t* rows_out, stream_ref) override {
    inner_->restore(k, dst, rows_out, made_on_);
  }
};

/// Bug (graph_replay_row_counts): the row-count pointer of the first stash() is kept and read
/// for every later key (one pointer per step is the common case it was written for).
class first_rows_pointer_stash final : public forwarding_stash {
 public:
  using forwarding_stash::forwarding_stash;

 private:
  const std::uint64_t* first_ = nullptr;
  void do_stash(const stash_key& k, const void* src, const std::uint64_t* rows,
                stream_ref s) override {
    if (first_ == nullptr) first_ = rows;
    inner_->stash(k, src, first_, s);
  }
};

/// Bug (multi_device): the config is checked as given, but the pool, the freelists and the status
/// word are allocated on device 0 (the device current when such code is written and tested),
/// whatever config.device says.
offloadkit::testing::stash_implementation pool_on_device_zero() {
  return planted_descriptor([](executor& ex, const stash_config& c, stream_ref s) {
    stash::check_config(c, ex.device_count());
    stash_config real = c;
    real.device = 0;
    return std::unique_ptr<stash_interface>(std::make_unique<plain_stash>(ex, c, real, s));
  });
}

/// Bug (batch_matches_per_key): the batch is issued from its last item to its first (a loop
/// written for a stack), natively: keys take other pages, and when the pool runs out another key
/// overflows than per-key calls in batch order would make overflow.
class reversed_batch_stash final : public forwarding_stash {
 public:
  using forwarding_stash::forwarding_stash;

 private:
  void do_stash_batch(const stash_item* items, std::size_t n, stream_ref s) override {
    std::vector<stash_item> reversed(items, items + n);
    std::reverse(reversed.begin(), reversed.end());
    inner_->stash_batch(reversed, s);
  }
};

/// Bug (caller_writes_late): the reference stash, whose stash() works on the stream the stash was
/// made with instead of the caller's, after polling the caller's stream from the host for at most
/// 200 ms (as code that spins on cudaStreamQuery with a timeout does) instead of waiting for it.
/// Its own work stays ordered: every call of the reference stash synchronizes the stream it runs
/// on. (model_based's writes, held back by at most 400 us, land within the poll.)
class polling_reference_stash final : public stash_interface {
 public:
  polling_reference_stash(executor& ex, const stash_config& c, stream_ref s)
      : ex_(&ex), inner_(ex, c, s), made_on_(s) {}

 private:
  executor* ex_;
  eager_stash inner_;
  stream_ref made_on_;
  std::string do_name() const override { return "planted"; }
  const stash_config& do_config() const noexcept override { return inner_.config(); }
  bool do_capturable() const noexcept override { return inner_.capturable(); }
  void do_stash(const stash_key& k, const void* src, const std::uint64_t* rows,
                stream_ref s) override {
    const event queued(*ex_, s.device);
    ex_->record(queued, s);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (!ex_->ready(queued.ref()) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    inner_.stash(k, src, rows, made_on_);
  }
  void do_restore(const stash_key& k, void* dst, std::uint64_t* rows_out, stream_ref s) override {
    inner_.restore(k, dst, rows_out, s);
  }
  void do_reset(stream_ref s) override { inner_.reset(s); }
  void do_clear_status(stream_ref s) override { inner_.clear_status(s); }
  stash_snapshot do_snapshot(stream_ref s) override { return inner_.snapshot(s); }
};

/// polling_reference_stash's descriptor: the reference stash's profile, which it keeps.
offloadkit::testing::stash_implementation polling_reference() {
  offloadkit::testing::stash_implementation impl =
      offloadkit::testing::reference_stash_implementation();
  impl.name = "planted";
  impl.make = [](executor& ex, const stash_config& c, stream_ref s) {
    return std::unique_ptr<stash_interface>(std::make_unique<polling_reference_stash>(ex, c, s));
  };
  return impl;
}

using offloadkit::testing::failing_properties;

/// The properties of the whole battery that fail on the host executor (a fresh one each, each
/// property's default case count).
std::set<std::string> failing_properties(const offloadkit::testing::stash_implementation& impl) {
  return failing_properties(offloadkit::testing::stash_battery(impl));
}

using names = std::set<std::string>;

// ---- declared policies: a profile that fits the code, and a bug in each policy -----------------

namespace doubles = offloadkit::stash::testing_doubles;

TEST(StashProfiles, StickyFlagWholeKeyDecimalStashPassesItsProfile) {
  const auto impl = doubles::sticky_flag_stash_implementation();
  EXPECT_EQ(failing_properties(impl), names{});
  // What its profile rules out is listed as not applicable, with the reason.
  for (const check_case& c : offloadkit::testing::stash_battery(impl)) {
    if (c.name == "capacity_sweep_first_overflow" || c.name == "graph_replay_row_counts") {
      EXPECT_NE(c.not_applicable.find("profile says"), std::string::npos) << c.name;
    }
  }
}
TEST(StashProfiles, SplitKeyDeclaredWholeIsCaughtByTheModel) {
  const names failed = failing_properties(
      doubles::sticky_flag_stash_implementation(doubles::sticky_planted::splits_keys));
  EXPECT_EQ(failed.count("model_based"), 1u);
}
TEST(StashProfiles, StashingPastTheStickyFlagOnlyByTheModel) {
  EXPECT_EQ(failing_properties(doubles::sticky_flag_stash_implementation(
                doubles::sticky_planted::stashes_after_the_flag)),
            names{"model_based"});
}

TEST(StashProfiles, ThrowingOverflowStashPassesItsProfile) {
  EXPECT_EQ(failing_properties(doubles::throwing_stash_implementation()), names{});
}
TEST(StashProfiles, StoppingAfterAThrownOverflowOnlyByTheModel) {
  EXPECT_EQ(failing_properties(doubles::throwing_stash_implementation(
                doubles::sticky_planted::stops_after_exception)),
            names{"model_based"});
}

// One tier of pages: the double passes its profile with either tier; a stash that keeps an
// overflowing key in the tier it does not have is caught by every property that overflows it, and
// one that accepts pages in that tier only by config_limits.
TEST(StashProfiles, SingleTierStashPassesItsProfileOnEitherTier) {
  using offloadkit::testing::stash_tier;
  for (const stash_tier tier : {stash_tier::device, stash_tier::pinned}) {
    const auto impl = doubles::single_tier_stash_implementation(tier);
    EXPECT_EQ(failing_properties(impl), names{}) << to_string(tier);
    // A per-key status word with one tier: the first-overflow prediction applies, sized to it.
    for (const check_case& c : offloadkit::testing::stash_battery(impl)) {
      if (c.name == "capacity_sweep_first_overflow") {
        EXPECT_EQ(c.not_applicable, "");
      }
    }
  }
}
TEST(StashProfiles, SpillingToTheMissingTierIsCaughtByEveryOverflowingProperty) {
  EXPECT_EQ(failing_properties(doubles::single_tier_stash_implementation(
                offloadkit::testing::stash_tier::device,
                doubles::sticky_planted::spills_to_the_missing_tier)),
            (names{"capacity_sweep_first_overflow", "config_limits", "model_based",
                   "batch_matches_per_key"}));
}
TEST(StashProfiles, AcceptingPagesOfTheMissingTierOnlyByConfigLimits) {
  EXPECT_EQ(failing_properties(doubles::single_tier_stash_implementation(
                offloadkit::testing::stash_tier::pinned,
                doubles::sticky_planted::accepts_the_missing_tier)),
            names{"config_limits"});
}

// Validation at first use: the double passes its profile; one that stashes after reporting the
// bad config once, and one whose refused restore writes the row count, are caught by
// config_limits alone. Declared with validation at construction, the same double fails it.
TEST(StashProfiles, FirstUseValidationStashPassesItsProfile) {
  EXPECT_EQ(failing_properties(doubles::first_use_stash_implementation()), names{});
}
TEST(StashProfiles, StashingAfterABadConfigOnlyByConfigLimits) {
  EXPECT_EQ(failing_properties(doubles::first_use_stash_implementation(
                doubles::sticky_planted::stashes_after_a_bad_config)),
            names{"config_limits"});
}
TEST(StashProfiles, WritingBeforeRefusingABadConfigOnlyByConfigLimits) {
  EXPECT_EQ(failing_properties(doubles::first_use_stash_implementation(
                doubles::sticky_planted::writes_before_refusing)),
            names{"config_limits"});
}
TEST(StashProfiles, FirstUseStashDeclaredAsValidatingAtConstructionOnlyByConfigLimits) {
  auto impl = doubles::first_use_stash_implementation();
  impl.caps.validation = offloadkit::testing::stash_config_validation::construction;
  EXPECT_EQ(failing_properties(impl), names{"config_limits"});
}

TEST(StashCatchesExactlyOne, ForwardingWithoutABugPassesEverything) {
  EXPECT_EQ(failing_properties(planted<plain_stash>()), names{});
}
TEST(StashCatchesExactlyOne, CappedRowsOnlyByRoundTrip) {
  EXPECT_EQ(failing_properties(capped_rows()), names{"round_trip_and_conservation"});
}
TEST(StashCatchesExactlyOne, MisreportedStatusRowsOnlyByCapacitySweep) {
  EXPECT_EQ(failing_properties(planted<misreporting_stash>()),
            names{"capacity_sweep_first_overflow"});
}
TEST(StashCatchesExactlyOne, WrappedKeysOnlyByKeyLimits) {
  EXPECT_EQ(failing_properties(planted<wrapping_key_stash>()), names{"key_limits"});
}
TEST(StashCatchesExactlyOne, LenientConfigOnlyByConfigLimits) {
  EXPECT_EQ(failing_properties(lenient_config()), names{"config_limits"});
}
TEST(StashCatchesExactlyOne, SwallowedFaultOnlyByCountdown) {
  EXPECT_EQ(failing_properties(planted<swallowing_stash>()), names{"injected_faults_countdown"});
}
// A stash that ignores the caller's stream in every call reads the source too early in
// caller_writes_late as well; the bugs only model_based catches are the profile ones
// (StashProfiles: stashing past the sticky flag, stopping after a thrown overflow).
TEST(StashCatchesBoth, WrongStreamByModelAndCallerWritesLate) {
  EXPECT_EQ(failing_properties(planted<own_stream_stash>()),
            (names{"model_based", "caller_writes_late"}));
}
TEST(StashCatchesExactlyOne, ReferenceStashPassesEveryProperty) {
  EXPECT_EQ(failing_properties(offloadkit::testing::reference_stash_implementation()), names{});
}
TEST(StashCatchesExactlyOne, PollingTheCallerBrieflyOnlyByCallerWritesLate) {
  EXPECT_EQ(failing_properties(polling_reference()), names{"caller_writes_late"});
}
TEST(StashCatchesExactlyOne, FirstRowsPointerOnlyByGraphReplay) {
  EXPECT_EQ(failing_properties(planted<first_rows_pointer_stash>()),
            names{"graph_replay_row_counts"});
}
TEST(StashCatchesExactlyOne, ReversedBatchOnlyByBatchMatchesPerKey) {
  EXPECT_EQ(failing_properties(planted<reversed_batch_stash>()), names{"batch_matches_per_key"});
}
TEST(StashCatchesExactlyOne, PoolOnDeviceZeroOnlyByMultiDevice) {
  EXPECT_EQ(failing_properties(pool_on_device_zero()), names{"multi_device"});
}

// ---- codecs: each codec property catches a broken codec that the others pass ------------------

std::uint32_t encode_dropping_layer_top_bit(const stash_key& k) {
  check_key(k);
  return pack_key(k.vp, k.layer & (key_limits::layer / 2 - 1), k.microbatch);
}

stash_key legacy_decode_two_digit_microbatch(std::uint64_t code) noexcept {
  stash_key k = legacy_decode(code);
  k.microbatch = static_cast<std::uint32_t>(code % 100);
  return k;
}

bool legacy_round_trip_of_two_digit_decode(const stash_key& k) noexcept {
  return legacy_decode_two_digit_microbatch(legacy_encode(k)) == k;
}

bool legacy_claims_the_fixed_width_range(const stash_key& k) noexcept {
  return k.layer < key_limits::layer && k.microbatch < key_limits::microbatch;
}

std::set<std::string> failing_codec_properties(const stash::testing::key_codecs& codecs) {
  return failing_properties(offloadkit::testing::stash_codec_checks(codecs));
}

TEST(StashCodecCatchesExactlyOne, LibraryCodecsPassEverything) {
  EXPECT_EQ(failing_codec_properties(stash::testing::builtin_codecs()), names{});
}
TEST(StashCodecCatchesExactlyOne, CollidingFixedWidthCodecOnlyByInjectivity) {
  auto c = stash::testing::builtin_codecs();
  c.encode = &encode_dropping_layer_top_bit;
  EXPECT_EQ(failing_codec_properties(c), names{"fixed_width_codec_injective"});
}
TEST(StashCodecCatchesExactlyOne, BrokenLegacyDecodeOnlyByBelow1000) {
  auto c = stash::testing::builtin_codecs();
  c.legacy_decode = &legacy_decode_two_digit_microbatch;
  c.legacy_representable = &legacy_round_trip_of_two_digit_decode;
  EXPECT_EQ(failing_codec_properties(c), names{"legacy_codec_round_trips_below_1000"});
}
TEST(StashCodecCatchesExactlyOne, OverclaimedRepresentabilityOnlyByClaimAgreement) {
  auto c = stash::testing::builtin_codecs();
  c.legacy_representable = &legacy_claims_the_fixed_width_range;
  EXPECT_EQ(failing_codec_properties(c), names{"legacy_codec_claim_agrees_with_round_trip"});
}

// ---- fixed cases come first in every run
// ---------------------------------------------------------

TEST(FixedCases, EveryRunStartsWithTheFixedValuesThenDrawsRandomOnes) {
  auto seen = std::make_shared<std::vector<int>>();
  check_case c;
  c.feature = "stash";
  c.implementation = "fixed_cases";
  c.name = "records";
  c.default_cases = 8;
  c.property = [seen](executor&) {
    seen->push_back(*offloadkit::testing::fixed_then_random("test.fixed_cases", {-1, -2, -3},
                                                            rc::gen::inRange(0, 1000)));
  };
  host_executor ex;
  offloadkit::check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  for (int run = 0; run < 2; ++run) {
    seen->clear();
    ASSERT_TRUE(run_check(c, ex, cfg).passed);
    ASSERT_EQ(seen->size(), 8u);
    EXPECT_EQ(std::vector<int>(seen->begin(), seen->begin() + 3), (std::vector<int>{-1, -2, -3}));
    for (std::size_t i = 3; i < seen->size(); ++i) EXPECT_GE((*seen)[i], 0);
  }
}

TEST(FixedCases, AFailingFixedCaseIsReportedAsItWas) {
  check_case c;
  c.feature = "stash";
  c.implementation = "fixed_cases";
  c.name = "fails_on_the_second";
  c.default_cases = 20;
  c.property = [](executor&) {
    const int v = *offloadkit::testing::fixed_then_random("test.fixed_fail", {5, 4095},
                                                          rc::gen::inRange(0, 10));
    RC_ASSERT(v != 4095);
  };
  host_executor ex;
  offloadkit::check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  const check_outcome o = run_check(c, ex, cfg);
  EXPECT_FALSE(o.passed);
  EXPECT_EQ(o.cases_run, 2);
  // The failure recurs when rapidcheck runs the case again to describe it: the message is the
  // failure itself, and the counterexample is the fixed value that failed.
  EXPECT_EQ(o.message.find("did not recur"), std::string::npos) << o.message;
  const std::size_t counterexample = o.message.find("counterexample:");
  ASSERT_NE(counterexample, std::string::npos) << o.message;
  EXPECT_NE(o.message.find("4095", counterexample), std::string::npos) << o.message;
}

/// Runs `property` of the battery for `impl` on the host executor: it must fail.
void expect_caught(const offloadkit::testing::stash_implementation& impl,
                   const std::string& property) {
  const auto battery = offloadkit::testing::stash_battery(impl);
  auto it = std::find_if(battery.begin(), battery.end(),
                         [&](const check_case& c) { return c.name == property; });
  ASSERT_NE(it, battery.end()) << "the battery does not list " << property << " for " << impl.name;
  host_executor ex;
  offloadkit::check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  const check_outcome o = run_check(*it, ex, cfg);
  EXPECT_FALSE(o.passed) << property << " did not catch the planted bug (seed " << o.seed << ")";
  // A failure must come from the property's assertions, not from the harness breaking.
  EXPECT_EQ(o.message.find("the check itself threw"), std::string::npos) << o.message;
  std::cout << property << " caught it after " << o.cases_run << " case(s):\n"
            << o.message.substr(0, 600) << "\n";
}

TEST(StashCatches, CorruptedRestoreByRoundTrip) {
  expect_caught(planted<corrupting_stash>(), "round_trip_and_conservation");
}
TEST(StashCatches, CorruptedRestoreByModel) {
  expect_caught(planted<corrupting_stash>(), "model_based");
}
TEST(StashCatches, CorruptedRestoreByGraphReplay) {
  expect_caught(planted<corrupting_stash>(), "graph_replay_row_counts");
}
TEST(StashCatches, LeakedPagesByRoundTrip) {
  expect_caught(planted<leaking_stash>(), "round_trip_and_conservation");
}
TEST(StashCatches, LostStickyStatusByCapacitySweep) {
  expect_caught(planted<forgetful_stash>(), "capacity_sweep_first_overflow");
}
TEST(StashCatches, LostStickyStatusByModel) {
  expect_caught(planted<forgetful_stash>(), "model_based");
}
TEST(StashCatches, SwallowedFaultByCountdown) {
  expect_caught(planted<swallowing_stash>(), "injected_faults_countdown");
}
TEST(StashCatches, PlannerNotExactByCapacitySweep) {
  expect_caught(undersized(), "capacity_sweep_first_overflow");
}

// The conservation checker itself: a page listed twice or lost is reported.
TEST(StashCatches, DoubleHandOutAndLostPageByConservationCheck) {
  stash_config cfg;
  cfg.row_bytes = 4;
  cfg.rows_per_page = 2;
  cfg.max_rows = 4;
  cfg.device_pages = 2;
  cfg.pinned_pages = 1;
  stash_snapshot snap;
  snap.free = {1, 1};
  snap.free_ids = {0, 2};
  entry_view e;
  e.key = {0, 1, 0};
  e.rows = 2;
  e.device_pages = 1;
  e.page_ids = {0};
  snap.entries = {e};
  EXPECT_NE(check_conservation(snap, cfg, true).find("handed out twice"), std::string::npos);
  snap.entries[0].page_ids = {1};
  EXPECT_EQ(check_conservation(snap, cfg, true), "");
  snap.free_ids = {0, 0};
  EXPECT_NE(check_conservation(snap, cfg, true), "");
  snap.free = {0, 1};
  snap.free_ids = {2};
  EXPECT_NE(check_conservation(snap, cfg, true).find("device tier"), std::string::npos);
}

}  // namespace
