// The schedule model of the paged stash: a pipeline step as the ordered list of stash and restore
// operations one rank issues, plus the row count of every key and the row size. Plain structs,
// so that replay tools and the capacity planner share them. Generators produce the schedules
// users run (1F1B, interleaved 1F1B) and random valid ones; the validator names the first step
// that breaks the rules.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "offloadkit/stash/key.hpp"

namespace offloadkit::stash {

enum class step_kind : std::uint8_t { stash, restore };

struct schedule_step {
  step_kind kind = step_kind::stash;
  stash_key key;
  friend bool operator==(const schedule_step& a, const schedule_step& b) {
    return a.kind == b.kind && a.key == b.key;
  }
};

/// The ordered operations of one rank for one training step, and the shape they cover: keys are
/// (vp < vp_stages, layer < layers, microbatch < microbatches).
struct schedule {
  std::uint32_t vp_stages = 1;
  std::uint32_t layers = 1;  ///< stashed layers per virtual stage
  std::uint32_t microbatches = 1;
  std::vector<schedule_step> steps;
};

/// Row count of one key's activation.
struct key_rows {
  stash_key key;
  std::uint64_t rows = 0;
};

/// A schedule plus what it stashes: the row count of every key, the row size, and the row
/// capacity of the oversized static buffers the stash replaces.
struct workload {
  schedule sched;
  std::vector<key_rows> rows;  ///< one entry per key the schedule stashes
  std::uint64_t row_bytes = 0;
  std::uint64_t max_rows = 0;
};

/// Rows of `k` in `w`; throws out_of_range when the workload has no row count for it.
std::uint64_t rows_of(const workload& w, const stash_key& k);

/// The order in which one microbatch's keys are stashed in forward: (vp, layer) ascending.
std::vector<stash_key> forward_order(std::uint32_t vp_stages, std::uint32_t layers,
                                     std::uint32_t microbatch);

/// 1F1B (PipeDream-flush) for `rank` of a pipeline of `pipeline_size` ranks: warm-up forwards,
/// then one forward and one backward alternately, then the cool-down backwards. Each forward of
/// a microbatch stashes layers 0..layers-1, each backward restores them in reverse.
schedule one_f_one_b(std::uint32_t pipeline_size, std::uint32_t rank, std::uint32_t microbatches,
                     std::uint32_t layers);

/// Interleaved 1F1B (Megatron's virtual pipeline) for `rank` with `vp_stages` model chunks per
/// rank. microbatches must be a multiple of pipeline_size, as Megatron requires.
schedule interleaved_one_f_one_b(std::uint32_t pipeline_size, std::uint32_t rank,
                                 std::uint32_t vp_stages, std::uint32_t microbatches,
                                 std::uint32_t layers);

/// A random valid schedule: within each microbatch the keys are stashed in forward order and
/// restored in reverse order, every key once; microbatches interleave arbitrarily.
schedule random_schedule(std::uint32_t vp_stages, std::uint32_t layers, std::uint32_t microbatches,
                         std::mt19937_64& rng);

/// Where and why a schedule is invalid.
struct schedule_error {
  std::size_t step = 0;  ///< index of the first offending step; steps.size() for "missing" errors
  std::string message;
};

/// The first rule a schedule breaks, or nothing when it is valid: keys within the declared shape,
/// each key stashed exactly once before it is restored exactly once, forward order of stashes
/// and reverse order of restores within a microbatch, nothing left stashed at the end.
std::optional<schedule_error> validate(const schedule& s);

/// validate() that throws offloadkit::logic_error with the step index and the reason.
void validate_or_throw(const schedule& s);

std::string to_string(const schedule_step& st);

}  // namespace offloadkit::stash
