// The schedule file format (documented in traces/SCHEDULE_FORMAT.md): one pipeline rank's
// paged-stash schedule (offloadkit::stash::workload: stash/restore steps over keys (virtual stage,
// layer, microbatch), per-key row counts, row sizes) plus the page size, optional pool sizes and
// the pipeline it belongs to, as versioned JSON. The parser accepts any bytes: bad input is
// rejected with stash::schedule_error naming where (a JSON pointer such as "/steps/17/2", or a
// byte offset for text that is not JSON) and why. It reads the input as a stream (no document
// tree), so memory follows the schedule's keys and steps, not the size of the text.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "offloadkit/stash/planner.hpp"
#include "offloadkit/stash/schedule.hpp"

namespace offloadkit::traces {

using stash::schedule_error;

inline constexpr int schedule_format_version = 1;

/// Limits of the format beyond stash::schedule_limits.
inline constexpr std::uint32_t max_pipeline_size = 1u << 16;
inline constexpr std::size_t max_name_bytes = 4096;

/// One schedule file: the stash model and what the file says around it.
struct schedule_file {
  std::string name;
  std::uint32_t pipeline_size = 1;  ///< informational: ranks in the pipeline
  std::uint32_t pipeline_rank = 0;  ///< informational: which rank this is
  /// Schedule, one row count per key in key_index() order, row sizes (row_bytes the widest,
  /// layer_row_bytes where layers differ) and max_rows.
  stash::workload work;
  std::uint32_t page_rows = 64;
  std::optional<stash::tier_pools> pools;
  /// For each step of work.sched.steps, the index of the "steps" entry it came from (a chunk
  /// entry expands to one step per layer). Empty: step i came from entry i.
  std::vector<std::uint32_t> source_index;

  [[nodiscard]] std::size_t source_of(std::size_t step) const {
    return step < source_index.size() ? source_index[step] : step;
  }
};

/// Parses and validates (see validate()). Throws schedule_error.
schedule_file parse_schedule(const std::string& text);
/// Parses a stream without reading it whole. Throws schedule_error.
schedule_file parse_schedule(std::istream& in);
/// Reads a file and parses it; a file that cannot be opened is a runtime_error naming the path.
schedule_file read_schedule(const std::string& path);

/// Checks everything a file must satisfy: stash::validate_workload (shape, steps, rows, sizes),
/// page_rows, the pipeline's rank and the pools (device + pinned < 2^31, where "/pools"). Errors
/// at a step name the file's entry ("/steps/17"). Throws schedule_error.
void validate(const schedule_file& f);

/// Serializes; runs of stashes of all layers of one (vp, microbatch) in layer order (and restores
/// in reverse order) are written as one chunk entry ["F", vp, mb] / ["B", vp, mb].
std::string to_json(const schedule_file& f);
void write_schedule(const schedule_file& f, const std::string& path);

}  // namespace offloadkit::traces
