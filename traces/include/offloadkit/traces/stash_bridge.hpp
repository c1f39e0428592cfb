// Joins the schedule file format with the paged-stash feature: conversion between a schedule file
// and offloadkit::stash's workload, and the data replay of a schedule through any
// stash_interface implementation (reference, optimized, a plugin) on an executor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "offloadkit/executor.hpp"
#include "offloadkit/stash/schedule.hpp"
#include "offloadkit/stash/stash.hpp"
#include "offloadkit/traces/replay.hpp"
#include "offloadkit/traces/schedule_format.hpp"

namespace offloadkit::traces {

/// The schedule as the stash feature's workload. stash::workload has one row size: the largest
/// of the file's per-layer sizes. Throws out_of_range for keys beyond the stash key limits.
stash::workload to_workload(const schedule& s);

/// A schedule file's content from a workload (every layer gets w.row_bytes).
schedule from_workload(const stash::workload& w, std::uint32_t page_rows, std::string name = {});

/// Builds the named implementation ("reference" or "optimized") for `cfg` on `ex`; invalid_argument
/// for another name.
std::unique_ptr<stash::stash_interface> make_stash(const std::string& impl, executor& ex,
                                                   const stash::stash_config& cfg, stream_ref s);

/// Runs every step through `impl` (built by the caller for this schedule's shape and pools, with
/// the stream its constructor used synchronized, since replay issues on a stream of its own):
/// stashes a key-specific pattern from an oversized buffer with the row count in device memory,
/// and on restore compares every byte and the returned row count. Keys that the planner says
/// overflow are not compared; the implementation's status word must name the planner's first
/// overflowing key (a mismatch there counts as a failure with first_mismatch saying so).
replay_result replay_stash(const schedule& s, stash::stash_interface& impl, executor& ex,
                           const replay_options& o);

}  // namespace offloadkit::traces
