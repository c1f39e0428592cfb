// Analyses of a timeline (copy/compute overlap, pageable copies, pinned allocations and host
// synchronizations in steady state, achieved copy bandwidth) and the checks built on them. A
// check never throws for a failing program: it returns a check_report whose text names the
// offending records, so a test can assert `report.passed` and print `report.text` on failure.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/traces/timeline.hpp"

namespace offloadkit::traces {

/// Half-open interval [begin, end) in nanoseconds.
struct interval {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  friend bool operator==(interval a, interval b) { return a.begin == b.begin && a.end == b.end; }
};

/// The union of intervals as sorted, disjoint, non-empty intervals (touching ones merge).
std::vector<interval> interval_union(std::vector<interval> v);
/// Total length of a union produced by interval_union.
std::int64_t total_length(const std::vector<interval>& u) noexcept;
/// Intersection of two unions produced by interval_union.
std::vector<interval> intersect(const std::vector<interval>& a, const std::vector<interval>& b);
/// A union clipped to [w.begin, w.end).
std::vector<interval> clip(const std::vector<interval>& u, interval w);

/// What counts as a step and which records the analyses consider.
struct analysis_options {
  /// NVTX ranges whose name starts with this prefix delimit steps (e.g. "step" matches
  /// "step 3"). With no such range, the whole timeline is one step.
  std::string step_prefix = "step";
  /// Copies smaller than this are ignored by the bandwidth analysis (launch-latency bound).
  std::uint64_t bandwidth_min_bytes = 1 << 20;
};

/// The steps of a timeline, sorted by start; one step covering everything when there is no
/// matching range.
std::vector<interval> steps(const timeline& t, const analysis_options& o = {});

struct overlap_result {
  std::int64_t copy_ns = 0;        ///< union of H2D/D2H copy time
  std::int64_t overlapped_ns = 0;  ///< part of it during which a kernel ran
  std::int64_t compute_ns = 0;     ///< union of kernel time
  std::size_t copies = 0;
  /// overlapped_ns / copy_ns, 1 when there is no copy time (nothing to hide).
  [[nodiscard]] double fraction() const noexcept {
    return copy_ns == 0 ? 1.0 : static_cast<double>(overlapped_ns) / static_cast<double>(copy_ns);
  }
};

/// Fraction of host<->device copy time during which some kernel runs, optionally inside `window`.
/// Copies and kernels are merged over all streams and devices first (interval union).
overlap_result copy_compute_overlap(const timeline& t, const interval* window = nullptr);
/// The same, summed over the steps (the whole timeline where there are none): set-up outside the
/// steps (warm-up, bandwidth probes, no-offload runs) does not count.
overlap_result copy_compute_overlap_in_steps(const timeline& t, const analysis_options& o = {});

/// Copies with a pageable side (synchronous staging through a bounce buffer).
std::vector<const record*> pageable_copies(const timeline& t);
/// Pinned allocations and registrations that start after the first step ended.
std::vector<const record*> steady_state_pinned_allocations(const timeline& t,
                                                           const analysis_options& o = {});
/// Host-blocking synchronizations (context/stream/event) that start inside a step.
std::vector<const record*> host_syncs_in_steps(const timeline& t, const analysis_options& o = {});

struct bandwidth_result {
  copy_direction direction = copy_direction::unknown;
  std::uint64_t bytes = 0;
  std::size_t copies = 0;
  std::int64_t busy_ns = 0;  ///< union of the considered copies' time in this direction
  /// bytes / busy time in GB/s (1e9 bytes per second); 0 without copies.
  [[nodiscard]] double gb_per_s() const noexcept {
    return busy_ns == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(busy_ns);
  }
};

/// Achieved bandwidth per direction (h2d, d2h, d2d, p2p, h2h in that order, only directions
/// with copies of at least o.bandwidth_min_bytes).
std::vector<bandwidth_result> bandwidth_by_direction(const timeline& t,
                                                     const analysis_options& o = {});

/// The outcome of one check; `text` says what was measured and, on failure, which records
/// broke it (the first few, with times relative to the timeline's start).
struct check_report {
  std::string name;
  bool passed = false;
  std::string text;
};

check_report check_copy_overlap(const timeline& t, double min_fraction,
                                const analysis_options& o = {});
check_report check_no_pageable_copies(const timeline& t);
check_report check_no_steady_state_pinned_allocations(const timeline& t,
                                                      const analysis_options& o = {});
check_report check_no_host_syncs_in_steps(const timeline& t, const analysis_options& o = {});
/// Passes when the achieved bandwidth in `d` is at least min_ratio * limit_gb_per_s; fails
/// when there are no qualifying copies in that direction.
check_report check_bandwidth(const timeline& t, copy_direction d, double limit_gb_per_s,
                             double min_ratio, const analysis_options& o = {});

/// A readable summary: record counts, steps, overlap, pageable copies, steady-state pinned
/// allocations, host syncs in steps, bandwidth per direction (with ratios to the given limits
/// in GB/s where positive).
std::string summary(const timeline& t, const analysis_options& o = {}, double h2d_limit = 0,
                    double d2h_limit = 0);

}  // namespace offloadkit::traces
