// Schedule generators (1F1B, interleaved 1F1B, random valid) and the validator.
#include "offloadkit/stash/schedule.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "offloadkit/error.hpp"

namespace offloadkit::stash {
namespace {

void forward_pass(schedule& s, std::uint32_t vp, std::uint32_t mb) {
  for (std::uint32_t l = 0; l < s.layers; ++l) s.steps.push_back({step_kind::stash, {vp, l, mb}});
}

void backward_pass(schedule& s, std::uint32_t vp, std::uint32_t mb) {
  for (std::uint32_t l = s.layers; l-- > 0;) s.steps.push_back({step_kind::restore, {vp, l, mb}});
}

void check_shape(std::uint32_t vp_stages, std::uint32_t layers, std::uint32_t microbatches) {
  using lim = schedule_limits;
  OFFLOADKIT_EXPECTS(vp_stages >= 1 && vp_stages <= lim::vp_stages, out_of_range,
                     "vp_stages = ", vp_stages, " is outside [1, ", lim::vp_stages, "]");
  OFFLOADKIT_EXPECTS(layers >= 1 && layers <= lim::layers, out_of_range, "layers = ", layers,
                     " is outside [1, ", lim::layers, "]");
  OFFLOADKIT_EXPECTS(microbatches >= 1 && microbatches <= lim::microbatches, out_of_range,
                     "microbatches = ", microbatches, " is outside [1, ", lim::microbatches, "]");
  const std::uint64_t keys = std::uint64_t{vp_stages} * layers * microbatches;
  OFFLOADKIT_EXPECTS(keys <= lim::keys, out_of_range, "vp_stages x layers x microbatches = ", keys,
                     " exceeds ", lim::keys, " keys");
}

std::string step_where(std::size_t i) { return detail::concat("/steps/", i); }

}  // namespace

std::uint64_t rows_of(const workload& w, const stash_key& k) {
  for (const auto& kr : w.rows) {
    if (kr.key == k) return kr.rows;
  }
  OFFLOADKIT_FAIL(out_of_range, "workload has no row count for key ", to_string(k));
}

std::uint64_t row_bytes_of(const workload& w, std::uint32_t layer) {
  return w.layer_row_bytes.empty() ? w.row_bytes : w.layer_row_bytes.at(layer);
}

std::vector<std::uint64_t> dense_rows(const workload& w) {
  const schedule& s = w.sched;
  std::vector<std::uint64_t> rows(key_count(s), 0);
  std::vector<bool> seen(rows.size(), false);
  for (std::size_t i = 0; i < w.rows.size(); ++i) {
    const stash_key& k = w.rows[i].key;
    auto where = [i] { return detail::concat("/rows/", i); };
    if (k.vp >= s.vp_stages || k.layer >= s.layers || k.microbatch >= s.microbatches) {
      throw schedule_error(
          where(),
          detail::concat("the row count of key ", to_string(k), " is outside the shape vp < ",
                         s.vp_stages, ", layer < ", s.layers, ", microbatch < ", s.microbatches));
    }
    const std::size_t ki = key_index(s, k);
    if (seen[ki]) {
      throw schedule_error(where(),
                           detail::concat("key ", to_string(k), " has a second row count"));
    }
    seen[ki] = true;
    rows[ki] = w.rows[i].rows;
  }
  for (std::size_t ki = 0; ki < seen.size(); ++ki) {
    if (!seen[ki]) {
      const std::size_t mb = ki % s.microbatches, vl = ki / s.microbatches;
      const stash_key k{static_cast<std::uint32_t>(vl / s.layers),
                        static_cast<std::uint32_t>(vl % s.layers), static_cast<std::uint32_t>(mb)};
      throw schedule_error("/rows", detail::concat("key ", to_string(k), " has no row count"));
    }
  }
  return rows;
}

std::vector<stash_key> forward_order(std::uint32_t vp_stages, std::uint32_t layers,
                                     std::uint32_t microbatch) {
  std::vector<stash_key> out;
  out.reserve(std::size_t{vp_stages} * layers);
  for (std::uint32_t v = 0; v < vp_stages; ++v) {
    for (std::uint32_t l = 0; l < layers; ++l) out.push_back({v, l, microbatch});
  }
  return out;
}

schedule one_f_one_b(std::uint32_t pipeline_size, std::uint32_t rank, std::uint32_t microbatches,
                     std::uint32_t layers) {
  OFFLOADKIT_EXPECTS(pipeline_size >= 1, out_of_range, "pipeline_size = ", pipeline_size,
                     " is outside [1, inf)");
  OFFLOADKIT_EXPECTS(rank < pipeline_size, out_of_range, "rank = ", rank, " is outside [0, ",
                     pipeline_size, ")");
  check_shape(1, layers, microbatches);
  schedule s;
  s.vp_stages = 1;
  s.layers = layers;
  s.microbatches = microbatches;
  const std::uint32_t warmup = std::min(pipeline_size - rank - 1, microbatches);
  const std::uint32_t steady = microbatches - warmup;
  for (std::uint32_t i = 0; i < warmup; ++i) forward_pass(s, 0, i);
  for (std::uint32_t i = 0; i < steady; ++i) {
    forward_pass(s, 0, warmup + i);
    backward_pass(s, 0, i);
  }
  for (std::uint32_t i = steady; i < microbatches; ++i) backward_pass(s, 0, i);
  return s;
}

schedule interleaved_one_f_one_b(std::uint32_t pipeline_size, std::uint32_t rank,
                                 std::uint32_t vp_stages, std::uint32_t microbatches,
                                 std::uint32_t layers) {
  OFFLOADKIT_EXPECTS(pipeline_size >= 1, out_of_range, "pipeline_size = ", pipeline_size,
                     " is outside [1, inf)");
  OFFLOADKIT_EXPECTS(rank < pipeline_size, out_of_range, "rank = ", rank, " is outside [0, ",
                     pipeline_size, ")");
  check_shape(vp_stages, layers, microbatches);
  OFFLOADKIT_EXPECTS(
      microbatches % pipeline_size == 0, out_of_range, "microbatches = ", microbatches,
      " must be a multiple of pipeline_size = ", pipeline_size, " for the interleaved schedule");
  schedule s;
  s.vp_stages = vp_stages;
  s.layers = layers;
  s.microbatches = microbatches;
  const std::uint64_t p = pipeline_size, v = vp_stages, total = std::uint64_t{microbatches} * v;
  std::uint64_t warmup = (p - rank - 1) * 2 + (v - 1) * p;
  if (microbatches == pipeline_size) warmup = total;
  warmup = std::min(warmup, total);
  auto mb_of = [&](std::uint64_t k) {
    return static_cast<std::uint32_t>((k / (p * v)) * p + k % p);
  };
  auto fwd_chunk = [&](std::uint64_t k) { return static_cast<std::uint32_t>((k % (p * v)) / p); };
  auto bwd_chunk = [&](std::uint64_t k) {
    return static_cast<std::uint32_t>(v - 1 - (k % (p * v)) / p);
  };
  for (std::uint64_t k = 0; k < warmup; ++k) forward_pass(s, fwd_chunk(k), mb_of(k));
  const std::uint64_t steady = total - warmup;
  for (std::uint64_t i = 0; i < steady; ++i) {
    forward_pass(s, fwd_chunk(warmup + i), mb_of(warmup + i));
    backward_pass(s, bwd_chunk(i), mb_of(i));
  }
  for (std::uint64_t i = steady; i < total; ++i) backward_pass(s, bwd_chunk(i), mb_of(i));
  return s;
}

schedule random_schedule(std::uint32_t vp_stages, std::uint32_t layers, std::uint32_t microbatches,
                         std::mt19937_64& rng) {
  check_shape(vp_stages, layers, microbatches);
  schedule s;
  s.vp_stages = vp_stages;
  s.layers = layers;
  s.microbatches = microbatches;
  const std::size_t per_mb = std::size_t{2} * vp_stages * layers;
  std::vector<std::size_t> done(microbatches, 0);
  std::size_t remaining = per_mb * microbatches;
  s.steps.reserve(remaining);
  while (remaining > 0) {
    // Picking a microbatch with probability proportional to its remaining operations draws a
    // uniformly random interleaving.
    std::size_t pick = std::uniform_int_distribution<std::size_t>(0, remaining - 1)(rng);
    std::uint32_t mb = 0;
    while (pick >= per_mb - done[mb]) {
      pick -= per_mb - done[mb];
      ++mb;
    }
    const std::size_t i = done[mb]++;
    const std::size_t half = per_mb / 2;
    if (i < half) {
      s.steps.push_back(
          {step_kind::stash,
           {static_cast<std::uint32_t>(i / layers), static_cast<std::uint32_t>(i % layers), mb}});
    } else {
      const std::size_t j = per_mb - 1 - i;  // reverse forward index
      s.steps.push_back(
          {step_kind::restore,
           {static_cast<std::uint32_t>(j / layers), static_cast<std::uint32_t>(j % layers), mb}});
    }
    --remaining;
  }
  return s;
}

std::optional<schedule_error> validate(const schedule& s) {
  using lim = schedule_limits;
  if (s.vp_stages == 0 || s.layers == 0 || s.microbatches == 0 || s.vp_stages > lim::vp_stages ||
      s.layers > lim::layers || s.microbatches > lim::microbatches) {
    return schedule_error{
        "/pipeline",
        detail::concat("shape virtual_stages = ", s.vp_stages, ", layers = ", s.layers,
                       ", microbatches = ", s.microbatches, " is outside [1, ", lim::vp_stages,
                       "] x [1, ", lim::layers, "] x [1, ", lim::microbatches, "]")};
  }
  if (key_count(s) > lim::keys) {
    return schedule_error{"/pipeline",
                          detail::concat("virtual_stages x layers x microbatches = ", key_count(s),
                                         " exceeds ", lim::keys, " keys")};
  }
  const std::size_t per_mb = std::size_t{s.vp_stages} * s.layers;
  auto at = [](std::size_t i, std::string reason) {
    return schedule_error{step_where(i), std::move(reason), i};
  };
  auto key_at = [&](std::size_t pos, std::uint32_t mb) {
    return stash_key{static_cast<std::uint32_t>(pos / s.layers),
                     static_cast<std::uint32_t>(pos % s.layers), mb};
  };
  // Per microbatch: how many keys have been stashed (in forward order) and restored (in reverse).
  // Keys of one microbatch are stashed in (vp, layer) order and restored in the reverse order, so
  // these two counters say exactly which keys are live.
  std::vector<std::size_t> stashed(s.microbatches, 0), restored(s.microbatches, 0);
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const schedule_step& st = s.steps[i];
    const stash_key& k = st.key;
    if (k.vp >= s.vp_stages || k.layer >= s.layers || k.microbatch >= s.microbatches) {
      return at(i,
                detail::concat(to_string(st), " is outside the schedule's shape vp < ", s.vp_stages,
                               ", layer < ", s.layers, ", microbatch < ", s.microbatches));
    }
    const std::size_t idx = std::size_t{k.vp} * s.layers + k.layer;
    const std::size_t f = stashed[k.microbatch];
    const std::size_t b = restored[k.microbatch];
    if (st.kind == step_kind::stash) {
      if (idx < f) {
        return at(
            i, detail::concat("key ", to_string(k), " was already stashed: a second stash of it"));
      }
      if (idx != f) {
        return at(i,
                  detail::concat(to_string(st), " is out of forward order; expected the stash of ",
                                 to_string(key_at(f, k.microbatch)), " first"));
      }
      ++stashed[k.microbatch];
    } else {
      const std::size_t expect = per_mb - 1 - b;
      if (b >= per_mb || idx > expect) {
        return at(i, detail::concat("key ", to_string(k),
                                    " was already restored: a second restore of it"));
      }
      if (f <= idx) {
        return at(i, detail::concat("key ", to_string(k), " is restored before it was stashed"));
      }
      if (f != per_mb) {
        return at(i, detail::concat("key ", to_string(k),
                                    " is restored before the microbatch's forward finished; "
                                    "expected the stash of ",
                                    to_string(key_at(f, k.microbatch)), " first"));
      }
      if (idx != expect) {
        return at(i, detail::concat(to_string(st),
                                    " is out of backward (reverse) order; expected the restore of ",
                                    to_string(key_at(expect, k.microbatch)), " first"));
      }
      ++restored[k.microbatch];
    }
  }
  for (std::uint32_t mb = 0; mb < s.microbatches; ++mb) {
    if (stashed[mb] != per_mb || restored[mb] != per_mb) {
      const bool unstashed = stashed[mb] != per_mb;
      const stash_key k = key_at(unstashed ? stashed[mb] : per_mb - 1 - restored[mb], mb);
      return schedule_error{"/steps",
                            detail::concat("key ", to_string(k),
                                           unstashed ? " is never stashed" : " is never restored",
                                           " (every key must be stashed once and restored once)"),
                            s.steps.size()};
    }
  }
  return std::nullopt;
}

void validate_or_throw(const schedule& s) {
  if (auto e = validate(s)) throw *e;
}

void validate_workload(const workload& w) {
  using lim = schedule_limits;
  validate_or_throw(w.sched);
  if (w.row_bytes < 1 || w.row_bytes > lim::row_bytes) {
    throw schedule_error("/row_bytes",
                         detail::concat(w.row_bytes, " is outside [1, ", lim::row_bytes, "]"));
  }
  if (!w.layer_row_bytes.empty()) {
    if (w.layer_row_bytes.size() != w.sched.layers) {
      throw schedule_error(
          "/row_bytes", detail::concat("has ", w.layer_row_bytes.size(),
                                       " entries; expected one per layer (", w.sched.layers, ")"));
    }
    for (std::size_t l = 0; l < w.layer_row_bytes.size(); ++l) {
      if (w.layer_row_bytes[l] < 1 || w.layer_row_bytes[l] > w.row_bytes) {
        throw schedule_error(detail::concat("/row_bytes/", l),
                             detail::concat(w.layer_row_bytes[l], " is outside [1, ", w.row_bytes,
                                            "] (the widest row)"));
      }
    }
  }
  if (w.max_rows > lim::max_rows) {
    throw schedule_error("/max_rows",
                         detail::concat(w.max_rows, " is outside [0, ", lim::max_rows, "]"));
  }
  (void)dense_rows(w);  // one row count per key of the shape
  for (std::size_t i = 0; i < w.rows.size(); ++i) {
    if (w.rows[i].rows > w.max_rows) {
      throw schedule_error(detail::concat("/rows/", i),
                           detail::concat("key ", to_string(w.rows[i].key), " has ", w.rows[i].rows,
                                          " rows, outside [0, max_rows = ", w.max_rows, "]"));
    }
  }
}

std::string to_string(const schedule_step& st) {
  return detail::concat(st.kind == step_kind::stash ? "stash " : "restore ", to_string(st.key));
}

}  // namespace offloadkit::stash
