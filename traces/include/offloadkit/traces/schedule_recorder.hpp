// Recording API for capturing a production schedule: an implementation (or the framework around
// it) reports each stash and restore as it issues them and the row count of each key once known
// (row counts live on the device; report them when the step's counts are read back anyway, e.g.
// at the end of the step). write() produces a schedule file that `offloadkit replay` accepts.
// Thread-safe: stashes and restores may be reported from several threads.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "offloadkit/traces/schedule_format.hpp"

namespace offloadkit::traces {

struct schedule_shape {
  std::string name;
  std::uint32_t pipeline_size = 1;
  std::uint32_t pipeline_rank = 0;
  std::uint32_t virtual_stages = 1;
  std::uint32_t layers = 1;
  std::uint32_t microbatches = 1;
  std::vector<std::uint64_t> row_bytes;  ///< one per layer, or one for all layers
  std::uint64_t max_rows = 0;
  std::uint32_t page_rows = 64;
};

class schedule_recorder {
 public:
  /// Throws schedule_error when the shape is out of the format's ranges (max_rows included).
  explicit schedule_recorder(schedule_shape shape);

  /// Key out of the shape's range: out_of_range naming the field, its value and the limit.
  void record_stash(stash::stash_key k);
  void record_restore(stash::stash_key k);
  /// Row count of a key; larger than max_rows is out_of_range.
  void set_rows(stash::stash_key k, std::uint64_t rows);
  /// Pools beyond what the implementations accept are schedule_error ("/pools").
  void set_pools(std::uint64_t device_pages, std::uint64_t pinned_pages);

  /// The schedule recorded so far, validated (schedule_error names the first offending step).
  [[nodiscard]] schedule_file finish() const;
  /// finish() written to `path`.
  void write(const std::string& path) const;
  [[nodiscard]] std::size_t steps_recorded() const;

 private:
  void check_key(stash::stash_key k) const;
  mutable std::mutex mu_;
  schedule_file f_;
  std::vector<std::uint64_t> rows_;  // by key_index
};

}  // namespace offloadkit::traces
