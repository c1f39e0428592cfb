// bench_arena: offload and reload of optimizer-like tensor sets (hundreds to thousands of fp32
// tensors from KiB to tens of MiB, as master weights + two Adam moments), each figure reported as
// a ratio to a limit measured in the same run:
//   - optimized (coalesced pinned arena) vs one plain pinned copy of the same total bytes;
//   - speedup over the reference (per-tensor pageable, synchronous) and over per-tensor fresh
//     pinned buffers;
//   - offload of one set and reload of another at once vs two plain pinned copies in opposite
//     directions on two streams.
// Usage: bench_arena [--executor cuda|host] [--quick] [--max-gib N] [--reps N] [--json FILE]
//                    [--help]
// Exit status: 0 ok (or no GPU: skipped), 1 a reloaded byte was wrong or the run failed, 2 bad
// usage.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/resources.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::arena;
using bench::best_of;
using clock_type = std::chrono::steady_clock;

struct options {
  bool quick = false;
  int max_gib = 4;
  int reps = 5;
};

struct row {
  std::string set, method, limit_name;
  std::size_t tensors = 0, bytes = 0;
  double ms = 0, gbps = 0, limit_gbps = 0, ratio = 0;
  long wrong = -1;  ///< -1: not checked
  /// false: ratio = GB/s over the limit's; true: ratio = how many times faster the optimized
  /// offloader is than this method.
  bool speedup = false;
};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Device tensors of an optimizer-like set and the allocations behind them.
struct bench_set {
  std::string name;
  std::vector<buffer> allocations;
  std::vector<device_tensor> tensors;
  std::size_t bytes = 0;
};

/// Parameters with log-uniform sizes in [lo, hi] bytes (fp32), three states each (master weights,
/// exp_avg, exp_avg_sq), until `target` bytes. `flat`: each state kind is one device allocation
/// with its tensors back to back (a distributed optimizer's flat buffers); otherwise one
/// allocation per tensor (a caching allocator's blocks).
bench_set make_set(executor& ex, std::size_t target, std::size_t lo, std::size_t hi, bool flat,
                   unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(std::log(double(lo)), std::log(double(hi)));
  std::vector<std::size_t> params;
  std::size_t total = 0;
  while (total + 3 * lo <= target) {
    std::size_t b = static_cast<std::size_t>(std::exp(u(rng))) & ~std::size_t{3};
    b = std::min(std::max(b, lo), (target - total) / 3 & ~std::size_t{3});
    if (b == 0) break;
    params.push_back(b);
    total += 3 * b;
  }
  bench_set s;
  s.name = flat ? "flat" : "separate";
  s.bytes = total;
  if (flat) {
    std::size_t per_kind = total / 3;
    for (int k = 0; k < 3; ++k) {
      s.allocations.emplace_back(ex, memory_kind::device, per_kind);
      auto* base = s.allocations.back().as<unsigned char>();
      std::size_t at = 0;
      for (std::size_t b : params) {
        s.tensors.push_back({base + at, b});
        at += b;
      }
    }
  } else {
    for (int k = 0; k < 3; ++k) {
      for (std::size_t b : params) {
        s.allocations.emplace_back(ex, memory_kind::device, b);
        s.tensors.push_back({s.allocations.back().data(), b});
      }
    }
  }
  return s;
}

int pattern(std::size_t i, int salt) {
  return static_cast<int>((i * 37 + static_cast<std::size_t>(salt) * 101 + 1) & 0xff);
}

void fill(executor& ex, const bench_set& s, int salt, stream_ref st) {
  for (std::size_t i = 0; i < s.tensors.size(); ++i) {
    ex.fill(s.tensors[i].data, pattern(i, salt), s.tensors[i].bytes, st);
  }
  ex.synchronize(st);
}

/// Bytes that differ from the pattern `salt` wrote (reads every tensor back).
long count_wrong(executor& ex, const bench_set& s, int salt, stream_ref st) {
  long wrong = 0;
  std::vector<unsigned char> host;
  for (std::size_t i = 0; i < s.tensors.size(); ++i) {
    host.resize(s.tensors[i].bytes);
    ex.copy(host.data(), s.tensors[i].data, host.size(), st);
    ex.synchronize(st);
    const auto want = static_cast<unsigned char>(pattern(i, salt));
    wrong += std::count_if(host.begin(), host.end(), [want](unsigned char c) { return c != want; });
  }
  return wrong;
}

row make_row(const bench_set& s, std::string method, double sec, std::string limit_name,
             double limit_gbps, double bytes_factor = 1.0) {
  row r;
  r.set = s.name;
  r.method = std::move(method);
  r.tensors = s.tensors.size();
  r.bytes = s.bytes;
  r.ms = sec * 1e3;
  r.gbps = bytes_factor * double(s.bytes) / sec / 1e9;
  r.limit_name = std::move(limit_name);
  r.limit_gbps = limit_gbps;
  r.ratio = bench::ratio(r.gbps, limit_gbps);
  return r;
}

/// A baseline row whose ratio says how many times faster the optimized offloader is.
row speedup_row(const bench_set& s, std::string method, double sec, double optimized_gbps) {
  row r = make_row(s, std::move(method), sec, "optimized", optimized_gbps);
  r.speedup = true;
  r.ratio = bench::ratio(optimized_gbps, r.gbps);
  return r;
}

void print(const row& r) {
  char ratio[32] = "-";
  if (r.speedup) {
    std::snprintf(ratio, sizeof ratio, "%.1fx", r.ratio);
  } else if (r.limit_gbps > 0) {
    std::snprintf(ratio, sizeof ratio, "%.3f", r.ratio);
  }
  std::printf("%-9s %7zu %9.1f  %-36s %9.2f %8.2f   %-11s %8.2f %7s  %s\n", r.set.c_str(),
              r.tensors, double(r.bytes) / (1 << 20), r.method.c_str(), r.ms, r.gbps,
              r.limit_name.empty() ? "-" : r.limit_name.c_str(), r.limit_gbps, ratio,
              r.wrong < 0 ? "-" : std::to_string(r.wrong).c_str());
}

/// Writes the figures to `path` (bench::write_json).
void write_json(const std::string& path, const std::string& device, const std::string& command,
                const std::vector<row>& rows) {
  bench::json doc = {{"benchmark", "bench_arena"},
                     {"device", device},
                     {"command", command},
                     {"rows", bench::json::array()}};
  for (const row& r : rows) {
    doc["rows"].push_back({{"set", r.set},
                           {"method", r.method},
                           {"tensors", r.tensors},
                           {"bytes", r.bytes},
                           {"ms", r.ms},
                           {"gbps", r.gbps},
                           {"limit", r.limit_name},
                           {"limit_gbps", r.limit_gbps},
                           {"ratio", r.ratio},
                           {"ratio_is_speedup", r.speedup},
                           {"wrong", r.wrong}});
  }
  bench::write_json(path, doc);
}

void bench_size(executor& ex, std::size_t target, const options& opt, bool flat,
                std::vector<row>& rows) {
  const std::size_t lo = 4 << 10;
  const std::size_t hi = opt.quick ? (std::size_t{1} << 20) : (std::size_t{32} << 20);
  stream s1(ex), s2(ex);
  bench_set a = make_set(ex, target, lo, hi, flat, 1);
  bench_set b = make_set(ex, target, lo, hi, flat, 2);
  b.name = a.name;
  const std::size_t total = a.bytes;
  const auto total_d = static_cast<double>(total);
  const int reps = opt.reps;

  // Limits: one plain pinned copy of total bytes each way, and both ways at once on two streams.
  buffer dev_x(ex, memory_kind::device, total), host_x(ex, memory_kind::pinned, total);
  buffer dev_y(ex, memory_kind::device, total), host_y(ex, memory_kind::pinned, total);
  ex.fill(dev_x.data(), 1, total, s1);
  ex.fill(host_y.data(), 2, total, s1);
  ex.synchronize(s1);
  const double d2h = best_of(reps, [&] {
    ex.copy(host_x.data(), dev_x.data(), total, s1);
    ex.synchronize(s1);
  });
  const double h2d = best_of(reps, [&] {
    ex.copy(dev_y.data(), host_y.data(), total, s1);
    ex.synchronize(s1);
  });
  const double both = best_of(reps, [&] {
    ex.copy(host_x.data(), dev_x.data(), total, s1);
    ex.copy(dev_y.data(), host_y.data(), total, s2);
    ex.synchronize(s1);
    ex.synchronize(s2);
  });
  const double d2h_gbps = total_d / d2h / 1e9, h2d_gbps = total_d / h2d / 1e9;
  const double both_gbps = 2.0 * total_d / both / 1e9;
  dev_x.reset();
  host_x.reset();
  dev_y.reset();
  host_y.reset();
  rows.push_back(make_row(a, "limit: one pinned copy D2H", d2h, "", 0));
  rows.push_back(make_row(a, "limit: one pinned copy H2D", h2d, "", 0));
  rows.push_back(make_row(a, "limit: pinned D2H + H2D at once", both, "", 0, 2.0));
  for (std::size_t k = rows.size() - 3; k < rows.size(); ++k) print(rows[k]);

  // Optimized: the first offload allocates the arena; later ones are the steady state.
  fill(ex, a, 1, s1);
  coalesced_offloader opt_a(ex);
  {
    auto t0 = clock_type::now();
    ex.synchronize(opt_a.offload(a.tensors, s1).ref());
    rows.push_back(make_row(a, "optimized offload, first (allocates)", seconds_since(t0),
                            "pinned D2H", d2h_gbps));
    print(rows.back());
  }
  const double opt_off = best_of(reps, [&] { ex.synchronize(opt_a.offload(a.tensors, s1).ref()); });
  rows.push_back(make_row(a, "optimized offload (steady)", opt_off, "pinned D2H", d2h_gbps));
  print(rows.back());
  fill(ex, a, 9, s1);
  const double opt_re = best_of(reps, [&] { ex.synchronize(opt_a.reload(a.tensors, s1).ref()); });
  rows.push_back(make_row(a, "optimized reload (steady)", opt_re, "pinned H2D", h2d_gbps));
  rows.back().wrong = count_wrong(ex, a, 1, s1);
  print(rows.back());
  const double opt_off_gbps = total_d / opt_off / 1e9, opt_re_gbps = total_d / opt_re / 1e9;

  // Offload of A and reload of B at once, on two streams.
  {
    fill(ex, b, 2, s2);
    coalesced_offloader opt_b(ex);
    ex.synchronize(opt_b.offload(b.tensors, s2).ref());
    fill(ex, b, 9, s2);
    const double at_once = best_of(reps, [&] {
      event ea = opt_a.offload(a.tensors, s1);
      event eb = opt_b.reload(b.tensors, s2);
      ex.synchronize(ea.ref());
      ex.synchronize(eb.ref());
    });
    rows.push_back(
        make_row(a, "optimized offload A + reload B", at_once, "pinned both", both_gbps, 2.0));
    rows.back().wrong = count_wrong(ex, b, 2, s2);
    print(rows.back());
  }
  opt_a.release();

  // Reference: per-tensor pageable buffers and synchronous copies (one run: it is slow).
  {
    fill(ex, a, 3, s1);
    reference_offloader ref(ex);
    auto t0 = clock_type::now();
    ex.synchronize(ref.offload(a.tensors, s1).ref());
    const double off = seconds_since(t0);
    fill(ex, a, 9, s1);
    t0 = clock_type::now();
    ex.synchronize(ref.reload(a.tensors, s1).ref());
    const double re = seconds_since(t0);
    rows.push_back(speedup_row(a, "reference offload (pageable)", off, opt_off_gbps));
    print(rows.back());
    rows.push_back(speedup_row(a, "reference reload (pageable)", re, opt_re_gbps));
    rows.back().wrong = count_wrong(ex, a, 3, s1);
    print(rows.back());
  }

  // Per-tensor fresh pinned buffers: what a cache-less pinned offload pays for every step.
  {
    auto t0 = clock_type::now();
    std::vector<buffer> fresh;
    fresh.reserve(a.tensors.size());
    for (const device_tensor& t : a.tensors) {
      fresh.emplace_back(ex, memory_kind::pinned, t.bytes);
      ex.copy(fresh.back().data(), t.data, t.bytes, s1);
    }
    ex.synchronize(s1);
    const double off = seconds_since(t0);
    fresh.clear();
    rows.push_back(speedup_row(a, "per-tensor fresh pinned offload", off, opt_off_gbps));
    print(rows.back());
  }
}

/// The benchmark, once its command line is read.
int run(const bench::command_line& cl, options opt) {
  if (opt.quick) opt.reps = std::min(opt.reps, 2);
  std::string skipped;
  const std::unique_ptr<executor> ex = cl.make_executor(skipped);
  if (!ex) return cl.skip(skipped);
  std::vector<std::size_t> sizes;
  if (opt.quick) {
    sizes = {std::size_t{16} << 20};
  } else {
    // Four sets' worth of device memory per size (two sets, two limit buffers), with headroom.
    const memory_info mem = ex->device_memory(0);
    for (double gib : {1.0, 2.0, 4.0, 8.0}) {
      const auto bytes = static_cast<std::size_t>(gib * double(std::size_t{1} << 30));
      if (gib <= opt.max_gib && 4.5 * double(bytes) < double(mem.free)) sizes.push_back(bytes);
    }
  }
  std::printf(
      "bench_arena on %s (best of %d). ratio: GB/s as a fraction of the limit measured in this "
      "run; Nx: the optimized offloader is N times faster than that method\n",
      ex->name().c_str(), opt.reps);
  std::printf("%-9s %7s %9s  %-36s %9s %8s   %-11s %8s %7s  %s\n", "set", "tensors", "MiB",
              "method", "ms", "GB/s", "vs", "GB/s", "ratio", "#wrong");
  std::vector<row> rows;
  for (std::size_t bytes : sizes) {
    for (bool flat : {false, true}) bench_size(*ex, bytes, opt, flat, rows);
  }
  if (!cl.json_path().empty()) write_json(cl.json_path(), ex->name(), cl.command(), rows);
  long wrong = 0;
  for (const row& r : rows) wrong += std::max(0L, r.wrong);
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  bench::command_line cl(
      "bench_arena",
      "Offload and reload of optimizer-like tensor sets: the coalesced pinned arena against one "
      "plain pinned copy of the same bytes, per-tensor pageable and fresh-pinned copies, and "
      "offload of one set with reload of another against the both-directions limit, measured in "
      "the same run.",
      "Exit status: 0 ok (or no GPU: skipped), 1 a reloaded byte was wrong or the run failed (or "
      "--json could not be written), 2 bad usage.");
  CLI::App& app = cl.app();
  app.add_flag("--quick", opt.quick, "one 16 MiB set size, at most 2 repetitions (a smoke run)");
  app.add_option("--max-gib", opt.max_gib,
                 "largest set size in GiB (of 1, 2, 4 and 8, those up to it), 1..8 (default 4)")
      ->type_name("N")
      ->check(tools::integer_range(1, 8));
  app.add_option("--reps", opt.reps, "repetitions per figure, best taken, 1..100 (default 5)")
      ->type_name("N")
      ->check(tools::integer_range(1, 100));
  return cl.run(argc, argv, [&] { return run(cl, opt); });
}
