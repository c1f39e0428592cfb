// Key and config fields at their limits: the last valid value works, the first invalid one is a
// typed error that names the field.
#include "stash_properties.hpp"

namespace offloadkit::stash::testing {

namespace {

/// The limits of a key's fields (vp, layer, microbatch).
using key_space = std::array<std::uint32_t, 3>;

/// The key space a stash declares.
key_space declared_key_space(const stash_implementation& impl) {
  return {impl.caps.vp_limit, impl.caps.layer_limit, impl.caps.microbatch_limit};
}

/// offloadkit's fixed-width codec's key space.
key_space codec_key_space() { return {key_limits::vp, key_limits::layer, key_limits::microbatch}; }

/// Every corner of the key ranges: each field at its minimum (0) or its maximum (limit - 1).
std::vector<key_fields> corner_keys(const key_space& limits) {
  std::vector<key_fields> out;
  out.reserve(8);
  for (int i = 0; i < 8; ++i) {
    out.emplace_back((i & 1) != 0 ? limits[0] - 1 : 0, (i & 2) != 0 ? limits[1] - 1 : 0,
                     (i & 4) != 0 ? limits[2] - 1 : 0);
  }
  return out;
}

/// A key in range: the corners first, then fields at either end or anywhere between.
rc::Gen<key_fields> gen_boundary_key(const key_space& limits) {
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
rc::Gen<std::pair<int, std::uint64_t>> gen_past_limit(const key_space& limits) {
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

}  // namespace

/// Keys at the corners of the key space the stash declares round-trip through the stash, and
/// those of offloadkit's codec through make_key and the codec; keys past a limit throw
/// out_of_range naming the field, the value and the limit, from make_key and from stash(), which
/// stays usable afterwards; more distinct keys than max_keys is a typed error. The corners and
/// the first values past each limit are the first cases of every run.
void prop_key_limits(executor& ex, const stash_implementation& impl) {
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
  std::tie(cfg.device_pages, cfg.pinned_pages) = tiers_for(impl.caps, 3, 1);
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

namespace {

/// A config with one field at the edge of its valid range.
struct config_edge {
  const char* field;   ///< the field check_config() names
  std::int64_t value;  ///< its value; for `device`, -1 or one past the executor's last device
  bool valid;          ///< whether the config is usable
};

/// What a call refused for a bad config must leave: an out_of_range naming the field, and
/// nothing written to the destination or the row count. Fails the property otherwise.
void expect_refused(const std::string& what, const std::string& field, std::int64_t value,
                    const std::function<void()>& call) {
  std::string msg;
  bool threw = false;
  try {
    call();
  } catch (const out_of_range& x) {
    threw = true;
    msg = x.what();
  }
  if (!threw || msg.find(field) == std::string::npos) {
    RC_FAIL(detail::concat("profile says a bad config is reported at first use, but ", what,
                           " with stash_config.", field, " = ", value,
                           threw ? " threw an out_of_range not naming the field ('" + msg + "')"
                                 : " was not refused with an out_of_range"));
  }
}

/// A bad config under first-use validation: creation accepts it; the first stash() or restore()
/// (drawn) and every later one are refused with out_of_range naming the field and write nothing
/// (the destination keeps its sentinel, the row count its marker); the object is destroyed.
void check_refused_at_first_use(executor& ex, const stash_implementation& impl,
                                const stash_config& cfg, const std::string& field,
                                std::int64_t value, stream_ref s) {
  std::unique_ptr<stash_interface> st;
  try {
    st = impl.make(ex, cfg, s);
  } catch (const std::exception& x) {
    RC_FAIL(
        detail::concat("profile says config is validated at first use, but creating a stash "
                       "with stash_config.",
                       field, " = ", value, " threw: ", x.what()));
  }
  // Buffers of a usable size whatever the config says, on a device the executor has.
  const std::size_t bytes = 64;
  device_io io(ex, s, bytes);
  io.write_source(io.src.data(), pattern_code(stash_key{0, 0, 0}), 5);
  io.write_u64(io.rows.data(), 1);
  const std::uint64_t marker = 0xDEADBEEFull;
  auto stash_call = [&](const char* which) {
    expect_refused(detail::concat(which, " stash()"), field, value, [&] {
      st->stash(stash_key{0, 0, 0}, io.src.data(), io.rows.as<std::uint64_t>(), s);
    });
  };
  auto restore_call = [&](const char* which) {
    io.clear(io.dst.data());
    io.write_u64(io.rows_out.data(), marker);
    expect_refused(detail::concat(which, " restore()"), field, value, [&] {
      st->restore(stash_key{0, 0, 0}, io.dst.data(), io.rows_out.as<std::uint64_t>(), s);
    });
    const long long at = first_mismatch(io.read(io.dst.data()), 0, 0, 0);
    const std::uint64_t rows_out = io.read_u64(io.rows_out.data());
    if (at >= 0 || rows_out != marker) {
      RC_FAIL(detail::concat(which, " restore(), refused for stash_config.", field, " = ", value,
                             ", wrote ",
                             at >= 0 ? detail::concat("destination byte ", at)
                                     : detail::concat("the row count ", rows_out)));
    }
  };
  if (*rc::gen::arbitrary<bool>()) {
    stash_call("the first");
    restore_call("a later");
  } else {
    restore_call("the first");
    stash_call("a later");
  }
  stash_call("a later");
  restore_call("a later");
  ex.synchronize(s);
  st.reset();  // a stash refused for its config is destroyed like any other
}

}  // namespace

/// Every config field at its last valid and first invalid value: row_bytes, rows_per_page and
/// max_keys at 1 and 0, max_rows and both tiers at 0, the two tiers together at 2^31 pages (page
/// ids are 32-bit on the device), device at -1 and at the executor's device count; for a
/// single-tier stash, the tier it lacks at 1 page. A bad config is refused when the profile says:
/// by creation, or by the first stash() or restore() and every later one, which write nothing.
/// The fixed cases come first in every run; random ones after.
void prop_config_limits(executor& ex, const stash_implementation& impl) {
  const std::int64_t too_many_pages = std::int64_t{1} << 31;
  std::vector<config_edge> edges{{"row_bytes", 1, true},
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
  if (impl.caps.single_tier()) {
    // The tier it lacks: one page there is a bad config.
    edges.push_back({impl.caps.has_tier(offloadkit::testing::stash_tier::device) ? "pinned_pages"
                                                                                 : "device_pages",
                     1, false});
  }
  // Each edge, with a key of max_rows rows (the one most likely to overflow a tier at its edge),
  // then random edges and row counts.
  std::vector<std::pair<int, bool>> fixed(edges.size());
  for (std::size_t i = 0; i < edges.size(); ++i) fixed[i] = {static_cast<int>(i), true};
  const auto [which, full_key] = *offloadkit::testing::fixed_then_random(
      "stash.config_limits.edge", fixed,
      rc::gen::pair(rc::gen::inRange(0, static_cast<int>(edges.size())),
                    rc::gen::arbitrary<bool>()));
  const config_edge& e = edges[static_cast<std::size_t>(which)];
  RC_TAG(e.field, e.value);
  stash_config cfg;
  cfg.row_bytes = *rc::gen::inRange<std::size_t>(1, 9);
  cfg.rows_per_page = *rc::gen::inRange<std::size_t>(1, 5);
  cfg.max_rows = *rc::gen::inRange<std::size_t>(1, 9);
  std::tie(cfg.device_pages, cfg.pinned_pages) = tiers_for(
      impl.caps, *rc::gen::inRange<std::size_t>(0, 4), *rc::gen::inRange<std::size_t>(0, 4));
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
  if (!e.valid && impl.caps.validation == offloadkit::testing::stash_config_validation::first_use) {
    check_refused_at_first_use(ex, impl, cfg, field, e.value, s);
    return;
  }
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
  const std::uint64_t rows =
      full_key ? cfg.max_rows : *rc::gen::inRange<std::uint64_t>(0, cfg.max_rows + 1);
  const bool fits =
      key_fits(impl.caps, pages_for(rows, cfg.rows_per_page), cfg.device_pages, cfg.pinned_pages);
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

}  // namespace offloadkit::stash::testing
