// Interval arithmetic and the timeline analyses and checks.
#include "offloadkit/traces/analysis.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <sstream>

namespace offloadkit::traces {

std::vector<interval> interval_union(std::vector<interval> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](interval i) { return i.end <= i.begin; }), v.end());
  std::sort(v.begin(), v.end(), [](interval a, interval b) { return a.begin < b.begin; });
  std::vector<interval> out;
  for (interval i : v) {
    if (!out.empty() && i.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

std::int64_t total_length(const std::vector<interval>& u) noexcept {
  std::int64_t n = 0;
  for (interval i : u) n += i.end - i.begin;
  return n;
}

std::vector<interval> intersect(const std::vector<interval>& a, const std::vector<interval>& b) {
  std::vector<interval> out;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const std::int64_t lo = std::max(a[i].begin, b[j].begin);
    const std::int64_t hi = std::min(a[i].end, b[j].end);
    if (lo < hi) out.push_back({lo, hi});
    // Advance whichever ends first; the other may still overlap the next one.
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

std::vector<interval> clip(const std::vector<interval>& u, interval w) {
  return intersect(u, std::vector<interval>{w});
}

namespace {

bool is_host_copy(const record& r) {
  return r.kind == record_kind::memcpy &&
         (r.direction == copy_direction::h2d || r.direction == copy_direction::d2h);
}

bool is_host_blocking(const record& r) {
  return r.kind == record_kind::sync && r.sync != sync_kind::stream_wait_event &&
         r.sync != sync_kind::event_query;
}

std::string fmt_us(std::int64_t ns) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f us", static_cast<double>(ns) / 1e3);
  return buf;
}

std::string fmt_bytes(std::uint64_t b) {
  char buf[64];
  if (b >= (1ull << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1 << 20));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(b) / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  }
  return buf;
}

/// One line describing a record, times relative to the timeline's start.
std::string describe(const record& r, std::int64_t t0) {
  std::ostringstream os;
  os << to_string(r.kind) << " '" << r.name << "' at +" << fmt_us(r.start_ns - t0) << " for "
     << fmt_us(r.duration_ns());
  if (r.kind == record_kind::memcpy) {
    os << " (" << to_string(r.src) << " -> " << to_string(r.dst) << ", " << fmt_bytes(r.bytes)
       << ")";
  } else if (r.bytes != 0) {
    os << " (" << fmt_bytes(r.bytes) << ")";
  }
  if (r.stream >= 0) os << " on device " << r.device << " stream " << r.stream;
  if (r.kind == record_kind::sync || r.kind == record_kind::api || r.kind == record_kind::range) {
    os << " on host thread " << r.thread;
  }
  return os.str();
}

/// Lists up to `limit` offenders after a headline.
void list_offenders(std::ostringstream& os, const std::vector<const record*>& v, std::int64_t t0,
                    std::size_t limit = 10) {
  for (std::size_t i = 0; i < v.size() && i < limit; ++i) {
    os << "\n  " << describe(*v[i], t0);
  }
  if (v.size() > limit) os << "\n  ... and " << (v.size() - limit) << " more";
}

std::string step_note(const timeline& t, const analysis_options& o) {
  for (const auto& r : t.records) {
    if (r.kind == record_kind::range && r.name.rfind(o.step_prefix, 0) == 0) return "";
  }
  return " (no NVTX range named '" + o.step_prefix + "...': the whole timeline is one step)";
}

}  // namespace

std::vector<interval> steps(const timeline& t, const analysis_options& o) {
  std::vector<interval> s;
  std::vector<std::int64_t> marks;
  for (const auto& r : t.records) {
    if (r.kind == record_kind::range && r.name.rfind(o.step_prefix, 0) == 0) {
      if (r.end_ns > r.start_ns) {
        s.push_back({r.start_ns, r.end_ns});
      } else {
        marks.push_back(r.start_ns);
      }
    }
  }
  // Without step ranges, instantaneous markers (nvtxMark "step ...") start each step; the last
  // step runs to the end of the timeline.
  if (s.empty() && !marks.empty()) {
    std::sort(marks.begin(), marks.end());
    marks.push_back(t.end_ns());
    for (std::size_t i = 0; i + 1 < marks.size(); ++i) {
      if (marks[i + 1] > marks[i]) s.push_back({marks[i], marks[i + 1]});
    }
  }
  if (s.empty() && !t.records.empty()) s.push_back({t.begin_ns(), t.end_ns()});
  std::sort(s.begin(), s.end(), [](interval a, interval b) { return a.begin < b.begin; });
  return s;
}

overlap_result copy_compute_overlap(const timeline& t, const interval* window) {
  std::vector<interval> copies, kernels;
  overlap_result res;
  for (const auto& r : t.records) {
    if (is_host_copy(r)) {
      copies.push_back({r.start_ns, r.end_ns});
      ++res.copies;
    } else if (r.kind == record_kind::kernel) {
      kernels.push_back({r.start_ns, r.end_ns});
    }
  }
  auto cu = interval_union(std::move(copies));
  auto ku = interval_union(std::move(kernels));
  if (window != nullptr) {
    cu = clip(cu, *window);
    ku = clip(ku, *window);
  }
  res.copy_ns = total_length(cu);
  res.compute_ns = total_length(ku);
  res.overlapped_ns = total_length(intersect(cu, ku));
  return res;
}

overlap_result copy_compute_overlap_in_steps(const timeline& t, const analysis_options& o) {
  overlap_result sum;
  for (const interval& w : steps(t, o)) {
    const overlap_result r = copy_compute_overlap(t, &w);
    sum.copy_ns += r.copy_ns;
    sum.overlapped_ns += r.overlapped_ns;
    sum.compute_ns += r.compute_ns;
  }
  // Copies counted once each, whichever step they fall in.
  sum.copies = copy_compute_overlap(t).copies;
  return sum;
}

std::vector<const record*> pageable_copies(const timeline& t) {
  std::vector<const record*> out;
  for (const auto& r : t.records) {
    if (r.kind == record_kind::memcpy &&
        (r.src == memory_location::pageable || r.dst == memory_location::pageable)) {
      out.push_back(&r);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const record* a, const record* b) { return a->start_ns < b->start_ns; });
  return out;
}

std::vector<const record*> steady_state_pinned_allocations(const timeline& t,
                                                           const analysis_options& o) {
  std::vector<const record*> out;
  const auto s = steps(t, o);
  if (s.empty()) return out;
  const std::int64_t first_end = s.front().end;
  for (const auto& r : t.records) {
    if (r.kind == record_kind::api &&
        (r.api == api_kind::pinned_alloc || r.api == api_kind::pinned_register) &&
        r.start_ns >= first_end) {
      out.push_back(&r);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const record* a, const record* b) { return a->start_ns < b->start_ns; });
  return out;
}

std::vector<const record*> host_syncs_in_steps(const timeline& t, const analysis_options& o) {
  std::vector<const record*> out;
  const auto s = steps(t, o);
  for (const auto& r : t.records) {
    if (!is_host_blocking(r)) continue;
    for (interval w : s) {
      if (r.start_ns >= w.begin && r.start_ns < w.end) {
        out.push_back(&r);
        break;
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const record* a, const record* b) { return a->start_ns < b->start_ns; });
  return out;
}

std::vector<bandwidth_result> bandwidth_by_direction(const timeline& t, const analysis_options& o) {
  const copy_direction order[] = {copy_direction::h2d, copy_direction::d2h, copy_direction::d2d,
                                  copy_direction::p2p, copy_direction::h2h};
  std::vector<bandwidth_result> out;
  for (copy_direction d : order) {
    bandwidth_result b;
    b.direction = d;
    std::vector<interval> busy;
    for (const auto& r : t.records) {
      if (r.kind != record_kind::memcpy || r.direction != d || r.bytes < o.bandwidth_min_bytes) {
        continue;
      }
      b.bytes += r.bytes;
      ++b.copies;
      busy.push_back({r.start_ns, r.end_ns});
    }
    // The union, not the sum: concurrent copies in one direction share the link.
    b.busy_ns = total_length(interval_union(std::move(busy)));
    if (b.copies != 0) out.push_back(b);
  }
  return out;
}

check_report check_copy_overlap(const timeline& t, double min_fraction, const analysis_options& o) {
  check_report rep;
  rep.name = "copy_compute_overlap";
  const auto ov = copy_compute_overlap_in_steps(t, o);
  rep.passed = ov.fraction() >= min_fraction;
  std::ostringstream os;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.1f %% of %s of H2D/D2H copy time (%zu copies) overlaps compute",
                100.0 * ov.fraction(), fmt_us(ov.copy_ns).c_str(), ov.copies);
  os << buf << "; required >= " << 100.0 * min_fraction << " %";
  if (!rep.passed) {
    // Name the copies that ran with no kernel at all beside them: the easiest ones to fix.
    std::vector<interval> kernels;
    for (const auto& r : t.records) {
      if (r.kind == record_kind::kernel) kernels.push_back({r.start_ns, r.end_ns});
    }
    const auto ku = interval_union(std::move(kernels));
    std::vector<std::pair<std::int64_t, const record*>> exposed;
    for (const auto& r : t.records) {
      if (!is_host_copy(r)) continue;
      const auto hidden = total_length(clip(ku, {r.start_ns, r.end_ns}));
      if (r.duration_ns() - hidden > 0) exposed.emplace_back(r.duration_ns() - hidden, &r);
    }
    std::sort(exposed.begin(), exposed.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<const record*> v;
    v.reserve(exposed.size());
    for (const auto& e : exposed) v.push_back(e.second);
    os << "\ncopies with the most exposed (non-overlapped) time:";
    list_offenders(os, v, t.begin_ns(), 5);
  }
  (void)o;
  rep.text = os.str();
  return rep;
}

check_report check_no_pageable_copies(const timeline& t) {
  check_report rep;
  rep.name = "no_pageable_copies";
  const auto v = pageable_copies(t);
  rep.passed = v.empty();
  std::ostringstream os;
  os << v.size() << " copies through pageable host memory";
  if (!rep.passed) {
    os << " (each stages through a driver bounce buffer and blocks the host):";
    list_offenders(os, v, t.begin_ns());
  }
  rep.text = os.str();
  return rep;
}

check_report check_no_steady_state_pinned_allocations(const timeline& t,
                                                      const analysis_options& o) {
  check_report rep;
  rep.name = "no_steady_state_pinned_allocations";
  const auto v = steady_state_pinned_allocations(t, o);
  rep.passed = v.empty();
  std::ostringstream os;
  os << v.size() << " pinned allocations after the first step" << step_note(t, o);
  if (!rep.passed) {
    os << ":";
    list_offenders(os, v, t.begin_ns());
  }
  rep.text = os.str();
  return rep;
}

check_report check_no_host_syncs_in_steps(const timeline& t, const analysis_options& o) {
  check_report rep;
  rep.name = "no_host_syncs_in_steps";
  const auto v = host_syncs_in_steps(t, o);
  rep.passed = v.empty();
  std::ostringstream os;
  os << v.size() << " host synchronizations inside steps" << step_note(t, o);
  if (!rep.passed) {
    os << ":";
    list_offenders(os, v, t.begin_ns());
  }
  rep.text = os.str();
  return rep;
}

check_report check_bandwidth(const timeline& t, copy_direction d, double limit_gb_per_s,
                             double min_ratio, const analysis_options& o) {
  check_report rep;
  rep.name = std::string("bandwidth_") + to_string(d);
  std::ostringstream os;
  const auto all = bandwidth_by_direction(t, o);
  const auto it = std::find_if(all.begin(), all.end(),
                               [d](const bandwidth_result& b) { return b.direction == d; });
  if (it == all.end()) {
    rep.passed = false;
    os << "no " << to_string(d) << " copies of at least " << fmt_bytes(o.bandwidth_min_bytes)
       << " to measure";
    rep.text = os.str();
    return rep;
  }
  const double ratio = limit_gb_per_s > 0 ? it->gb_per_s() / limit_gb_per_s : 0.0;
  rep.passed = ratio >= min_ratio;
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "%s: %.2f GB/s over %zu copies (%s), %.2f of the %.2f GB/s limit; required >= "
                "%.2f",
                to_string(d), it->gb_per_s(), it->copies, fmt_bytes(it->bytes).c_str(), ratio,
                limit_gb_per_s, min_ratio);
  os << buf;
  rep.text = os.str();
  return rep;
}

std::string summary(const timeline& t, const analysis_options& o, double h2d_limit,
                    double d2h_limit) {
  std::ostringstream os;
  std::size_t counts[6] = {};
  for (const auto& r : t.records) ++counts[static_cast<int>(r.kind)];
  os << "timeline: " << t.records.size() << " records (" << counts[0] << " kernels, " << counts[1]
     << " memcpys, " << counts[2] << " memsets, " << counts[3] << " syncs, " << counts[4]
     << " ranges, " << counts[5] << " api calls) over " << fmt_us(t.end_ns() - t.begin_ns());
  if (t.dropped != 0) os << "; " << t.dropped << " records DROPPED by the recorder";
  os << "\nsteps: " << steps(t, o).size() << step_note(t, o);
  const auto ov = copy_compute_overlap_in_steps(t, o);
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "\noverlap: %.1f %% of H2D/D2H copy time in steps overlaps compute (copy %s, "
                "compute %s, overlapped %s)",
                100.0 * ov.fraction(), fmt_us(ov.copy_ns).c_str(), fmt_us(ov.compute_ns).c_str(),
                fmt_us(ov.overlapped_ns).c_str());
  os << buf;
  os << "\npageable copies: " << pageable_copies(t).size();
  os << "\npinned allocations after the first step: "
     << steady_state_pinned_allocations(t, o).size();
  os << "\nhost synchronizations inside steps: " << host_syncs_in_steps(t, o).size();
  os << "\nbandwidth (copies >= " << fmt_bytes(o.bandwidth_min_bytes) << "):";
  const auto bw = bandwidth_by_direction(t, o);
  if (bw.empty()) os << " none";
  for (const auto& b : bw) {
    std::snprintf(buf, sizeof buf, "\n  %-4s %10.2f GB/s  %6zu copies  %12s",
                  to_string(b.direction), b.gb_per_s(), b.copies, fmt_bytes(b.bytes).c_str());
    os << buf;
    const double limit = b.direction == copy_direction::h2d   ? h2d_limit
                         : b.direction == copy_direction::d2h ? d2h_limit
                                                              : 0.0;
    if (limit > 0) {
      std::snprintf(buf, sizeof buf, "  %.2f of %.1f GB/s limit", b.gb_per_s() / limit, limit);
      os << buf;
    }
  }
  return os.str();
}

}  // namespace offloadkit::traces
