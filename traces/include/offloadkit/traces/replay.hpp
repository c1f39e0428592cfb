// Schedule replay: the data replay that runs a schedule file through a paged-stash implementation
// (reference, optimized, or a plugin's) on an executor and compares every restored byte with what
// was stashed, and `offloadkit replay`'s logic: several ranks' files (or folders of them) planned
// with offloadkit::stash's planner, replayed, and reported per rank and as the maximum over the
// pipeline.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "offloadkit/executor.hpp"
#include "offloadkit/stash/planner.hpp"
#include "offloadkit/stash/stash.hpp"
#include "offloadkit/traces/schedule_format.hpp"

namespace offloadkit::traces {

// Errors: input_error (a file cannot be read or is not a valid schedule: the message names the
// file and, for a bad schedule, the JSON pointer and the reason), unavailable_error (the executor
// cannot run here, or the pools do not fit in memory) and plugin_unusable (a plugin cannot be
// loaded, provides no paged stash, or none for the executor), all from offloadkit/error.hpp.

/// Progress of a data replay, for a progress display.
struct replay_progress {
  std::size_t file = 0, files = 1;  ///< which input (0-based) of how many
  std::size_t done = 0, total = 0;  ///< steps of this input
  double seconds = 0;               ///< since this input's replay started
};

struct replay_options {
  /// Bytes per row used for the data (0: the file's widest row). Smaller rows keep a replay of a
  /// production-size schedule fast; paging and page boundaries are exercised the same way.
  std::uint64_t data_row_bytes = 0;
  /// Called with the steps done at most every few hundred steps and at the end.
  std::function<void(std::size_t done, std::size_t total)> progress;
};

/// What a data replay found.
struct data_check {
  std::uint64_t bytes_checked = 0;
  std::uint64_t mismatches = 0;
  std::size_t keys_checked = 0;
  std::string first_mismatch;
};

/// Builds the named implementation ("reference" or "optimized") for `cfg` on `ex`; invalid_argument
/// for another name.
std::unique_ptr<stash::stash_interface> make_stash(const std::string& impl, executor& ex,
                                                   const stash::stash_config& cfg, stream_ref s);

/// The stash_config a replay of `f` uses on a pool of `pools` (data rows of `data_row_bytes`, 0:
/// the file's widest row).
stash::stash_config config_for(const schedule_file& f, const stash::tier_pools& pools,
                               std::uint64_t data_row_bytes = 0);

/// Runs every step of `f` through `impl` (built by the caller with config_for(), with the stream
/// its constructor used synchronized, since replay issues on a stream of its own): stashes a
/// key-specific pattern from an oversized buffer with the row count in device memory, and on
/// restore compares every byte and the returned row count. Keys that the planner says overflow
/// are not compared; the implementation's status word must name the planner's first overflowing
/// key (a difference counts as a mismatch, with first_mismatch saying so).
data_check replay_stash(const schedule_file& f, stash::stash_interface& impl, executor& ex,
                        const replay_options& o = {});

/// A random valid schedule file (for property tests and the traces battery): 1-3 virtual stages,
/// 1-3 layers, 1-6 microbatches interleaved at random, row counts in [0, max_rows], per-layer row
/// sizes unless `uniform_rows`, and pools half of the time.
schedule_file random_schedule_file(std::mt19937_64& rng, bool uniform_rows = false);

// ---- offloadkit replay ------------------------------------------------------------------------

struct replay_request {
  std::string impl = "reference";          ///< "reference" or "optimized" (ignored with a plugin)
  std::string plugin;                      ///< a plugin library whose paged stash is replayed
  std::string executor = "host";           ///< "host" or "cuda"
  std::optional<stash::tier_pools> pools;  ///< overrides every file's pools
  std::uint64_t data_row_bytes = 0;        ///< see replay_options
  bool plan_only = false;                  ///< plan, do not replay data
  std::function<void(const replay_progress&)> progress;
};

/// One input's plan (under its pools, or an unbounded device tier) and data check.
struct rank_report {
  std::string path;
  std::string name;
  std::uint32_t pipeline_size = 1, pipeline_rank = 0;
  std::size_t steps = 0, keys = 0;
  std::uint32_t page_rows = 0;
  std::optional<stash::tier_pools> pools;
  stash::capacity_plan plan;
  std::size_t first_overflow_entry = 0;  ///< the "steps" entry of plan.first_overflow
  bool replayed = false;
  std::string implementation;  ///< what the data went through
  data_check data;
  double seconds = 0;
};

struct replay_report {
  std::vector<rank_report> ranks;  ///< in the order of (pipeline rank, path)
  std::string executor;
  /// The maximum over ranks of each figure: the pages per tier every rank of the pipeline can be
  /// given so that none overflows.
  stash::capacity_plan max;
  std::uint64_t overflows = 0;   ///< overflowing stashes over all ranks
  std::uint64_t mismatches = 0;  ///< mismatches over all ranks

  /// 0 ok, 1 restored bytes differ, 6 a pool overflows.
  [[nodiscard]] int exit_code() const { return mismatches != 0 ? 1 : overflows != 0 ? 6 : 0; }
};

/// The schedule files of `inputs`: files as given, folders as their *.json files in name order.
/// input_error for a path that does not exist or a folder without schedule files.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

/// Plans every input and, unless plan_only, replays its data. Throws input_error (a file cannot
/// be read or is invalid), plugin_unusable, unavailable_error, and the implementation's own
/// errors.
replay_report replay_files(const std::vector<std::string>& inputs, const replay_request& request);

/// The report: one block per rank for what needs explaining (an overflow, a mismatch), the
/// per-rank table and its maximum row, and the pages per tier for the whole pipeline.
std::string render_report(const replay_report& report);

/// Bytes as people read them: "512 B", "1.50 KiB", ... up to EiB; saturated figures (UINT64_MAX)
/// as ">= 16 EiB".
std::string format_bytes(std::uint64_t bytes);

/// A progress display for replay_request::progress writing to `out`: on a terminal one line
/// redrawn with '\r'; otherwise plain lines at most every `interval_s` seconds. Both show steps
/// done, the percentage and an estimate of the time left.
std::function<void(const replay_progress&)> progress_printer(std::FILE* out, bool terminal,
                                                             double interval_s = 2.0);

}  // namespace offloadkit::traces
