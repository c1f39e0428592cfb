// What the paged-stash properties share inside the battery library: random workloads, the
// driver that runs one through a stash checking every restore, and each property's declaration
// (the bodies are in this folder's *_properties.cpp, listed by battery.cpp).
#pragma once

#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/detail/splitmix64.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/key.hpp"
#include "offloadkit/stash/planner.hpp"
#include "offloadkit/stash/schedule.hpp"
#include "offloadkit/stash/stash.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/device_memory.hpp"
#include "offloadkit/testing/driver_instruments.hpp"
#include "offloadkit/testing/fault_countdown.hpp"
#include "offloadkit/testing/fixed_cases.hpp"
#include "offloadkit/testing/implementation.hpp"
#include "offloadkit/testing/stash_battery.hpp"
#include "offloadkit/testing/stash_battery_support.hpp"
#include "offloadkit/testing/sync_on_exit.hpp"

namespace offloadkit::stash::testing {

using offloadkit::testing::stash_implementation;

/// A key's fields (vp, layer, microbatch) as generated.
using key_fields = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>;

struct random_workload {
  workload w;
  std::uint64_t rows_per_page = 1;
  std::string shape;  ///< which generator, for counterexamples
};

/// A random workload: a 1F1B, interleaved or random schedule; row counts from 0 to max_rows with
/// both ends likely; odd row sizes and small bf16 hidden sizes.
inline random_workload gen_workload(bool small = false) {
  random_workload r;
  const int kind = *rc::gen::inRange(0, 3);
  const std::uint32_t layers = *rc::gen::inRange<std::uint32_t>(1, small ? 3 : 4);
  if (kind == 0) {
    const std::uint32_t p = *rc::gen::inRange<std::uint32_t>(1, 5);
    const std::uint32_t rank = *rc::gen::inRange<std::uint32_t>(0, p);
    const std::uint32_t m = *rc::gen::inRange<std::uint32_t>(1, small ? 4 : 7);
    r.w.sched = one_f_one_b(p, rank, m, layers);
    r.shape = detail::concat("1F1B p=", p, " rank=", rank, " m=", m, " layers=", layers);
  } else if (kind == 1) {
    const std::uint32_t p = *rc::gen::inRange<std::uint32_t>(1, 4);
    const std::uint32_t rank = *rc::gen::inRange<std::uint32_t>(0, p);
    const std::uint32_t v = *rc::gen::inRange<std::uint32_t>(1, 3);
    const std::uint32_t m = p * *rc::gen::inRange<std::uint32_t>(1, small ? 2 : 3);
    r.w.sched = interleaved_one_f_one_b(p, rank, v, m, layers);
    r.shape =
        detail::concat("interleaved p=", p, " rank=", rank, " v=", v, " m=", m, " layers=", layers);
  } else {
    const std::uint32_t v = *rc::gen::inRange<std::uint32_t>(1, 3);
    const std::uint32_t m = *rc::gen::inRange<std::uint32_t>(1, small ? 3 : 5);
    std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
    r.w.sched = random_schedule(v, layers, m, rng);
    r.shape = detail::concat("random v=", v, " m=", m, " layers=", layers);
  }
  r.w.row_bytes =
      *rc::gen::oneOf(rc::gen::inRange<std::uint64_t>(1, 40),
                      rc::gen::elementOf(std::vector<std::uint64_t>{
                          std::uint64_t{2} * 16, std::uint64_t{2} * 64, std::uint64_t{2} * 96}));
  r.w.max_rows = *rc::gen::inRange<std::uint64_t>(0, small ? 24 : 48);
  r.rows_per_page = *rc::gen::inRange<std::uint64_t>(1, 9);
  const std::uint64_t mr = r.w.max_rows;
  std::set<stash_key> keys;
  for (const auto& st : r.w.sched.steps) keys.insert(st.key);
  for (const auto& k : keys) {
    const std::uint64_t rows =
        *rc::gen::weightedOneOf<std::uint64_t>({{1, rc::gen::just(std::uint64_t{0})},
                                                {1, rc::gen::just(std::uint64_t{mr})},
                                                {3, rc::gen::inRange<std::uint64_t>(0, mr + 1)}});
    r.w.rows.push_back({k, rows});
  }
  return r;
}

inline stash_config config_for(const random_workload& r, std::uint64_t device_pages,
                               std::uint64_t pinned_pages) {
  stash_config c;
  c.row_bytes = r.w.row_bytes;
  c.rows_per_page = r.rows_per_page;
  c.max_rows = r.w.max_rows;
  c.device_pages = device_pages;
  c.pinned_pages = pinned_pages;
  c.max_keys = std::max<std::size_t>(r.w.rows.size(), 1);
  return c;
}

/// Whether a key needing `need` pages gets them from free_dev + free_pin under the declared
/// placement.
inline bool key_fits(const offloadkit::testing::stash_capabilities& caps, std::uint64_t need,
                     std::uint64_t free_dev, std::uint64_t free_pin) {
  using offloadkit::testing::stash_placement;
  switch (caps.placement) {
    case stash_placement::whole_key_per_tier:
      return need <= free_dev || need <= free_pin;
    case stash_placement::single_tier:
      return need <= (caps.tier == offloadkit::testing::stash_tier::device ? free_dev : free_pin);
    case stash_placement::split_within_key:
      break;
  }
  return need <= free_dev + free_pin;
}

/// The device pages a key needing `need` pages takes when it fits, under the declared placement.
inline std::uint64_t device_share(const offloadkit::testing::stash_capabilities& caps,
                                  std::uint64_t need, std::uint64_t free_dev) {
  using offloadkit::testing::stash_placement;
  switch (caps.placement) {
    case stash_placement::whole_key_per_tier:
      return need <= free_dev ? need : 0;
    case stash_placement::single_tier:
      return caps.tier == offloadkit::testing::stash_tier::device ? need : 0;
    case stash_placement::split_within_key:
      break;
  }
  return std::min(need, free_dev);
}

/// The two tiers' pages (device, pinned) a property draws, as the profile may be given them: a
/// single-tier stash gets all of them in the tier it has and none in the other (a config that
/// gave the other tier pages would be refused), so the pool keeps its size; other placements get
/// them as drawn.
inline std::pair<std::uint64_t, std::uint64_t> tiers_for(
    const offloadkit::testing::stash_capabilities& caps, std::uint64_t dev, std::uint64_t pin) {
  if (!caps.single_tier()) return {dev, pin};
  if (caps.tier == offloadkit::testing::stash_tier::device) return {dev + pin, 0};
  return {0, dev + pin};
}

/// The tiers (device, pinned) that, with `dev` device pages where the placement lets the
/// property choose them, hold a workload whose peak is `peak` pages with nothing to spare
/// (`extra` more): the rest of the peak pinned where a key may be split, the whole peak pinned
/// where a key goes whole into one tier, the whole peak in the one tier of a single-tier stash.
inline std::pair<std::uint64_t, std::uint64_t> pool_for_peak(const stash_implementation& impl,
                                                             std::uint64_t peak, std::uint64_t dev,
                                                             std::uint64_t extra = 0) {
  using offloadkit::testing::stash_placement;
  switch (impl.caps.placement) {
    case stash_placement::whole_key_per_tier:
      return {dev, peak + extra};
    case stash_placement::single_tier:
      return tiers_for(impl.caps, peak + extra, 0);
    case stash_placement::split_within_key:
      break;
  }
  return {dev, peak - dev + extra};
}

/// Runs a workload through a stash, checking every restore against the model (the key's pattern)
/// and, when asked, page conservation after every step. Keys in `dropped` must restore nothing.
/// With `policy`, a dropped key is dropped as the profile says: stash() throws out_of_memory where
/// the overflow is an exception, and restore() of it throws state_error where restoring a key that
/// holds nothing is an error.
inline void run_workload(stash_interface& st, device_io& io, const workload& w,
                         const std::vector<stash_key>& dropped, bool check_each_step,
                         bool has_page_ids, std::uint32_t salt,
                         const offloadkit::testing::stash_capabilities* policy = nullptr) {
  const std::set<stash_key> drop(dropped.begin(), dropped.end());
  const bool overflow_throws =
      policy != nullptr &&
      policy->overflow == offloadkit::testing::stash_overflow_report::exception;
  // Under the exception policy nothing else makes a dropped restore come back empty: it holds
  // nothing, which the profile may call an error.
  const bool empty_restore_throws =
      overflow_throws &&
      policy->unknown_restore == offloadkit::testing::stash_unknown_restore::error;
  for (std::size_t i = 0; i < w.sched.steps.size(); ++i) {
    const schedule_step& step = w.sched.steps[i];
    const std::uint32_t code = pattern_code(step.key);
    const std::uint64_t rows = rows_of(w, step.key);
    if (step.kind == step_kind::stash) {
      io.write_u64(io.rows.data(), rows);
      io.write_source(io.src.data(), code, salt);
      if (overflow_throws && drop.count(step.key) != 0) {
        RC_ASSERT_THROWS_AS(st.stash(step.key, io.src.data(), io.rows.as<std::uint64_t>(), io.s),
                            out_of_memory);
      } else {
        st.stash(step.key, io.src.data(), io.rows.as<std::uint64_t>(), io.s);
      }
    } else {
      const bool is_dropped = drop.count(step.key) != 0;
      io.clear(io.dst.data());
      io.write_u64(io.rows_out.data(), 0xDEADBEEFull);
      if (empty_restore_throws && is_dropped) {
        RC_ASSERT_THROWS_AS(
            st.restore(step.key, io.dst.data(), io.rows_out.as<std::uint64_t>(), io.s),
            state_error);
        continue;
      }
      st.restore(step.key, io.dst.data(), io.rows_out.as<std::uint64_t>(), io.s);
      const auto got = io.read(io.dst.data());
      const long long bad = first_mismatch(got, code, salt, is_dropped ? 0 : rows * w.row_bytes);
      RC_ASSERT_FALSE(bad >= 0);
      const std::uint64_t rows_back = io.read_u64(io.rows_out.data());
      RC_ASSERT(rows_back == (is_dropped ? 0 : rows));
    }
    if (check_each_step) {
      const std::string err = check_conservation(st.snapshot(io.s), st.config(), has_page_ids);
      if (!err.empty())
        RC_FAIL(detail::concat("after step ", i, " (", to_string(step), "): ", err));
    }
  }
  const stash_snapshot end = st.snapshot(io.s);
  RC_ASSERT(end.entries.empty());
  RC_ASSERT(end.free.device == st.config().device_pages);
  RC_ASSERT(end.free.pinned == st.config().pinned_pages);
}

// ---- properties (stash_battery() lists them) ---------------------------------------------------

/// Differential: for random schedules, row counts, row sizes and page sizes, restores give back
/// exactly the model's bytes, pages are conserved after every step (none lost, none owned twice)
/// and the freelists are full at the end.
void prop_round_trip(executor& ex, const stash_implementation& impl);

/// Fault injection: at every pool capacity from 0 up to the planner's peak, the status word names
/// exactly the first overflowing key with its row count, need and free pages in both tiers;
/// every other key restores correctly; overflowed keys restore nothing; pages are conserved. At
/// the peak nothing overflows (the planner is exact).
void prop_capacity_sweep(executor& ex, const stash_implementation& impl);

/// Keys at the corners of the key space the stash declares round-trip through the stash, and
/// those of offloadkit's codec through make_key and the codec; keys past a limit throw
/// out_of_range naming the field, the value and the limit, from make_key and from stash(), which
/// stays usable afterwards; more distinct keys than max_keys is a typed error. The corners and
/// the first values past each limit are the first cases of every run.
void prop_key_limits(executor& ex, const stash_implementation& impl);

/// Every config field at its last valid and first invalid value: row_bytes, rows_per_page and
/// max_keys at 1 and 0, max_rows and both tiers at 0, the two tiers together at 2^31 pages (page
/// ids are 32-bit on the device), device at -1 and at the executor's device count. The fixed
/// cases come first in every run; random ones after.
void prop_config_limits(executor& ex, const stash_implementation& impl);

/// Countdown fault injection (abseil style): fail the Nth allocation, copy, fill or launch the
/// stash issues, for N = 0, 1, 2, ... until a whole step runs without a fault. Every injected
/// fault surfaces as a typed exception; afterwards the pages are conserved and, after reset(), the
/// same stash runs the whole step correctly.
void prop_injected_faults(executor& ex, const stash_implementation& impl);

/// The caller's last write of a key's source and of its row count is late on the call's stream: a
/// long hold, then both writes, then stash() on that stream at once. stash() reads both in the
/// order of the stream it is given, so restore() must give back the late count and rows; a stash
/// that works on a stream of its own without waiting for the caller's reads what they held
/// before (the two counts always differ). model_based writes on the call's stream too, held back
/// by at most 400 us: it catches a stash that does not order the caller's stream at all; the hold
/// here (300 to 400 ms, drawn per case) also outlasts a bounded host wait for it shorter than that
/// (the other properties' writes, large ones on a loaded machine included, land well within it).
void prop_caller_writes_late(executor& ex, const stash_implementation& impl);

/// Model-based: random stash/restore/reset/clear sequences (double stashes, empty restores and
/// overflows included) against a plain model of the freelists, page table and status word.
void prop_model(executor& ex, const stash_implementation& impl);

/// A captured step (two stashes, two restores) replays correctly with different row counts
/// written to the device before each replay, overflow included; the host never reads a row count.
void prop_graph_replay(executor& ex, const stash_implementation& impl);

/// Differential: stash_batch() and restore_batch() leave exactly what stash() and restore() of
/// the same items in batch order leave: the same entries (page ids included where reported), free
/// pages, sticky status word (which key failed first, with its need and the free pages it saw),
/// restored bytes and row counts. Batches are random subsets of a layer's keys in random order
/// over pools that often run out, with keys stashed twice, restored empty and rows past max_rows.
void prop_batch_matches_per_key(executor& ex, const stash_implementation& impl);

/// A stash on a device other than the first (config.device = d >= 1), with work issued on device
/// 0 right before each of its calls: restores give back the stashed bytes, its device memory is
/// d's (d's free memory drops by at least the device-tier bytes it holds, device 0's never moves),
/// and once destroyed every device's free memory is back. Then a stash on device 0 joins it and
/// the two are driven interleaved from one thread, both right. On a GPU the figures hold within
/// two granules and the rows are large enough for a pool to show.
void prop_multi_device(executor& ex, const stash_implementation& impl);

/// The fixed-width codec round-trips every key in range and distinct keys get distinct codes.
void prop_codec_injective(const key_codecs& codec);

/// The legacy codec round-trips while layer and microbatch stay below 1000; this holds and is the
/// range third-party code using it must stay in.
void prop_legacy_in_range(const key_codecs& codec);

/// What legacy_representable() claims agrees with the decode round trip over the whole key
/// range, layer or microbatch at 1000 and above included: a key it calls representable decodes
/// back to itself and one it does not call representable does not. The edges around 1000 and at
/// the key limits are the first cases of every run.
void prop_legacy_claim_agrees(const key_codecs& codec);

}  // namespace offloadkit::stash::testing
