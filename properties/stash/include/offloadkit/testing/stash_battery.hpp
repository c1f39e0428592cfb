// The paged-stash battery: every property written once against stash_interface and an executor,
// listed for an implementation descriptor (testing::stash_implementation) by what it declares:
// id-level page conservation only with caps.page_ids, graph capture only with caps.capturable,
// countdown fault injection only when its allocations go through the executor. Run by ctest and
// by `offloadkit check`; the reference and optimized stashes are the built-in descriptors.
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
#include "offloadkit/testing/fixed_cases.hpp"
#include "offloadkit/testing/implementation.hpp"
#include "offloadkit/testing/sync_on_exit.hpp"

namespace offloadkit::stash::testing {

using offloadkit::testing::stash_implementation;

/// Non-zero byte `offset` of key `code`'s activation in generation `salt`.
inline unsigned char pattern_byte(std::uint32_t code, std::uint32_t salt, std::uint64_t offset) {
  const std::uint64_t x = offloadkit::detail::splitmix64_mix(
      (std::uint64_t{code} << 32 | salt) ^ (offset * offloadkit::detail::splitmix64_gamma));
  return static_cast<unsigned char>((x % 255) + 1);
}

/// A number naming a key's data pattern: any key a stash accepts has one, whatever key space it
/// declares (offloadkit's codec covers only its own).
inline std::uint32_t pattern_code(const stash_key& k) {
  return static_cast<std::uint32_t>(offloadkit::detail::splitmix64_mix(
      (std::uint64_t{k.vp} << 42) ^ (std::uint64_t{k.layer} << 21) ^ k.microbatch));
}

constexpr unsigned char sentinel = 0xA5;

/// Device buffers (on `device`) and a pinned staging area for driving a stash from a test.
struct device_io {
  executor* ex;
  stream_ref s;
  std::size_t bytes;
  buffer src, dst, rows, rows_out, staging;

  device_io(executor& e, stream_ref st, std::size_t buffer_bytes, int device = 0)
      : ex(&e),
        s(st),
        bytes(buffer_bytes),
        src(e, memory_kind::device, buffer_bytes, device),
        dst(e, memory_kind::device, buffer_bytes, device),
        rows(e, memory_kind::device, sizeof(std::uint64_t), device),
        rows_out(e, memory_kind::device, sizeof(std::uint64_t), device),
        staging(e, memory_kind::pinned, buffer_bytes + 16) {}

  void write_u64(void* device_ptr, std::uint64_t v) {
    std::memcpy(staging.data(), &v, sizeof v);
    ex->copy(device_ptr, staging.data(), sizeof v, s);
    ex->synchronize(s);
  }
  std::uint64_t read_u64(const void* device_ptr) {
    ex->copy(staging.data(), device_ptr, sizeof(std::uint64_t), s);
    ex->synchronize(s);
    std::uint64_t v;
    std::memcpy(&v, staging.data(), sizeof v);
    return v;
  }
  /// Fills the whole oversized source with the key's pattern (rows past the count included).
  void write_source(void* device_ptr, std::uint32_t code, std::uint32_t salt) {
    auto* h = staging.as<unsigned char>();
    for (std::size_t o = 0; o < bytes; ++o) h[o] = pattern_byte(code, salt, o);
    if (bytes > 0) ex->copy(device_ptr, h, bytes, s);
    ex->synchronize(s);
  }
  void clear(void* device_ptr) {
    if (bytes > 0) ex->fill(device_ptr, sentinel, bytes, s);
    ex->synchronize(s);
  }
  std::vector<unsigned char> read(const void* device_ptr) {
    if (bytes > 0) ex->copy(staging.data(), device_ptr, bytes, s);
    ex->synchronize(s);
    const auto* h = staging.as<unsigned char>();
    return std::vector<unsigned char>(h, h + bytes);
  }
};

/// The first byte where a restored buffer differs from "the key's first `rows` rows, sentinel
/// after"; -1 when it matches. rows = 0 with restored = false expects the sentinel everywhere.
inline long long first_mismatch(const std::vector<unsigned char>& got, std::uint32_t code,
                                std::uint32_t salt, std::uint64_t valid_bytes) {
  for (std::size_t o = 0; o < got.size(); ++o) {
    const unsigned char want = o < valid_bytes ? pattern_byte(code, salt, o) : sentinel;
    if (got[o] != want) return static_cast<long long>(o);
  }
  return -1;
}

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

/// Whether a key needing `need` pages gets them from free_dev + free_pin under `placement`.
inline bool key_fits(offloadkit::testing::stash_placement placement, std::uint64_t need,
                     std::uint64_t free_dev, std::uint64_t free_pin) {
  if (placement == offloadkit::testing::stash_placement::whole_key_per_tier) {
    return need <= free_dev || need <= free_pin;
  }
  return need <= free_dev + free_pin;
}

/// The pinned pages that, with `dev` device pages, hold a workload whose peak is `peak` pages
/// with nothing to spare (`extra` more): the rest of the peak where a key may be split, the whole
/// peak where a key goes whole into one tier.
inline std::uint64_t pinned_for_peak(const stash_implementation& impl, std::uint64_t peak,
                                     std::uint64_t dev, std::uint64_t extra = 0) {
  if (impl.caps.placement == offloadkit::testing::stash_placement::whole_key_per_tier) {
    return peak + extra;
  }
  return peak - dev + extra;
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

// ---- properties -------------------------------------------------------------------------------

/// Differential: for random schedules, row counts, row sizes and page sizes, restores give back
/// exactly the model's bytes, pages are conserved after every step (none lost, none owned twice)
/// and the freelists are full at the end.
inline void prop_round_trip(executor& ex, const stash_implementation& impl) {
  const random_workload r = gen_workload();
  RC_TAG(r.shape);
  const capacity_plan plan = plan_capacity(r.w, r.rows_per_page);
  const std::uint64_t dev = *rc::gen::inRange<std::uint64_t>(0, plan.peak_pages + 1);
  const std::uint64_t pin =
      pinned_for_peak(impl, plan.peak_pages, dev, *rc::gen::inRange<std::uint64_t>(0, 3));
  const stash_config cfg = config_for(r, dev, pin);
  stream s(ex);
  auto st = impl.make(ex, cfg, s);
  // What the instance says of itself agrees with what its descriptor declares.
  RC_ASSERT(st->capturable() == impl.caps.capturable);
  device_io io(ex, s, r.w.max_rows * r.w.row_bytes);
  run_workload(*st, io, r.w, {}, true, impl.caps.page_ids, 1);
  RC_ASSERT(st->status(s).ok());
  // A second training step on the same pool behaves the same.
  run_workload(*st, io, r.w, {}, false, impl.caps.page_ids, 2);
  RC_ASSERT(st->status(s).ok());
}

/// Fault injection: at every pool capacity from 0 up to the planner's peak, the status word names
/// exactly the first overflowing key with its row count, need and free pages in both tiers;
/// every other key restores correctly; overflowed keys restore nothing; pages are conserved. At
/// the peak nothing overflows (the planner is exact).
inline void prop_capacity_sweep(executor& ex, const stash_implementation& impl) {
  const random_workload r = gen_workload(true);
  RC_TAG(r.shape);
  const capacity_plan plan = plan_capacity(r.w, r.rows_per_page);
  const int split_percent = *rc::gen::element(0, 50, 100);
  stream s(ex);
  device_io io(ex, s, r.w.max_rows * r.w.row_bytes);
  for (std::uint64_t cap = 0; cap <= plan.peak_pages; ++cap) {
    const std::uint64_t dev = cap * split_percent / 100, pin = cap - dev;
    const stash_config cfg = config_for(r, dev, pin);
    auto st = impl.make(ex, cfg, s);
    std::vector<stash_key> dropped;
    const auto predicted = predict_overflow(r.w, r.rows_per_page, dev, pin, &dropped);
    run_workload(*st, io, r.w, dropped, false, impl.caps.page_ids, static_cast<std::uint32_t>(cap));
    const stash_status got = st->status(s);
    if (cap == plan.peak_pages) {
      if (!got.ok())
        RC_FAIL(detail::concat("at the planner's capacity ", cap, ": ", got.message()));
      RC_ASSERT_FALSE(predicted.has_value());
      continue;
    }
    RC_ASSERT(predicted.has_value());  // below the peak something must overflow
    if (got.code != status_code::overflow || got.key != predicted->key ||
        got.rows != predicted->rows || got.needed != predicted->needed ||
        got.free_device != predicted->free_device || got.free_pinned != predicted->free_pinned) {
      RC_FAIL(detail::concat("capacity ", dev, " device + ", pin, " pinned: status says '",
                             got.message(), "', expected overflow of ", to_string(predicted->key),
                             " needing ", predicted->needed, " with ", predicted->free_device,
                             " + ", predicted->free_pinned, " free"));
    }
    bool thrown = false;
    try {
      st->check(s);
    } catch (const stash_overflow& e) {
      thrown = std::string(e.what()).find(to_string(predicted->key)) != std::string::npos;
    }
    RC_ASSERT(thrown);
  }
}

using key_fields = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>;

/// The limits of a key's fields (vp, layer, microbatch).
using key_space = std::array<std::uint32_t, 3>;

/// The key space a stash declares.
inline key_space declared_key_space(const stash_implementation& impl) {
  return {impl.caps.vp_limit, impl.caps.layer_limit, impl.caps.microbatch_limit};
}

/// offloadkit's fixed-width codec's key space.
inline key_space codec_key_space() {
  return {key_limits::vp, key_limits::layer, key_limits::microbatch};
}

/// Every corner of the key ranges: each field at its minimum (0) or its maximum (limit - 1).
inline std::vector<key_fields> corner_keys(const key_space& limits) {
  std::vector<key_fields> out;
  out.reserve(8);
  for (int i = 0; i < 8; ++i) {
    out.emplace_back((i & 1) != 0 ? limits[0] - 1 : 0, (i & 2) != 0 ? limits[1] - 1 : 0,
                     (i & 4) != 0 ? limits[2] - 1 : 0);
  }
  return out;
}

/// A key in range: the corners first, then fields at either end or anywhere between.
inline rc::Gen<key_fields> gen_boundary_key(const key_space& limits) {
  auto field = [](std::uint32_t limit) {
    return rc::gen::weightedOneOf<std::uint32_t>({{1, rc::gen::just(std::uint32_t{0})},
                                                  {1, rc::gen::just(limit - 1)},
                                                  {2, rc::gen::inRange<std::uint32_t>(0, limit)}});
  };
  return offloadkit::testing::fixed_then_random(
      "stash.key_limits.key", corner_keys(limits),
      rc::gen::tuple(field(limits[0]), field(limits[1]), field(limits[2])));
}

/// A field (0 vp, 1 layer, 2 microbatch) and a value past its limit: for every field the limit
/// itself, one more, the largest 32-bit and the largest 64-bit value first, then random ones.
inline rc::Gen<std::pair<int, std::uint64_t>> gen_past_limit(const key_space& limits) {
  std::vector<std::pair<int, std::uint64_t>> fixed;
  for (int f = 0; f < 3; ++f) {
    const std::uint64_t limit = limits[static_cast<std::size_t>(f)];
    for (std::uint64_t v : {limit, limit + 1, std::uint64_t{UINT32_MAX}, UINT64_MAX})
      fixed.emplace_back(f, v);
  }
  return offloadkit::testing::fixed_then_random(
      "stash.key_limits.past", std::move(fixed),
      rc::gen::mapcat(rc::gen::inRange(0, 3), [limits](int f) {
        const std::uint64_t limit = limits[static_cast<std::size_t>(f)];
        return rc::gen::map(rc::gen::inRange<std::uint64_t>(limit, limit + (1u << 20)),
                            [f](std::uint64_t v) { return std::make_pair(f, v); });
      }));
}

/// Keys at the corners of the key space the stash declares round-trip through the stash, and
/// those of offloadkit's codec through make_key and the codec; keys past a limit throw
/// out_of_range naming the field, the value and the limit, from make_key and from stash(), which
/// stays usable afterwards; more distinct keys than max_keys is a typed error. The corners and
/// the first values past each limit are the first cases of every run.
inline void prop_key_limits(executor& ex, const stash_implementation& impl) {
  const key_space limits = declared_key_space(impl);
  const key_fields corner = *gen_boundary_key(limits);
  const auto [field, past] = *gen_past_limit(limits);
  const char* names[] = {"vp", "layer", "microbatch"};
  const stash_key ok{std::get<0>(corner), std::get<1>(corner), std::get<2>(corner)};
  {
    // offloadkit's own codec, at the same corners clamped into its space.
    const key_space codec = codec_key_space();
    const stash_key in_codec =
        make_key(std::min(ok.vp, codec[0] - 1), std::min(ok.layer, codec[1] - 1),
                 std::min(ok.microbatch, codec[2] - 1));
    RC_ASSERT(decode_key(encode_key(in_codec)) == in_codec);
    std::uint64_t c[3] = {0, 0, 0};
    c[field] = std::max<std::uint64_t>(past, codec[static_cast<std::size_t>(field)]);
    std::string msg;
    try {
      (void)make_key(c[0], c[1], c[2]);
    } catch (const out_of_range& e) {
      msg = e.what();
    }
    RC_ASSERT(msg.find(detail::concat(names[field], " = ", c[field])) != std::string::npos);
    RC_ASSERT(msg.find(std::to_string(codec[static_cast<std::size_t>(field)])) !=
              std::string::npos);
  }
  std::uint64_t f[3] = {0, 0, 0};
  f[field] = past;

  stash_config cfg;
  cfg.row_bytes = 3;
  cfg.rows_per_page = 2;
  cfg.max_rows = 5;
  cfg.device_pages = 3;
  cfg.pinned_pages = 1;
  cfg.max_keys = 2;
  stream s(ex);
  auto st = impl.make(ex, cfg, s);
  device_io io(ex, s, cfg.max_rows * cfg.row_bytes);
  auto narrow = [](std::uint64_t v) {
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(v, UINT32_MAX));
  };
  const stash_key bad{narrow(f[0]), narrow(f[1]), narrow(f[2])};
  io.write_u64(io.rows.data(), 5);
  bool threw = false;
  try {
    st->stash(bad, io.src.data(), io.rows.as<std::uint64_t>(), s);
  } catch (const out_of_range&) {
    threw = true;
  }
  RC_ASSERT(threw);
  // The stash is still usable: a round trip of the corner key.
  workload w;
  w.sched.vp_stages = ok.vp + 1;
  w.sched.layers = ok.layer + 1;
  w.sched.microbatches = ok.microbatch + 1;
  w.sched.steps = {{step_kind::stash, ok}, {step_kind::restore, ok}};
  w.rows = {{ok, 5}};
  w.row_bytes = 3;
  w.max_rows = 5;
  run_workload(*st, io, w, {}, true, impl.caps.page_ids, 7);
  // More distinct keys than max_keys is a typed error, not a silent overwrite.
  const stash_key other1{ok.vp, ok.layer, ok.microbatch == 0 ? 1u : 0u};
  const stash_key other2{ok.vp, ok.layer == 0 ? 1u : 0u, ok.microbatch};
  io.write_u64(io.rows.data(), 1);
  st->stash(other1, io.src.data(), io.rows.as<std::uint64_t>(), s);
  threw = false;
  try {
    st->stash(other2, io.src.data(), io.rows.as<std::uint64_t>(), s);
  } catch (const out_of_range& e) {
    threw = std::string(e.what()).find("max_keys = 2") != std::string::npos;
  }
  RC_ASSERT(threw);
  RC_ASSERT(check_conservation(st->snapshot(s), cfg, impl.caps.page_ids).empty());
}

/// A config with one field at the edge of its valid range.
struct config_edge {
  const char* field;   ///< the field check_config() names
  std::int64_t value;  ///< its value; for `device`, -1 or one past the executor's last device
  bool valid;          ///< whether the config is usable
};

/// Every config field at its last valid and first invalid value: row_bytes, rows_per_page and
/// max_keys at 1 and 0, max_rows and both tiers at 0, the two tiers together at 2^31 pages (page
/// ids are 32-bit on the device), device at -1 and at the executor's device count. The fixed
/// cases come first in every run; random ones after.
inline void prop_config_limits(executor& ex, const stash_implementation& impl) {
  const std::int64_t too_many_pages = std::int64_t{1} << 31;
  const std::vector<config_edge> edges{{"row_bytes", 1, true},
                                       {"row_bytes", 0, false},
                                       {"rows_per_page", 1, true},
                                       {"rows_per_page", 0, false},
                                       {"max_keys", 1, true},
                                       {"max_keys", 0, false},
                                       {"max_rows", 0, true},
                                       {"device_pages", 0, true},
                                       {"pinned_pages", 0, true},
                                       {"device_pages", too_many_pages, false},
                                       {"pinned_pages", too_many_pages, false},
                                       {"device", -1, false},
                                       {"device", ex.device_count(), false}};
  std::vector<int> indices(edges.size());
  for (std::size_t i = 0; i < edges.size(); ++i) indices[i] = static_cast<int>(i);
  const int which = *offloadkit::testing::fixed_then_random(
      "stash.config_limits.edge", indices, rc::gen::inRange(0, static_cast<int>(edges.size())));
  const config_edge& e = edges[static_cast<std::size_t>(which)];
  RC_TAG(e.field, e.value);
  stash_config cfg;
  cfg.row_bytes = *rc::gen::inRange<std::size_t>(1, 9);
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 5);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(1, 9);
  cfg.device_pages = *rc::gen::inRange<std::size_t>(0, 4);
  cfg.pinned_pages = *rc::gen::inRange<std::size_t>(0, 4);
  cfg.max_keys = 4;
  const std::string field = e.field;
  const auto n = static_cast<std::size_t>(e.value);
  if (field == "row_bytes") cfg.row_bytes = n;
  if (field == "rows_per_page") cfg.rows_per_page = n;
  if (field == "max_keys") cfg.max_keys = n;
  if (field == "max_rows") cfg.max_rows = n;
  if (field == "device_pages") cfg.device_pages = n;
  if (field == "pinned_pages") cfg.pinned_pages = n;
  if (field == "device") cfg.device = static_cast<int>(e.value);
  stream s(ex);
  if (!e.valid) {
    std::string msg;
    try {
      (void)impl.make(ex, cfg, s);
    } catch (const out_of_range& x) {
      msg = x.what();
    }
    if (msg.find(field) == std::string::npos) {
      RC_FAIL(detail::concat("stash_config.", field, " = ", e.value,
                             " was not rejected with an out_of_range naming the field (got '", msg,
                             "')"));
    }
    return;
  }
  // A valid config at its edge: one key stashed and restored, overflowing where nothing fits.
  auto st = impl.make(ex, cfg, s);
  device_io io(ex, s, cfg.max_rows * cfg.row_bytes);
  const stash_key k{0, 0, 0};
  const std::uint64_t rows = *rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1);
  const bool fits = key_fits(impl.caps.placement, pages_for(rows, cfg.rows_per_page),
                             cfg.device_pages, cfg.pinned_pages);
  workload w;
  w.sched.vp_stages = 1;
  w.sched.layers = 1;
  w.sched.microbatches = 1;
  w.sched.steps = {{step_kind::stash, k}, {step_kind::restore, k}};
  w.rows = {{k, rows}};
  w.row_bytes = cfg.row_bytes;
  w.max_rows = cfg.max_rows;
  run_workload(*st, io, w, fits ? std::vector<stash_key>{} : std::vector<stash_key>{k}, true,
               impl.caps.page_ids, 3, &impl.caps);
  // An overflow thrown is not recorded; the restore of the key it left empty is, where the
  // profile records an unknown restore in the status word.
  const bool recorded =
      !fits &&
      (impl.caps.overflow != offloadkit::testing::stash_overflow_report::exception ||
       impl.caps.unknown_restore == offloadkit::testing::stash_unknown_restore::status_word);
  RC_ASSERT(st->status(s).ok() == !recorded);
}

/// Countdown fault injection (abseil style): fail the Nth allocation, copy, fill or launch the
/// stash issues, for N = 0, 1, 2, ... until a whole step runs without a fault. Every injected
/// fault surfaces as a typed exception; afterwards the pages are conserved and, after reset(), the
/// same stash runs the whole step correctly.
inline void prop_injected_faults(executor& ex, const stash_implementation& impl) {
  const random_workload r = gen_workload(true);
  RC_TAG(r.shape);
  const capacity_plan plan = plan_capacity(r.w, r.rows_per_page);
  const std::uint64_t dev = *rc::gen::inRange<std::uint64_t>(0, plan.peak_pages + 1);
  const stash_config cfg = config_for(r, dev, pinned_for_peak(impl, plan.peak_pages, dev));
  fault_injection_adaptor faulty(ex);
  stream s(ex);
  device_io io(ex, s, r.w.max_rows * r.w.row_bytes);
  for (std::size_t n = 0; n < 10000; ++n) {
    faulty.arm({op_kind::allocate_device, op_kind::allocate_pinned, op_kind::copy, op_kind::fill,
                op_kind::launch},
               n);
    std::unique_ptr<stash_interface> st;
    bool threw = false;
    try {
      st = impl.make(faulty, cfg, s);
      for (const schedule_step& step : r.w.sched.steps) {
        if (step.kind == step_kind::stash) {
          io.write_u64(io.rows.data(), rows_of(r.w, step.key));
          st->stash(step.key, io.src.data(), io.rows.as<std::uint64_t>(), s);
        } else {
          st->restore(step.key, io.dst.data(), io.rows_out.as<std::uint64_t>(), s);
        }
      }
    } catch (const injected_fault&) {
      threw = true;
    } catch (const out_of_memory&) {
      threw = true;
    }
    const bool fired = faulty.fired();
    faulty.disarm();
    if (threw != fired) {
      RC_FAIL(detail::concat(
          "fault number ", n,
          threw ? " was not injected but a call threw" : " was injected but nothing threw"));
    }
    if (st) {
      const std::string err = check_conservation(st->snapshot(s), cfg, impl.caps.page_ids);
      if (!err.empty()) RC_FAIL(detail::concat("after fault number ", n, ": ", err));
      st->reset(s);
      run_workload(*st, io, r.w, {}, false, impl.caps.page_ids, static_cast<std::uint32_t>(n + 1));
      RC_ASSERT(st->status(s).ok());
    }
    if (!fired) return;
  }
  RC_FAIL("the step never completed without a fault");
}

// ---- model-based ------------------------------------------------------------------------------

struct model_state {
  offloadkit::testing::stash_capabilities caps;  ///< the declared policies the model follows
  std::map<stash_key, std::uint64_t> rows;       // stashed keys
  std::map<stash_key, std::uint64_t> dev_pages, pin_pages;
  std::uint64_t free_dev = 0, free_pin = 0;
  std::uint64_t dev_total = 0, pin_total = 0;
  stash_status status;
  std::uint64_t row_bytes = 0, rows_per_page = 1, max_rows = 0;
  std::uint32_t salt = 1;
  void fail(status_code c, const stash_key& k, std::uint64_t r, std::uint64_t need) {
    if (status.ok()) status = stash_status{c, k, r, need, free_dev, free_pin};
  }
  [[nodiscard]] bool sticky() const noexcept {
    return caps.overflow == offloadkit::testing::stash_overflow_report::sticky_flag;
  }
  /// A sticky flag is up: stash() and restore() do nothing until reset() or clear_status().
  [[nodiscard]] bool stopped() const noexcept { return sticky() && !status.ok(); }
  /// stash() of a key that does not fit throws out_of_memory and records nothing.
  [[nodiscard]] bool overflow_throws() const noexcept {
    return caps.overflow == offloadkit::testing::stash_overflow_report::exception;
  }
  /// restore() of `key` throws: it holds nothing and the profile says that is an error.
  [[nodiscard]] bool restore_throws(const stash_key& key) const {
    return !stopped() && rows.count(key) == 0 &&
           caps.unknown_restore == offloadkit::testing::stash_unknown_restore::error;
  }
};

/// The stash under test, driven from two streams; it was made on a third. The harness orders the
/// caller's side as a caller must: each call's stream waits for the previous call's stream, and
/// the source and row count are written on the call's own stream without a host wait, delayed, so
/// that a stash that works on any other stream than the one it is given reads them too early.
struct model_sut {
  stash_interface* st = nullptr;
  device_io* io = nullptr;
  bool page_ids = false;
  delay_adaptor* dx = nullptr;
  stream_ref streams[2] = {};
  event* after_call = nullptr;  ///< recorded on the stream of the previous call
  int last = 0;

  /// Stream i, ordered after the previous call.
  stream_ref use(int i) {
    if (i != last) io->ex->wait(after_call->ref(), streams[i]);
    last = i;
    io->s = streams[i];
    return streams[i];
  }
  void called() { io->ex->record(after_call->ref(), streams[last]); }
};

inline stash_key gen_small_key() {
  return stash_key{*rc::gen::inRange<std::uint32_t>(0, 2), *rc::gen::inRange<std::uint32_t>(0, 2),
                   *rc::gen::inRange<std::uint32_t>(0, 2)};
}

inline void compare_with_model(const model_state& m, const model_sut& sut) {
  const stash_snapshot snap = sut.st->snapshot(sut.io->s);
  const std::string err = check_conservation(snap, sut.st->config(), sut.page_ids);
  if (!err.empty()) RC_FAIL(err);
  RC_ASSERT(snap.free.device == m.free_dev);
  RC_ASSERT(snap.free.pinned == m.free_pin);
  RC_ASSERT(snap.entries.size() == m.rows.size());
  for (const auto& e : snap.entries) {
    auto it = m.rows.find(e.key);
    RC_ASSERT(it != m.rows.end());
    RC_ASSERT(e.rows == it->second);
    RC_ASSERT(e.device_pages == m.dev_pages.at(e.key));
  }
  if (m.sticky()) {
    // One flag: whether something failed, not which key.
    RC_ASSERT(snap.status.ok() == m.status.ok());
    return;
  }
  RC_ASSERT(snap.status.code == m.status.code);
  if (!m.status.ok()) {
    RC_ASSERT(snap.status.key == m.status.key);
    RC_ASSERT(snap.status.needed == m.status.needed);
    RC_ASSERT(snap.status.free_device == m.status.free_device);
    RC_ASSERT(snap.status.free_pinned == m.status.free_pinned);
  }
}

inline int gen_model_stream() { return *rc::gen::inRange(0, 2); }

inline std::ostream& show_model_stream(std::ostream& os, int i) {
  return os << " on stream " << (i == 0 ? 'a' : 'b');
}

struct stash_command : rc::state::Command<model_state, model_sut> {
  stash_key key = gen_small_key();
  std::uint64_t rows = 0;
  int on = gen_model_stream();
  int delay_us =
      *rc::gen::weightedOneOf<int>({{1, rc::gen::just(0)}, {2, rc::gen::inRange(50, 400)}});
  stash_command() = default;
  explicit stash_command(const model_state& m)
      : rows(*rc::gen::inRange<std::uint64_t>(0, m.max_rows + 2)) {}
  /// The key does not fit and the profile says that is an exception.
  [[nodiscard]] bool throws(const model_state& m) const {
    const std::uint64_t need = (rows + m.rows_per_page - 1) / m.rows_per_page;
    return m.overflow_throws() && !m.stopped() && rows <= m.max_rows && m.rows.count(key) == 0 &&
           !key_fits(m.caps.placement, need, m.free_dev, m.free_pin);
  }
  void apply(model_state& m) const override {
    if (m.stopped() || throws(m)) return;
    const std::uint64_t need = (rows + m.rows_per_page - 1) / m.rows_per_page;
    if (rows > m.max_rows) return m.fail(status_code::rows_too_large, key, rows, 0);
    if (m.rows.count(key) != 0) return m.fail(status_code::double_stash, key, rows, need);
    if (!key_fits(m.caps.placement, need, m.free_dev, m.free_pin)) {
      return m.fail(status_code::overflow, key, rows, need);
    }
    const bool whole = m.caps.placement == offloadkit::testing::stash_placement::whole_key_per_tier;
    const std::uint64_t d = whole ? (need <= m.free_dev ? need : 0) : std::min(need, m.free_dev);
    m.free_dev -= d;
    m.free_pin -= need - d;
    m.rows[key] = rows;
    m.dev_pages[key] = d;
    m.pin_pages[key] = need - d;
  }
  void run(const model_state& m, model_sut& sut) const override {
    device_io& io = *sut.io;
    const stream_ref s = sut.use(on);
    // The source and the row count go in on the call's stream with no host wait (the staging
    // area is not touched again before the call's snapshot synchronizes).
    auto* h = io.staging.as<unsigned char>();
    for (std::size_t o = 0; o < io.bytes; ++o) h[o] = pattern_byte(pattern_code(key), m.salt, o);
    std::memcpy(h + io.bytes, &rows, sizeof rows);
    if (delay_us > 0) sut.dx->delay_next(std::chrono::microseconds(delay_us), 1, s);
    if (io.bytes > 0) io.ex->copy(io.src.data(), h, io.bytes, s);
    io.ex->copy(io.rows.data(), h + io.bytes, sizeof rows, s);
    if (throws(m)) {
      RC_ASSERT_THROWS_AS(sut.st->stash(key, io.src.data(), io.rows.as<std::uint64_t>(), s),
                          out_of_memory);
    } else {
      sut.st->stash(key, io.src.data(), io.rows.as<std::uint64_t>(), s);
    }
    sut.called();
    sut.dx->clear();
    model_state next = m;
    apply(next);
    compare_with_model(next, sut);
  }
  void show(std::ostream& os) const override {
    show_model_stream(os << "stash " << to_string(key) << " rows " << rows, on);
    if (delay_us > 0) os << " delayed " << delay_us << " us";
  }
};

struct restore_command : rc::state::Command<model_state, model_sut> {
  stash_key key = gen_small_key();
  int on = gen_model_stream();
  void apply(model_state& m) const override {
    if (m.stopped() || m.restore_throws(key)) return;
    auto it = m.rows.find(key);
    if (it == m.rows.end()) return m.fail(status_code::restore_empty, key, 0, 0);
    m.free_dev += m.dev_pages[key];
    m.free_pin += m.pin_pages[key];
    m.rows.erase(it);
    m.dev_pages.erase(key);
    m.pin_pages.erase(key);
  }
  void run(const model_state& m, model_sut& sut) const override {
    device_io& io = *sut.io;
    const stream_ref s = sut.use(on);
    io.clear(io.dst.data());
    if (m.restore_throws(key)) {
      RC_ASSERT_THROWS_AS(sut.st->restore(key, io.dst.data(), io.rows_out.as<std::uint64_t>(), s),
                          state_error);
      sut.called();
      RC_ASSERT(first_mismatch(io.read(io.dst.data()), pattern_code(key), m.salt, 0) == -1);
      compare_with_model(m, sut);
      return;
    }
    sut.st->restore(key, io.dst.data(), io.rows_out.as<std::uint64_t>(), s);
    sut.called();
    auto it = m.rows.find(key);
    const std::uint64_t rows = it == m.rows.end() || m.stopped() ? 0 : it->second;
    const auto got = io.read(io.dst.data());
    RC_ASSERT(first_mismatch(got, pattern_code(key), m.salt, rows * m.row_bytes) == -1);
    RC_ASSERT(io.read_u64(io.rows_out.data()) == rows);
    model_state next = m;
    apply(next);
    compare_with_model(next, sut);
  }
  void show(std::ostream& os) const override {
    show_model_stream(os << "restore " << to_string(key), on);
  }
};

struct reset_command : rc::state::Command<model_state, model_sut> {
  int on = gen_model_stream();
  void apply(model_state& m) const override {
    m.rows.clear();
    m.dev_pages.clear();
    m.pin_pages.clear();
    m.status = {};
    m.free_dev = m.dev_total;
    m.free_pin = m.pin_total;
  }
  void run(const model_state& m, model_sut& sut) const override {
    sut.st->reset(sut.use(on));
    sut.called();
    model_state next = m;
    apply(next);
    compare_with_model(next, sut);
  }
  void show(std::ostream& os) const override { show_model_stream(os << "reset", on); }
};

struct clear_status_command : rc::state::Command<model_state, model_sut> {
  int on = gen_model_stream();
  void apply(model_state& m) const override { m.status = {}; }
  void run(const model_state& m, model_sut& sut) const override {
    sut.st->clear_status(sut.use(on));
    sut.called();
    model_state next = m;
    apply(next);
    compare_with_model(next, sut);
  }
  void show(std::ostream& os) const override { show_model_stream(os << "clear_status", on); }
};

using model_config = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t>;

/// (row_bytes, rows_per_page, max_rows, device_pages, pinned_pages) of the model: every field
/// at its minimum and at its maximum (the others in the middle), all at their minima and all at
/// their maxima first; random ones after.
inline rc::Gen<model_config> gen_model_config() {
  const model_config mid{8, 2, 6, 3, 3}, lo{1, 1, 0, 0, 0}, hi{24, 4, 11, 5, 5};
  std::vector<model_config> fixed{lo, hi};
  auto with = [&](int field, const model_config& from) {
    model_config c = mid;
    switch (field) {
      case 0:
        std::get<0>(c) = std::get<0>(from);
        break;
      case 1:
        std::get<1>(c) = std::get<1>(from);
        break;
      case 2:
        std::get<2>(c) = std::get<2>(from);
        break;
      case 3:
        std::get<3>(c) = std::get<3>(from);
        break;
      default:
        std::get<4>(c) = std::get<4>(from);
        break;
    }
    return c;
  };
  for (int f = 0; f < 5; ++f) {
    fixed.push_back(with(f, lo));
    fixed.push_back(with(f, hi));
  }
  return offloadkit::testing::fixed_then_random(
      "stash.model.config", std::move(fixed),
      rc::gen::tuple(rc::gen::elementOf(std::vector<std::size_t>{1, 3, 8, 16, 24}),
                     rc::gen::inRange<std::size_t>(1, 5), rc::gen::inRange<std::size_t>(0, 12),
                     rc::gen::inRange<std::size_t>(0, 6), rc::gen::inRange<std::size_t>(0, 6)));
}

/// The caller's last write of a key's source and of its row count is late on the call's stream: a
/// long hold, then both writes, then stash() on that stream at once. stash() reads both in the
/// order of the stream it is given, so restore() must give back the late count and rows; a stash
/// that works on a stream of its own without waiting for the caller's reads what they held
/// before (the two counts always differ). model_based writes on the call's stream too, held back
/// by at most 400 us: it catches a stash that does not order the caller's stream at all; the hold
/// here (300 to 400 ms, drawn per case) also outlasts a bounded host wait for it shorter than that
/// (the other properties' writes, large ones on a loaded machine included, land well within it).
inline void prop_caller_writes_late(executor& ex, const stash_implementation& impl) {
  stash_config cfg;
  cfg.row_bytes = *rc::gen::element<std::size_t>(1, 8, 24, 64);
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 5);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(2, 17);
  cfg.max_keys = 1;
  // The key fits whole in one tier, whatever the placement policy.
  const std::size_t pages = (cfg.max_rows + cfg.rows_per_page - 1) / cfg.rows_per_page;
  const bool on_device = *rc::gen::arbitrary<bool>();
  cfg.device_pages = on_device ? pages : 0;
  cfg.pinned_pages = on_device ? 0 : pages;
  const std::uint64_t late_rows = *rc::gen::inRange<std::uint64_t>(1, cfg.max_rows + 1);
  const std::uint64_t early_rows =
      *rc::gen::distinctFrom(rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1), late_rows);
  const auto early_salt = *rc::gen::arbitrary<std::uint32_t>();
  const auto late_salt = *rc::gen::distinctFrom(early_salt);
  const int delay_us = *rc::gen::inRange(300000, 400000);
  const stash_key key{0, 0, 0};
  const std::uint32_t code = pattern_code(key);
  delay_adaptor dx(ex);
  stream made_on(dx), s(dx);
  device_io io(dx, s, cfg.max_rows * cfg.row_bytes);
  buffer late(dx, memory_kind::pinned, io.bytes + sizeof(std::uint64_t));
  auto* h = late.as<unsigned char>();
  for (std::size_t o = 0; o < io.bytes; ++o) h[o] = pattern_byte(code, late_salt, o);
  std::memcpy(h + io.bytes, &late_rows, sizeof late_rows);
  io.write_source(io.src.data(), code, early_salt);
  io.write_u64(io.rows.data(), early_rows);
  auto st = impl.make(dx, cfg, made_on);
  made_on.synchronize();
  // A failed check unwinds: the late writes must land before the buffers go.
  const offloadkit::testing::sync_on_exit guard(dx, {s, made_on});
  RC_LOG() << "hold of " << delay_us << " us on the caller's stream, then its last writes\n";
  dx.delay_next(std::chrono::microseconds(delay_us), 1, s);
  dx.copy(io.src.data(), h, io.bytes, s);
  dx.copy(io.rows.data(), h + io.bytes, sizeof late_rows, s);
  st->stash(key, io.src.data(), io.rows.as<std::uint64_t>(), s);
  dx.clear();
  io.clear(io.dst.data());
  st->restore(key, io.dst.data(), io.rows_out.as<std::uint64_t>(), s);
  const std::uint64_t got_rows = io.read_u64(io.rows_out.data());
  if (got_rows != late_rows) {
    RC_FAIL(offloadkit::detail::concat("restore gave ", got_rows, " rows, the late write said ",
                                       late_rows, " (the write before it ", early_rows, ")"));
  }
  const long long at =
      first_mismatch(io.read(io.dst.data()), code, late_salt, late_rows * cfg.row_bytes);
  if (at >= 0) {
    RC_FAIL(offloadkit::detail::concat("restored byte ", at, " of ", late_rows, " rows of ",
                                       cfg.row_bytes, " bytes is not the late write's"));
  }
}

/// Model-based: random stash/restore/reset/clear sequences (double stashes, empty restores and
/// overflows included) against a plain model of the freelists, page table and status word.
inline void prop_model(executor& ex, const stash_implementation& impl) {
  const model_config mc = *gen_model_config();
  stash_config cfg;
  std::tie(cfg.row_bytes, cfg.rows_per_page, cfg.max_rows, cfg.device_pages, cfg.pinned_pages) = mc;
  cfg.max_keys = 8;  // every key gen_small_key() can draw: the limit is reached, never passed
  // The stash's own CUDA work (a black box's streams) is held back too, where interposed.
  const offloadkit::testing::driver_delays own_work_delays;
  delay_adaptor dx(ex);
  stream made_on(dx), a(dx), b(dx);
  event after_call(dx);
  auto st = impl.make(dx, cfg, made_on);
  device_io io(dx, a, cfg.max_rows * cfg.row_bytes);
  made_on.synchronize();
  model_state m;
  m.caps = impl.caps;
  m.free_dev = cfg.device_pages;
  m.free_pin = cfg.pinned_pages;
  m.dev_total = cfg.device_pages;
  m.pin_total = cfg.pinned_pages;
  m.row_bytes = cfg.row_bytes;
  m.rows_per_page = cfg.rows_per_page;
  m.max_rows = cfg.max_rows;
  model_sut sut{st.get(), &io, impl.caps.page_ids, &dx, {a.ref(), b.ref()}, &after_call, 0};
  rc::state::check(
      m, sut,
      rc::state::gen::execOneOfWithArgs<stash_command, stash_command, restore_command,
                                        restore_command, clear_status_command, reset_command>());
  dx.clear();
  a.synchronize();
  b.synchronize();
}

// ---- graph capture ----------------------------------------------------------------------------

/// A captured step (two stashes, two restores) replays correctly with different row counts
/// written to the device before each replay, overflow included; the host never reads a row count.
inline void prop_graph_replay(executor& ex, const stash_implementation& impl) {
  stash_config cfg;
  cfg.row_bytes = *rc::gen::elementOf(std::vector<std::size_t>{1, 6, 16, std::size_t{2} * 64});
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 6);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(1, 30);
  const std::uint64_t per_key = pages_for(cfg.max_rows, cfg.rows_per_page);
  cfg.device_pages = *rc::gen::inRange<std::uint64_t>(0, 2 * per_key + 1);
  cfg.pinned_pages = *rc::gen::inRange<std::uint64_t>(0, 2 * per_key + 1);
  cfg.max_keys = 2;
  stream s(ex);
  auto st = impl.make(ex, cfg, s);
  RC_ASSERT(st->capturable());
  device_io a(ex, s, cfg.max_rows * cfg.row_bytes), b(ex, s, cfg.max_rows * cfg.row_bytes);
  const stash_key ka{0, 0, 0}, kb{0, 1, 0};
  ex.synchronize(s);
  ex.begin_capture(s);
  st->stash(ka, a.src.data(), a.rows.as<std::uint64_t>(), s);
  st->stash(kb, b.src.data(), b.rows.as<std::uint64_t>(), s);
  st->restore(kb, b.dst.data(), b.rows_out.as<std::uint64_t>(), s);
  st->restore(ka, a.dst.data(), a.rows_out.as<std::uint64_t>(), s);
  graph g(ex, ex.end_capture(s));
  const int replays = *rc::gen::inRange(1, 5);
  for (int k = 0; k < replays; ++k) {
    const std::uint64_t ra = *rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1);
    const std::uint64_t rb = *rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1);
    const auto salt = static_cast<std::uint32_t>(k + 1);
    a.write_u64(a.rows.data(), ra);
    b.write_u64(b.rows.data(), rb);
    a.write_source(a.src.data(), pattern_code(ka), salt);
    b.write_source(b.src.data(), pattern_code(kb), salt);
    a.clear(a.dst.data());
    b.clear(b.dst.data());
    st->clear_status(s);
    g.replay(s);
    ex.synchronize(s);
    const std::uint64_t na = pages_for(ra, cfg.rows_per_page),
                        nb = pages_for(rb, cfg.rows_per_page);
    const std::uint64_t total = cfg.device_pages + cfg.pinned_pages;
    const bool a_fits = na <= total, b_fits = a_fits ? nb <= total - na : nb <= total;
    RC_ASSERT(first_mismatch(a.read(a.dst.data()), pattern_code(ka), salt,
                             a_fits ? ra * cfg.row_bytes : 0) == -1);
    RC_ASSERT(first_mismatch(b.read(b.dst.data()), pattern_code(kb), salt,
                             b_fits ? rb * cfg.row_bytes : 0) == -1);
    const stash_snapshot snap = st->snapshot(s);
    RC_ASSERT(snap.free.device == cfg.device_pages);
    RC_ASSERT(snap.free.pinned == cfg.pinned_pages);
    if (!a_fits || !b_fits) {
      RC_ASSERT(snap.status.code == status_code::overflow);
      RC_ASSERT(snap.status.key == (a_fits ? kb : ka));
    } else {
      RC_ASSERT(snap.status.ok());
    }
  }
}

// ---- batches ------------------------------------------------------------------------------------

/// Everything a snapshot says, as text, for comparing two stashes that should agree exactly (page
/// ids only where the implementation reports them).
inline std::string describe(const stash_snapshot& snap, bool page_ids) {
  const stash_status& st = snap.status;
  std::string out =
      detail::concat("free ", snap.free.device, "+", snap.free.pinned, "; status ",
                     static_cast<std::uint32_t>(st.code), " ", to_string(st.key), " rows ", st.rows,
                     " needed ", st.needed, " free ", st.free_device, "+", st.free_pinned);
  if (page_ids) {
    out += "; free ids";
    for (std::uint32_t id : snap.free_ids) out += detail::concat(" ", id);
  }
  std::vector<entry_view> entries = snap.entries;
  std::sort(entries.begin(), entries.end(),
            [](const entry_view& a, const entry_view& b) { return a.key < b.key; });
  for (const entry_view& e : entries) {
    out += detail::concat("; ", to_string(e.key), " rows ", e.rows, " pages ", e.device_pages, "+",
                          e.pinned_pages);
    if (!page_ids) continue;
    out += " ids";
    for (std::uint32_t id : e.page_ids) out += detail::concat(" ", id);
  }
  return out;
}

/// Runs `f` and names what it threw: "nothing", "out_of_memory" or "state_error" (an overflow
/// thrown, a restore of nothing refused); anything else goes on to fail the property.
template <class F>
const char* stash_error_kind(F&& f) {
  try {
    f();
  } catch (const out_of_memory&) {
    return "out_of_memory";
  } catch (const state_error&) {
    return "state_error";
  }
  return "nothing";
}

/// Differential: stash_batch() and restore_batch() leave exactly what stash() and restore() of
/// the same items in batch order leave: the same entries (page ids included where reported), free
/// pages, sticky status word (which key failed first, with its need and the free pages it saw),
/// restored bytes and row counts. Batches are random subsets of a layer's keys in random order
/// over pools that often run out, with keys stashed twice, restored empty and rows past max_rows.
inline void prop_batch_matches_per_key(executor& ex, const stash_implementation& impl) {
  stash_config cfg;
  cfg.row_bytes = *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 40),
                                  rc::gen::element<std::size_t>(32, 128, 192));
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 9);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(0, 40);
  const std::size_t n_keys = *rc::gen::inRange<std::size_t>(1, 13);
  const std::uint64_t per_key = pages_for(cfg.max_rows, cfg.rows_per_page);
  cfg.device_pages = *rc::gen::inRange<std::uint64_t>(0, n_keys * per_key / 2 + 2);
  cfg.pinned_pages = *rc::gen::inRange<std::uint64_t>(0, n_keys * per_key / 2 + 2);
  cfg.max_keys = n_keys;
  stream s(ex);
  auto per = impl.make(ex, cfg, s);
  auto bat = impl.make(ex, cfg, s);
  const std::size_t bytes = cfg.max_rows * cfg.row_bytes;
  device_io io(ex, s, bytes);
  std::vector<stash_key> keys;
  std::vector<buffer> src, rows, dst_per, dst_bat, out_per, out_bat;
  for (std::size_t k = 0; k < n_keys; ++k) {
    keys.push_back(
        stash_key{0, static_cast<std::uint32_t>(k / 4), static_cast<std::uint32_t>(k % 4)});
    src.emplace_back(ex, memory_kind::device, bytes);
    rows.emplace_back(ex, memory_kind::device, sizeof(std::uint64_t));
    dst_per.emplace_back(ex, memory_kind::device, bytes);
    dst_bat.emplace_back(ex, memory_kind::device, bytes);
    out_per.emplace_back(ex, memory_kind::device, sizeof(std::uint64_t));
    out_bat.emplace_back(ex, memory_kind::device, sizeof(std::uint64_t));
    io.write_source(src[k].data(), pattern_code(keys[k]), 7);
  }
  const int rounds = *rc::gen::inRange(1, 7);
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::size_t> order(n_keys);
    for (std::size_t k = 0; k < n_keys; ++k) order[k] = k;
    std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(*rc::gen::inRange<std::size_t>(1, n_keys + 1));
    const bool stashing = *rc::gen::arbitrary<bool>();
    std::string what = stashing ? "stash_batch of" : "restore_batch of";
    if (stashing) {
      std::vector<stash_item> items;
      for (std::size_t k : order) {
        const std::uint64_t r = *rc::gen::weightedOneOf<std::uint64_t>(
            {{1, rc::gen::just(std::uint64_t{cfg.max_rows + 1})},
             {2, rc::gen::just(std::uint64_t{cfg.max_rows})},
             {6, rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1)}});
        io.write_u64(rows[k].data(), r);
        items.push_back(stash_item{keys[k], src[k].data(), rows[k].as<std::uint64_t>()});
        what += detail::concat(" ", to_string(keys[k]), ":", r);
      }
      // Where an overflow is an exception, a batch stops at the first item that throws, as
      // per-key calls in batch order do, and throws what that item throws.
      const char* per_threw = stash_error_kind([&] {
        for (const stash_item& it : items) per->stash(it.key, it.src, it.rows, s);
      });
      const char* bat_threw = stash_error_kind([&] { bat->stash_batch(items, s); });
      if (std::string(per_threw) != bat_threw) {
        RC_FAIL(detail::concat("round ", round, ", ", what, ": the batch threw ", bat_threw,
                               ", per-key calls in batch order threw ", per_threw));
      }
    } else {
      if (impl.caps.unknown_restore == offloadkit::testing::stash_unknown_restore::error) {
        // Restoring a key that holds nothing is an error under this profile (model_based checks
        // it): restore the held ones.
        std::set<stash_key> held;
        for (const entry_view& e : per->snapshot(s).entries) held.insert(e.key);
        order.erase(std::remove_if(order.begin(), order.end(),
                                   [&](std::size_t k) { return held.count(keys[k]) == 0; }),
                    order.end());
        if (order.empty()) continue;
      }
      std::vector<restore_item> items;
      for (std::size_t k : order) {
        io.clear(dst_per[k].data());
        io.clear(dst_bat[k].data());
        io.write_u64(out_per[k].data(), 0xDEADBEEFull);
        io.write_u64(out_bat[k].data(), 0xDEADBEEFull);
        per->restore(keys[k], dst_per[k].data(), out_per[k].as<std::uint64_t>(), s);
        items.push_back(restore_item{keys[k], dst_bat[k].data(), out_bat[k].as<std::uint64_t>()});
        what += detail::concat(" ", to_string(keys[k]));
      }
      bat->restore_batch(items, s);
      for (std::size_t k : order) {
        if (io.read(dst_per[k].data()) != io.read(dst_bat[k].data())) {
          RC_FAIL(detail::concat("round ", round, ", ", what, ": ", to_string(keys[k]),
                                 " restored other bytes than a restore() of its own"));
        }
        const std::uint64_t rp = io.read_u64(out_per[k].data()),
                            rb = io.read_u64(out_bat[k].data());
        if (rp != rb) {
          RC_FAIL(detail::concat("round ", round, ", ", what, ": ", to_string(keys[k]),
                                 " row count out ", rb, ", restore() writes ", rp));
        }
      }
    }
    const std::string want = describe(per->snapshot(s), impl.caps.page_ids);
    const stash_snapshot got_snap = bat->snapshot(s);
    const std::string got = describe(got_snap, impl.caps.page_ids);
    if (got != want) {
      RC_FAIL(detail::concat("round ", round, ", ", what, ":\n  batch:   ", got,
                             "\n  per key: ", want));
    }
    const std::string err = check_conservation(got_snap, cfg, impl.caps.page_ids);
    if (!err.empty()) RC_FAIL(detail::concat("round ", round, ", ", what, ": ", err));
  }
}

// ---- devices ------------------------------------------------------------------------------------

/// Bytes of the rows a snapshot's entries hold in the device tier: the least device memory a
/// stash holding them can have taken.
inline std::uint64_t device_tier_bytes(const stash_snapshot& snap, const stash_config& cfg) {
  std::uint64_t n = 0;
  for (const entry_view& e : snap.entries) {
    n += std::min<std::uint64_t>(e.rows, e.device_pages * cfg.rows_per_page) * cfg.row_bytes;
  }
  return n;
}

/// One stash driven through a random valid order of its keys' stashes and restores (each key
/// stashed once, restored once after it), every restore checked against the key's pattern.
struct key_driver {
  stash_interface* st;
  device_io* io;
  std::vector<std::pair<stash_key, std::uint64_t>> keys;  ///< each key and its row count
  std::uint32_t salt;
  std::size_t next = 0;           ///< keys[next..] are not stashed yet
  std::vector<std::size_t> held;  ///< keys stashed and not yet restored

  key_driver(stash_interface& stash, device_io& inputs,
             std::vector<std::pair<stash_key, std::uint64_t>> rows, std::uint32_t contents)
      : st(&stash), io(&inputs), keys(std::move(rows)), salt(contents) {}

  [[nodiscard]] bool done() const { return next == keys.size() && held.empty(); }
  /// Starts another round of the same keys with other contents.
  void restart(std::uint32_t new_salt) {
    salt = new_salt;
    next = 0;
    held.clear();
  }
  /// Stashes the next key or restores a held one, at random; `between` runs right before the
  /// stash's own call (after the harness wrote its inputs). Says what it did.
  std::string step(const std::function<void()>& between) {
    const bool stash_next = next < keys.size() && (held.empty() || *rc::gen::arbitrary<bool>());
    const int device = st->config().device;
    if (stash_next) {
      const auto& [key, rows] = keys[next];
      io->write_u64(io->rows.data(), rows);
      io->write_source(io->src.data(), pattern_code(key), salt);
      between();
      st->stash(key, io->src.data(), io->rows.as<std::uint64_t>(), io->s);
      held.push_back(next++);
      return detail::concat("stash of ", to_string(key), " (", rows, " rows) on device ", device);
    }
    const std::size_t at = *rc::gen::inRange<std::size_t>(0, held.size());
    const auto& [key, rows] = keys[held[at]];
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(at));
    io->clear(io->dst.data());
    io->write_u64(io->rows_out.data(), 0xDEADBEEFull);
    between();
    st->restore(key, io->dst.data(), io->rows_out.as<std::uint64_t>(), io->s);
    const long long bad = first_mismatch(io->read(io->dst.data()), pattern_code(key), salt,
                                         rows * st->config().row_bytes);
    if (bad >= 0) {
      RC_FAIL(detail::concat("restore of ", to_string(key), " (", rows, " rows) on device ", device,
                             ": byte ", bad, " differs"));
    }
    RC_ASSERT(io->read_u64(io->rows_out.data()) == rows);
    return detail::concat("restore of ", to_string(key), " on device ", device);
  }
};

/// A stash on a device other than the first (config.device = d >= 1), with work issued on device
/// 0 right before each of its calls: restores give back the stashed bytes, its device memory is
/// d's (d's free memory drops by at least the device-tier bytes it holds, device 0's never moves),
/// and once destroyed every device's free memory is back. Then a stash on device 0 joins it and
/// the two are driven interleaved from one thread, both right. On a GPU the figures hold within
/// two granules and the rows are large enough for a pool to show.
inline void prop_multi_device(executor& ex, const stash_implementation& impl) {
  const int devices = ex.device_count();
  if (devices < 2) RC_SUCCEED("one device: nothing to check");
  const int d = *rc::gen::inRange(1, devices);
  const bool gpu = ex.kind() == backend::cuda;
  stash_config cfg;
  cfg.row_bytes = gpu ? (std::size_t{64} << 10) * *rc::gen::inRange<std::size_t>(1, 3)
                      : *rc::gen::elementOf(std::vector<std::size_t>{1, 3, 8, 16, 40, 128});
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 5);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(1, 25);
  std::vector<std::pair<stash_key, std::uint64_t>> keys;
  std::uint64_t pages = 0;
  const auto count = *rc::gen::inRange<std::uint32_t>(1, 5);
  for (std::uint32_t k = 0; k < count; ++k) {
    const std::uint64_t rows = *rc::gen::weightedOneOf<std::uint64_t>(
        {{1, rc::gen::just(std::uint64_t{0})},
         {2, rc::gen::just(std::uint64_t{cfg.max_rows})},
         {3, rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1)}});
    keys.emplace_back(stash_key{0, k, 0}, rows);
    pages += pages_for(rows, cfg.rows_per_page);
  }
  // Room for every key at once, mostly in device pages (which are what this property is about).
  cfg.device_pages = *rc::gen::weightedOneOf<std::uint64_t>(
      {{2, rc::gen::just(pages)}, {1, rc::gen::inRange<std::uint64_t>(0, pages + 1)}});
  cfg.pinned_pages =
      pinned_for_peak(impl, pages, cfg.device_pages, *rc::gen::inRange<std::uint64_t>(0, 2));
  cfg.max_keys = keys.size();
  stash_config on_d = cfg, on_0 = cfg;
  on_d.device = d;
  on_0.device = 0;
  RC_TAG(detail::concat("device ", d));

  const std::size_t bytes = cfg.max_rows * cfg.row_bytes;
  stream sd(ex, d), s0(ex, 0);
  device_io io_d(ex, sd, bytes, d), io_0(ex, s0, bytes, 0);
  buffer busy(ex, memory_kind::device, 4096, 0);
  const offloadkit::testing::sync_on_exit guard(ex, {sd, s0});
  // Work on device 0, as the rest of a program issues it between the stash's calls.
  int busy_value = 0;
  const auto device_0_work = [&] { ex.fill(busy.data(), ++busy_value & 0xff, busy.size(), s0); };
  // One untimed round on each device first: a GPU loads the stash's kernels (and their device
  // memory) on each device at their first use there, which would read as memory a stash kept.
  for (device_io* io : {&io_0, &io_d}) {
    const stash_config& c = io == &io_d ? on_d : on_0;
    auto warm = impl.make(ex, c, io->s);
    key_driver w(*warm, *io, keys, 0);
    while (!w.done()) (void)w.step([] {});
    ex.synchronize(io->s);
  }
  ex.synchronize(s0);
  const std::vector<std::size_t> before = offloadkit::testing::free_per_device(ex);
  const std::size_t slack_d = offloadkit::testing::memory_slack(ex, d);
  const auto check_memory = [&](const std::string& after, stash_interface& st) {
    const std::string moved = offloadkit::testing::other_devices_moved(ex, before, d);
    if (!moved.empty()) RC_FAIL(detail::concat("after ", after, ": ", moved));
    const std::uint64_t held = device_tier_bytes(st.snapshot(sd), on_d);
    const std::size_t free_d = ex.device_memory(d).free;
    if (free_d + held > before[static_cast<std::size_t>(d)] + slack_d) {
      RC_FAIL(detail::concat("after ", after, ": device ", d, " has ", free_d, " bytes free of ",
                             before[static_cast<std::size_t>(d)],
                             " before the stash, yet it holds ", held,
                             " bytes of rows in device pages"));
    }
  };

  auto on_device = impl.make(ex, on_d, sd);
  RC_ASSERT(on_device->config().device == d);
  check_memory("making the stash", *on_device);
  key_driver b(*on_device, io_d, keys, 1);
  while (!b.done()) check_memory(b.step(device_0_work), *on_device);
  RC_ASSERT(on_device->status(sd).ok());

  // A stash on device 0 beside it, the two driven interleaved.
  auto on_first = impl.make(ex, on_0, s0);
  key_driver a(*on_first, io_0, keys, 2);
  b.restart(3);
  while (!a.done() || !b.done()) {
    key_driver& next = a.done() ? b : b.done() ? a : *rc::gen::arbitrary<bool>() ? a : b;
    (void)next.step(device_0_work);
  }
  for (auto* st : {on_first.get(), on_device.get()}) {
    const stream_ref s = st == on_device.get() ? sd.ref() : s0.ref();
    const std::string err = check_conservation(st->snapshot(s), st->config(), impl.caps.page_ids);
    if (!err.empty()) RC_FAIL(detail::concat("stash on device ", st->config().device, ": ", err));
    RC_ASSERT(st->status(s).ok());
  }
  on_first.reset();
  on_device.reset();
  ex.synchronize(s0);
  for (int dev = 0; dev < devices; ++dev) {
    const auto i = static_cast<std::size_t>(dev);
    if (!offloadkit::testing::free_memory_settles_near(
            ex, dev, before[i], offloadkit::testing::memory_slack(ex, dev))) {
      RC_FAIL(detail::concat("with both stashes gone, device ", dev, " has ",
                             ex.device_memory(dev).free, " bytes free, ", before[i], " before"));
    }
  }
}

// ---- codecs -------------------------------------------------------------------------------------

/// The key codecs the codec properties check: the library's by default (builtin_codecs()); a
/// planted test substitutes broken ones.
struct key_codecs {
  std::uint32_t (*encode)(const stash_key&) = nullptr;
  stash_key (*decode)(std::uint32_t) noexcept = nullptr;
  std::uint64_t (*legacy_encode)(const stash_key&) noexcept = nullptr;
  stash_key (*legacy_decode)(std::uint64_t) noexcept = nullptr;
  bool (*legacy_representable)(const stash_key&) noexcept = nullptr;
};

inline key_codecs builtin_codecs() {
  key_codecs c;
  c.encode = &encode_key;
  c.decode = &decode_key;
  c.legacy_encode = &stash::legacy_encode;
  c.legacy_decode = &stash::legacy_decode;
  c.legacy_representable = &stash::legacy_representable;
  return c;
}

/// The fixed-width codec round-trips every key in range and distinct keys get distinct codes.
inline void prop_codec_injective(const key_codecs& codec) {
  const stash_key a{*rc::gen::inRange<std::uint32_t>(0, key_limits::vp),
                    *rc::gen::inRange<std::uint32_t>(0, key_limits::layer),
                    *rc::gen::inRange<std::uint32_t>(0, key_limits::microbatch)};
  const stash_key b{*rc::gen::inRange<std::uint32_t>(0, key_limits::vp),
                    *rc::gen::inRange<std::uint32_t>(0, key_limits::layer),
                    *rc::gen::inRange<std::uint32_t>(0, key_limits::microbatch)};
  RC_ASSERT(codec.decode(codec.encode(a)) == a);
  RC_ASSERT((codec.encode(a) == codec.encode(b)) == (a == b));
}

/// The legacy codec round-trips while layer and microbatch stay below 1000; this holds and is the
/// range third-party code using it must stay in.
inline void prop_legacy_in_range(const key_codecs& codec) {
  const stash_key a{*rc::gen::inRange<std::uint32_t>(0, key_limits::vp),
                    *rc::gen::inRange<std::uint32_t>(0, 1000),
                    *rc::gen::inRange<std::uint32_t>(0, 1000)};
  RC_ASSERT(codec.legacy_decode(codec.legacy_encode(a)) == a);
  RC_ASSERT(codec.legacy_representable(a));
}

/// What legacy_representable() claims agrees with the decode round trip over the whole key
/// range, layer or microbatch at 1000 and above included: a key it calls representable decodes
/// back to itself and one it does not call representable does not. The edges around 1000 and at
/// the key limits are the first cases of every run.
inline void prop_legacy_claim_agrees(const key_codecs& codec) {
  std::vector<key_fields> fixed;
  for (std::uint32_t vp : {0u, key_limits::vp - 1}) {
    for (std::uint32_t layer : {0u, 999u, 1000u, 1001u, key_limits::layer - 1}) {
      for (std::uint32_t mb : {0u, 999u, 1000u, key_limits::microbatch - 1})
        fixed.emplace_back(vp, layer, mb);
    }
  }
  auto field = [](std::uint32_t limit) {
    return rc::gen::weightedOneOf<std::uint32_t>({{1, rc::gen::inRange<std::uint32_t>(995, 1005)},
                                                  {2, rc::gen::inRange<std::uint32_t>(0, limit)}});
  };
  const key_fields f = *offloadkit::testing::fixed_then_random(
      "stash.legacy_claim.key", std::move(fixed),
      rc::gen::tuple(rc::gen::inRange<std::uint32_t>(0, key_limits::vp), field(key_limits::layer),
                     field(key_limits::microbatch)));
  const stash_key k{std::get<0>(f), std::get<1>(f), std::get<2>(f)};
  const bool round_trips = codec.legacy_decode(codec.legacy_encode(k)) == k;
  const bool claimed = codec.legacy_representable(k);
  if (claimed != round_trips) {
    RC_FAIL(detail::concat("legacy_representable", to_string(k), " says ", claimed,
                           " but the code ", codec.legacy_encode(k), " decodes to ",
                           to_string(codec.legacy_decode(codec.legacy_encode(k)))));
  }
}

/// "The legacy codec is collision-free over the key ranges" — false. Expected to FAIL; the
/// counterexample (a key whose code decodes to another key) is left in *found.
inline check_case legacy_collision_search(
    const std::shared_ptr<std::pair<stash_key, stash_key>>& found) {
  check_case c;
  c.feature = "stash";
  c.implementation = "legacy_codec";
  c.name = "legacy_codec_is_injective (expected to fail)";
  c.default_cases = 1000;
  c.property = [found](executor&) {
    const stash_key a{*rc::gen::inRange<std::uint32_t>(0, 4),
                      *rc::gen::inRange<std::uint32_t>(0, key_limits::layer),
                      *rc::gen::inRange<std::uint32_t>(0, key_limits::microbatch)};
    const stash_key b = legacy_decode(legacy_encode(a));
    if (b != a) *found = {a, b};
    RC_ASSERT(b == a);
  };
  return c;
}

}  // namespace offloadkit::stash::testing

namespace offloadkit::testing {

/// The battery for one implementation: the properties its capabilities and executor support
/// call for, named after it in the results.
std::vector<check_case> stash_battery(const stash_implementation& impl);

/// Key-codec properties (no implementation involved), of the library's codecs or of `codecs`.
std::vector<check_case> stash_codec_checks();
std::vector<check_case> stash_codec_checks(const stash::testing::key_codecs& codecs);

/// The built-in stashes as descriptors, with their true capabilities: the eager reference
/// (synchronizes with the host, keeps no page ids) and the paged optimized stash (both).
stash_implementation reference_stash_implementation();
stash_implementation optimized_stash_implementation();
std::vector<stash_implementation> builtin_stash_implementations();

/// Every paged-stash case: the codecs, and the battery of every built-in implementation.
std::vector<check_case> stash_checks();

}  // namespace offloadkit::testing
