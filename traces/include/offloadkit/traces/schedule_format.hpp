// The schedule file format (documented in traces/SCHEDULE_FORMAT.md): a pipeline schedule of
// stash/restore steps over keys (virtual stage, layer, microbatch), per-key row counts, row sizes,
// page size and optional pool sizes, as versioned JSON. The parser accepts any bytes: bad input
// is rejected with a schedule_error that names where (a JSON pointer such as "/steps/17/2", or a
// byte offset for malformed JSON) and why; it never crashes and its work is linear in the input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "offloadkit/error.hpp"

namespace offloadkit::traces {

inline constexpr int schedule_format_version = 1;

/// Limits the parser enforces so that a small file cannot ask for huge memory.
inline constexpr int max_virtual_stages = 64;
inline constexpr int max_layers = 4096;
inline constexpr int max_microbatches = 1 << 20;
inline constexpr std::uint64_t max_keys = std::uint64_t{1} << 24;
inline constexpr std::uint64_t max_row_bytes = std::uint64_t{1} << 32;
inline constexpr std::uint32_t max_page_rows = 1u << 20;

/// Bad schedule input: `where` is a JSON pointer ("/steps/17/2"), "byte N" for malformed JSON,
/// or "/steps" for properties of the whole sequence; `reason` says what is wrong and what would
/// be valid.
class schedule_error : public logic_error {
 public:
  schedule_error(std::string where, std::string reason)
      : logic_error("schedule " + where + ": " + reason),
        where_(std::move(where)),
        reason_(std::move(reason)) {}
  [[nodiscard]] const std::string& where() const noexcept { return where_; }
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }

 private:
  std::string where_;
  std::string reason_;
};

struct schedule_key {
  int vp = 0;     ///< virtual pipeline stage (model chunk) on this rank
  int layer = 0;  ///< layer within the virtual stage
  int microbatch = 0;
  friend bool operator==(schedule_key a, schedule_key b) {
    return a.vp == b.vp && a.layer == b.layer && a.microbatch == b.microbatch;
  }
};

enum class schedule_op { stash, restore };

struct schedule_step {
  schedule_op op = schedule_op::stash;
  schedule_key key;
  /// Index of the entry in the file's "steps" array this step came from (a chunk entry expands
  /// to one step per layer).
  std::size_t source_index = 0;
};

struct schedule_pools {
  std::uint64_t device_pages = 0;
  std::uint64_t pinned_pages = 0;
};

/// One pipeline rank's schedule with its per-key row counts.
struct schedule {
  std::string name;
  int pipeline_size = 1;  ///< informational: ranks in the pipeline
  int pipeline_rank = 0;  ///< informational: which rank this is
  int virtual_stages = 1;
  int layers = 1;  ///< layers per virtual stage
  int microbatches = 1;
  std::vector<std::uint64_t> row_bytes;  ///< per layer (size `layers`)
  std::uint32_t max_rows = 0;  ///< rows of the oversized static buffer each key would need
  std::uint32_t page_rows = 64;
  std::optional<schedule_pools> pools;
  std::vector<schedule_step> steps;
  std::vector<std::uint32_t> rows;  ///< per key, index key_index()

  [[nodiscard]] std::size_t key_count() const noexcept {
    return static_cast<std::size_t>(virtual_stages) * layers * microbatches;
  }
  [[nodiscard]] std::size_t key_index(schedule_key k) const noexcept {
    return (static_cast<std::size_t>(k.vp) * layers + k.layer) * microbatches + k.microbatch;
  }
  [[nodiscard]] std::uint32_t rows_of(schedule_key k) const { return rows.at(key_index(k)); }
  [[nodiscard]] std::uint64_t bytes_of(schedule_key k) const {
    return std::uint64_t{rows_of(k)} * row_bytes.at(static_cast<std::size_t>(k.layer));
  }
  /// Pages a key occupies: its rows rounded up to whole pages.
  [[nodiscard]] std::uint64_t pages_of(schedule_key k) const {
    return (std::uint64_t{rows_of(k)} + page_rows - 1) / page_rows;
  }
};

/// Parses and validates (see validate()). Throws schedule_error.
schedule parse_schedule(const std::string& text);
/// Reads a file and parses it; a missing file is a runtime_error naming the path.
schedule read_schedule(const std::string& path);

/// Checks sizes, ranges and the step sequence: every key is stashed exactly once and restored
/// exactly once after its stash; within one microbatch stashes go in (virtual stage, layer)
/// order and restores in the reverse order (the rules of offloadkit::stash::validate). Throws
/// schedule_error at the first offending step.
void validate(const schedule& s);

/// Serializes; runs of stashes of all layers of one (vp, microbatch) in layer order (and restores
/// in reverse order) are written as one chunk entry ["F", vp, mb] / ["B", vp, mb].
std::string to_json(const schedule& s);
void write_schedule(const schedule& s, const std::string& path);

}  // namespace offloadkit::traces
