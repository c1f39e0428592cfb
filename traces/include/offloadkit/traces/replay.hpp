// Schedule replay: the page planner (pages needed per tier, peak bytes, the first overflow of a
// given pool) and the data replay that runs a schedule through a paged-stash implementation on an
// executor and compares every restored byte with what was stashed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "offloadkit/executor.hpp"
#include "offloadkit/traces/schedule_format.hpp"

namespace offloadkit::traces {

struct overflow_info {
  std::size_t step = 0;          ///< index into schedule::steps
  std::size_t source_index = 0;  ///< index into the file's "steps" array
  schedule_key key;
  std::uint64_t pages_needed = 0;
  std::uint64_t device_free = 0;
  std::uint64_t pinned_free = 0;
};

struct replay_result {
  /// Peak live pages over the schedule: what one tier alone must hold.
  std::uint64_t peak_pages = 0;
  /// Peak use of each tier under the pools (a stash takes all its pages or none, device pages
  /// first and the rest pinned, as offloadkit::stash does); with no pools, the device tier is
  /// unbounded.
  std::uint64_t peak_device_pages = 0;
  std::uint64_t peak_pinned_pages = 0;
  std::uint64_t peak_stashed_bytes = 0;    ///< live rows x row bytes at the peak
  std::uint64_t peak_paged_bytes = 0;      ///< live pages x page bytes at the peak
  std::uint64_t peak_oversized_bytes = 0;  ///< live keys x max_rows x row bytes at the peak
  std::uint64_t page_bytes = 0;            ///< page_rows x the largest row size
  std::optional<overflow_info> overflow;   ///< the first stash the pools cannot hold
  // Data replay only:
  std::uint64_t bytes_checked = 0;
  std::uint64_t mismatches = 0;
  std::string first_mismatch;
  std::size_t keys_checked = 0;
};

/// Page accounting of `s` under `pools` (or the file's pools, or unbounded). Pure host code.
replay_result plan(const schedule& s, const std::optional<schedule_pools>& pools);

struct replay_options {
  std::optional<schedule_pools> pools;  ///< overrides the file's pools
  /// Bytes per row used for the data (0: the file's row sizes). Smaller rows keep a replay of
  /// a production-size schedule fast; paging and page boundaries are exercised the same way.
  std::uint64_t data_row_bytes = 0;
  /// Called with (steps done, steps total) at most every few hundred steps.
  std::function<void(std::size_t, std::size_t)> progress;
};

/// Runs every step through the built-in paged model (two tiers of pages in device and pinned
/// memory of `ex`, page copies issued through the executor), stashing a key-specific byte pattern
/// and comparing each restore with it. Keys that overflow are reported and skipped; every other key
/// must restore exactly.
replay_result replay_model(const schedule& s, executor& ex, const replay_options& o);

}  // namespace offloadkit::traces
