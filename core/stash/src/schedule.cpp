// Schedule generators (1F1B, interleaved 1F1B, random valid) and the validator.
#include "offloadkit/stash/schedule.hpp"

#include <algorithm>
#include <cstdint>
#include <map>

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
  OFFLOADKIT_EXPECTS(vp_stages >= 1 && vp_stages <= key_limits::vp, out_of_range,
                     "vp_stages = ", vp_stages, " is outside [1, ", key_limits::vp, "]");
  OFFLOADKIT_EXPECTS(layers >= 1 && layers <= key_limits::layer, out_of_range, "layers = ", layers,
                     " is outside [1, ", key_limits::layer, "]");
  OFFLOADKIT_EXPECTS(microbatches >= 1 && microbatches <= key_limits::microbatch, out_of_range,
                     "microbatches = ", microbatches, " is outside [1, ", key_limits::microbatch,
                     "]");
}

}  // namespace

std::uint64_t rows_of(const workload& w, const stash_key& k) {
  for (const auto& kr : w.rows) {
    if (kr.key == k) return kr.rows;
  }
  OFFLOADKIT_FAIL(out_of_range, "workload has no row count for key ", to_string(k));
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
  if (s.vp_stages == 0 || s.layers == 0 || s.microbatches == 0 || s.vp_stages > key_limits::vp ||
      s.layers > key_limits::layer || s.microbatches > key_limits::microbatch) {
    return schedule_error{
        0, detail::concat("shape vp_stages = ", s.vp_stages, ", layers = ", s.layers,
                          ", microbatches = ", s.microbatches, " is outside [1, ", key_limits::vp,
                          "] x [1, ", key_limits::layer, "] x [1, ", key_limits::microbatch, "]")};
  }
  const std::size_t per_mb = std::size_t{s.vp_stages} * s.layers;
  // Per microbatch: how many keys have been stashed (in forward order) and restored (in reverse).
  std::vector<std::size_t> stashed(s.microbatches, 0), restored(s.microbatches, 0);
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const schedule_step& st = s.steps[i];
    const stash_key& k = st.key;
    if (k.vp >= s.vp_stages || k.layer >= s.layers || k.microbatch >= s.microbatches) {
      return schedule_error{
          i,
          detail::concat("step ", i, ": ", to_string(st), " is outside the schedule's shape vp < ",
                         s.vp_stages, ", layer < ", s.layers, ", microbatch < ", s.microbatches)};
    }
    const std::size_t idx = std::size_t{k.vp} * s.layers + k.layer;
    std::size_t& f = stashed[k.microbatch];
    std::size_t& b = restored[k.microbatch];
    if (st.kind == step_kind::stash) {
      if (idx < f) {
        return schedule_error{i, detail::concat("step ", i, ": ", to_string(st),
                                                " stashes a key that was already stashed")};
      }
      if (idx != f) {
        const stash_key want{static_cast<std::uint32_t>(f / s.layers),
                             static_cast<std::uint32_t>(f % s.layers), k.microbatch};
        return schedule_error{i, detail::concat("step ", i, ": ", to_string(st),
                                                " is out of forward order; expected the stash of ",
                                                to_string(want), " first")};
      }
      ++f;
    } else {
      const std::size_t expect = per_mb - 1 - b;
      if (b >= per_mb || idx > expect) {
        return schedule_error{i, detail::concat("step ", i, ": ", to_string(st),
                                                " restores a key that was already restored")};
      }
      if (f <= idx) {
        return schedule_error{i, detail::concat("step ", i, ": ", to_string(st),
                                                " restores a key before it was stashed")};
      }
      if (idx != expect || f != per_mb) {
        const stash_key want{static_cast<std::uint32_t>(expect / s.layers),
                             static_cast<std::uint32_t>(expect % s.layers), k.microbatch};
        return schedule_error{
            i,
            detail::concat("step ", i, ": ", to_string(st),
                           f != per_mb ? " restores before the microbatch's forward finished"
                                       : " is out of backward (reverse) order",
                           "; expected ", f != per_mb ? "the remaining stashes" : "the restore of ",
                           f != per_mb ? std::string{} : to_string(want), " first")};
      }
      ++b;
    }
  }
  for (std::uint32_t mb = 0; mb < s.microbatches; ++mb) {
    if (stashed[mb] != per_mb || restored[mb] != per_mb) {
      return schedule_error{s.steps.size(),
                            detail::concat("microbatch ", mb, " ends with ", stashed[mb], " of ",
                                           per_mb, " keys stashed and ", restored[mb],
                                           " restored; every key must be stashed and restored "
                                           "once")};
    }
  }
  return std::nullopt;
}

void validate_or_throw(const schedule& s) {
  if (auto e = validate(s)) OFFLOADKIT_FAIL(logic_error, "invalid stash schedule: ", e->message);
}

std::string to_string(const schedule_step& st) {
  return detail::concat(st.kind == step_kind::stash ? "stash " : "restore ", to_string(st.key));
}

}  // namespace offloadkit::stash
