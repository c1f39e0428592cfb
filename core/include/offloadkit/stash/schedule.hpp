// The schedule model of the paged stash, the one every part of offloadkit uses: a pipeline step as
// the ordered list of stash and restore operations one rank issues, plus the row count of every
// key and the row sizes. Plain structs, so that the schedule file format (traces/), replay, the
// capacity planner (planner.hpp) and the property batteries share them. Generators produce the
// schedules users run (1F1B, interleaved 1F1B) and random valid ones; the validator names the
// first step that breaks the rules and the key it concerns.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "offloadkit/error.hpp"
#include "offloadkit/stash/key.hpp"

namespace offloadkit::stash {

/// The ranges a schedule must fit: what the stash implementations accept, and bounds that keep a
/// small schedule file from asking for huge memory.
struct schedule_limits {
  static constexpr std::uint32_t vp_stages = 64;
  static constexpr std::uint32_t layers = key_limits::layer;             // 4096
  static constexpr std::uint32_t microbatches = key_limits::microbatch;  // 4096
  static constexpr std::uint64_t keys = std::uint64_t{1} << 24;
  static constexpr std::uint64_t row_bytes = std::uint64_t{1} << 32;
  static constexpr std::uint64_t max_rows = std::uint64_t{1} << 31;
  static constexpr std::uint64_t rows_per_page = std::uint64_t{1} << 20;
  /// device + pinned pages of one pool: the implementations' page ids are 31-bit.
  static constexpr std::uint64_t pool_pages = (std::uint64_t{1} << 31) - 1;
};

/// A schedule (or a workload, or a schedule file) breaks a rule. `where` is a JSON pointer into
/// the schedule file's form ("/steps/17", "/rows/3", "/pools"); `step` is the index of the
/// offending step in schedule::steps, or npos when no single step is at fault (a shape or size,
/// or a key never restored: then step is steps.size()).
class schedule_error : public logic_error {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  schedule_error(std::string where, std::string reason, std::size_t step = npos)
      : logic_error(where.empty() ? "schedule: " + reason : "schedule " + where + ": " + reason),
        where_(std::move(where)),
        reason_(std::move(reason)),
        step_(step) {}
  [[nodiscard]] const std::string& where() const noexcept { return where_; }
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }
  [[nodiscard]] std::size_t step() const noexcept { return step_; }

 private:
  std::string where_;
  std::string reason_;
  std::size_t step_;
};

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
  std::vector<key_rows> rows;   ///< one entry per key the schedule stashes
  std::uint64_t row_bytes = 0;  ///< the stash's row size: the widest of the layers' rows
  /// Row size of each layer where layers differ (size sched.layers, none above row_bytes); empty:
  /// every layer's rows are row_bytes wide. Stashed bytes count these; pages are row_bytes wide.
  std::vector<std::uint64_t> layer_row_bytes;
  std::uint64_t max_rows = 0;
};

/// Rows of `k` in `w`; throws out_of_range when the workload has no row count for it.
std::uint64_t rows_of(const workload& w, const stash_key& k);

/// Row size of `layer` in `w` (layer_row_bytes, or row_bytes).
std::uint64_t row_bytes_of(const workload& w, std::uint32_t layer);

/// Dense index of a key in a schedule's shape: (vp * layers + layer) * microbatches + microbatch.
inline std::size_t key_index(const schedule& s, const stash_key& k) {
  return (std::size_t{k.vp} * s.layers + k.layer) * s.microbatches + k.microbatch;
}

/// Number of keys of a schedule's shape: vp_stages * layers * microbatches.
inline std::size_t key_count(const schedule& s) {
  return std::size_t{s.vp_stages} * s.layers * s.microbatches;
}

/// The row count of every key of `w`, indexed by key_index(); schedule_error (where "/rows")
/// when a key of the shape has none, has two, or lies outside the shape.
std::vector<std::uint64_t> dense_rows(const workload& w);

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

/// The first rule a schedule breaks, or nothing when it is valid: the shape within
/// schedule_limits, keys within the shape, each key stashed exactly once before it is restored
/// exactly once, forward order of stashes and reverse order of restores within a microbatch,
/// nothing left stashed at the end. The error names the step where the rule breaks (a second
/// stash or an early restore at that very step) and the key.
std::optional<schedule_error> validate(const schedule& s);

/// validate() that throws the schedule_error.
void validate_or_throw(const schedule& s);

/// validate() of the schedule plus the workload's sizes: row_bytes in [1, 2^32], layer_row_bytes
/// empty or one per layer within [1, row_bytes], max_rows in [0, 2^31], one row count per key of
/// the shape within [0, max_rows]. Throws schedule_error.
void validate_workload(const workload& w);

std::string to_string(const schedule_step& st);

}  // namespace offloadkit::stash
