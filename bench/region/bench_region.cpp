// bench_region: pause and resume throughput of the graph-stable region against the plain pinned
// copies measured in the same run (the limit), and against a per-allocation synchronous backup
// (16 allocations, a fresh pinned buffer per pause, synchronous copies), side by side; and swap
// (one region paused while another of the same size resumes, an RL phase switch) against a pause
// then a resume of the same regions and against the link's both-directions limit measured in the
// same run (a plain pinned D2H and H2D of the same size at once, on two streams).
//
// Every time is the median over --reps rounds (default 5); within a round the plain copies and the
// region's operations take turns, so that a slow spell of the link falls on both sides of a ratio
// instead of on one.
//
// Usage: bench_region [--executor cuda|host] [--quick] [--min-mib N] [--max-mib N]
//                     [--chunk-mib N] [--reps N] [--baseline-max-mib N] [--no-swap]
//                     [--json FILE] [--help]
// Exit status: 0 ok (or no GPU: skipped), 1 a word came back wrong or a size failed, 2 bad usage.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "harness.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/workloads/region_patterns.hpp"

namespace {

using namespace offloadkit;
using bench::median;
using clock_type = std::chrono::steady_clock;
constexpr std::size_t mib = std::size_t{1} << 20;

struct options {
  bool quick = false;
  std::size_t min_mib = 256, max_mib = 8192, chunk_mib = 64, baseline_max_mib = 2048;
  int reps = 5;
  bool no_swap = false;
};

template <class F>
double seconds(F&& f) {
  const auto t0 = clock_type::now();
  f();
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Words at `p` that differ from the pattern `seed`, counted on `s`'s device.
unsigned long long wrong_words(executor& ex, const void* p, std::size_t bytes, std::uint32_t seed,
                               stream_ref s) {
  return region::mismatched_words(ex, p, bytes / 4, seed, s);
}

struct row {
  std::size_t bytes = 0;
  double d2h_s = 0, h2d_s = 0, pause_s = 0, resume_s = 0;
  double base_pause_s = 0, base_resume_s = 0;  // 0: not measured
  std::size_t free_drop = 0;
  unsigned long long wrong = 0;
  double both_s = 0, swap_s = 0, pause_resume_s = 0;  // swap: 0 when not measured
};

/// The swap figures of `r`: two regions of `bytes` traded back and forth by swap_with() and by
/// pause() + resume(), and the both-directions limit, the three taking turns in each round.
void measure_swap(executor& ex, const options& o, std::size_t bytes, row& r) {
  stream s(ex, 0), s2(ex, 0);
  buffer d1(ex, memory_kind::device, bytes, 0), d2(ex, memory_kind::device, bytes, 0);
  buffer p1(ex, memory_kind::pinned, bytes), p2(ex, memory_kind::pinned, bytes);
  ex.fill(d1.data(), 1, bytes, s);
  ex.copy(p2.data(), d1.data(), bytes, s);
  region::vmm_region a(ex, region::region_config{bytes, 0, o.chunk_mib * mib});
  region::vmm_region b(ex, region::region_config{bytes, 0, o.chunk_mib * mib});
  const auto seed_a = static_cast<std::uint32_t>(bytes / mib), seed_b = seed_a + 1;
  region::write_pattern(ex, a.data(), bytes / 4, seed_a, s);
  region::write_pattern(ex, b.data(), bytes / 4, seed_b, s);
  // Warm-up: both cached pinned buffers exist and each region has been swapped in once.
  b.pause(s);
  a.swap_with(b, region::pause_mode::preserve, s);
  b.swap_with(a, region::pause_mode::preserve, s);
  s.synchronize();
  std::vector<double> both, swap, pause_resume;
  for (int i = 0; i < o.reps; ++i) {
    both.push_back(seconds([&] {
      ex.copy(p1.data(), d1.data(), bytes, s);
      ex.copy(d2.data(), p2.data(), bytes, s2);
      s.synchronize();
      s2.synchronize();
    }));
    // a active, b paused
    swap.push_back(seconds([&] {
      a.swap_with(b, region::pause_mode::preserve, s);
      s.synchronize();
    }));
    pause_resume.push_back(seconds([&] {
      b.pause(s);
      a.resume(s);
      s.synchronize();
    }));
  }
  r.both_s = median(both);
  r.swap_s = median(swap);
  r.pause_resume_s = median(pause_resume);
  r.wrong += wrong_words(ex, a.data(), bytes, seed_a, s);
  a.swap_with(b, region::pause_mode::preserve, s);
  r.wrong += wrong_words(ex, b.data(), bytes, seed_b, s);
}

row measure(executor& ex, const options& o, std::size_t bytes) {
  row r;
  r.bytes = bytes;
  stream s(ex, 0);
  // The limit (one plain pinned copy each way, same size, same stream) and the region, taking
  // turns in each round: D2H, pause, H2D, resume. One warm-up cycle allocates the region's cached
  // pinned buffer.
  {
    buffer dev(ex, memory_kind::device, bytes, 0);
    buffer pin(ex, memory_kind::pinned, bytes);
    ex.fill(dev.data(), 1, bytes, s);
    ex.copy(pin.data(), dev.data(), bytes, s);
    ex.copy(dev.data(), pin.data(), bytes, s);
    region::vmm_region reg(ex, region::region_config{bytes, 0, o.chunk_mib * mib});
    const std::uint32_t seed = static_cast<std::uint32_t>(bytes / mib);
    region::write_pattern(ex, reg.data(), bytes / 4, seed, s);
    reg.pause(s);
    reg.resume(s);
    s.synchronize();
    std::vector<double> d2h, h2d, pause, resume;
    for (int i = 0; i < o.reps; ++i) {
      d2h.push_back(seconds([&] {
        ex.copy(pin.data(), dev.data(), bytes, s);
        s.synchronize();
      }));
      const std::size_t free_active = ex.device_memory(0).free;
      pause.push_back(seconds([&] { reg.pause(s); }));
      const std::size_t free_paused = ex.device_memory(0).free;
      r.free_drop = free_paused > free_active ? free_paused - free_active : 0;
      h2d.push_back(seconds([&] {
        ex.copy(dev.data(), pin.data(), bytes, s);
        s.synchronize();
      }));
      resume.push_back(seconds([&] {
        reg.resume(s);
        s.synchronize();
      }));
    }
    r.d2h_s = median(d2h);
    r.h2d_s = median(h2d);
    r.pause_s = median(pause);
    r.resume_s = median(resume);
    r.wrong += wrong_words(ex, reg.data(), bytes, seed, s);
  }
  // The baseline: 16 allocations, each backed up to a fresh pinned buffer with synchronous copies.
  if (bytes <= o.baseline_max_mib * mib) {
    constexpr int parts = 16;
    const std::size_t part = bytes / parts;
    std::vector<void*> dev(parts, nullptr), host(parts, nullptr);
    for (int i = 0; i < parts; ++i) {
      dev[i] = ex.allocate(memory_kind::device, part, 0);
      region::write_pattern(ex, dev[i], part / 4, 1000 + i, s);
    }
    s.synchronize();
    r.base_pause_s = seconds([&] {
      for (int i = 0; i < parts; ++i) {
        host[i] = ex.allocate(memory_kind::pinned, part);
        ex.copy(host[i], dev[i], part, s);
        ex.synchronize(s);
        ex.deallocate(memory_kind::device, dev[i], part);
      }
    });
    r.base_resume_s = seconds([&] {
      for (int i = 0; i < parts; ++i) {
        dev[i] = ex.allocate(memory_kind::device, part, 0);
        ex.copy(dev[i], host[i], part, s);
        ex.synchronize(s);
        ex.deallocate(memory_kind::pinned, host[i], part);
      }
    });
    for (int i = 0; i < parts; ++i) {
      r.wrong += wrong_words(ex, dev[i], part, 1000 + i, s);
      ex.deallocate(memory_kind::device, dev[i], part);
    }
  }
  return r;
}

double gbps(std::size_t bytes, double s) {
  return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0;
}

/// Writes the figures to `path` (bench::write_json).
void write_json(const std::string& path, const std::string& executor_name, const options& o,
                const std::vector<row>& rows) {
  bench::json doc = {
      {"benchmark", "region"}, {"executor", executor_name}, {"chunk_bytes", o.chunk_mib * mib},
      {"rounds", o.reps},      {"statistic", "median"},     {"rows", bench::json::array()}};
  for (const row& r : rows) {
    doc["rows"].push_back(
        {{"bytes", r.bytes},
         {"d2h_s", r.d2h_s},
         {"h2d_s", r.h2d_s},
         {"pause_s", r.pause_s},
         {"resume_s", r.resume_s},
         {"pause_ratio", r.d2h_s / r.pause_s},
         {"resume_ratio", r.h2d_s / r.resume_s},
         {"released_bytes", r.free_drop},
         {"baseline_pause_s", r.base_pause_s},
         {"baseline_resume_s", r.base_resume_s},
         {"speedup", (r.base_pause_s + r.base_resume_s) > 0
                         ? (r.base_pause_s + r.base_resume_s) / (r.pause_s + r.resume_s)
                         : 0},
         {"both_directions_s", r.both_s},
         {"swap_s", r.swap_s},
         {"pause_then_resume_s", r.pause_resume_s},
         {"swap_ratio", bench::ratio(r.both_s, r.swap_s)},
         {"wrong", r.wrong}});
  }
  bench::write_json(path, doc);
}

/// The benchmark, once its command line is read.
int run(const bench::command_line& cl, options o) {
  if (o.quick) {
    o.min_mib = std::min<std::size_t>(o.min_mib, 8);
    o.max_mib = std::min<std::size_t>(o.max_mib, 16);
    o.chunk_mib = std::min<std::size_t>(o.chunk_mib, 4);
    o.reps = std::min(o.reps, 2);
  }
  std::string skipped;
  const std::unique_ptr<executor> ex = cl.make_executor(skipped);
  if (!ex) return cl.skip(skipped);
  std::printf(
      "bench_region on %s, chunk %zu MiB, median of %d rounds (the plain copies and the region "
      "taking turns); ratios are to the plain pinned copy of the same size in this run; baseline "
      "= 16 allocations, fresh pinned buffer, synchronous copies\n",
      ex->name().c_str(), o.chunk_mib, o.reps);
  std::printf("%10s %10s %8s %7s %10s %8s %7s %10s %12s %9s %7s\n", "size", "pause ms", "GB/s",
              "/D2H", "resume ms", "GB/s", "/H2D", "freed MiB", "baseline ms", "speedup", "#wrong");
  std::vector<row> rows;
  int status = 0;
  for (std::size_t m = o.min_mib; m <= o.max_mib; m *= 2) {
    const std::size_t bytes = m * mib;
    // The plain copy's buffer and the region exist together; keep headroom.
    const std::size_t free = ex->device_memory(0).free;
    if (2 * bytes > free / 10 * 9) {
      std::printf("%6zu MiB  skipped: needs twice its size, %zu MiB free on the device\n", m,
                  free / mib);
      break;
    }
    row r;
    try {
      r = measure(*ex, o, bytes);
    } catch (const std::exception& e) {
      std::printf("%6zu MiB  failed: %s\n", m, e.what());
      status = 1;
      break;
    }
    // Two regions and the limit's two device buffers exist together.
    if (!o.no_swap && 4 * bytes > ex->device_memory(0).free / 10 * 9) {
      std::printf("%6zu MiB  swap skipped: needs four times its size, %zu MiB free\n", m,
                  ex->device_memory(0).free / mib);
    } else if (!o.no_swap) {
      try {
        measure_swap(*ex, o, bytes, r);
      } catch (const std::exception& e) {
        std::printf("%6zu MiB  swap failed: %s\n", m, e.what());
        status = 1;
        break;
      }
    }
    const double ours = r.pause_s + r.resume_s;
    const double base = r.base_pause_s + r.base_resume_s;
    char base_text[32] = "-", speed_text[32] = "-";
    if (base > 0) {
      std::snprintf(base_text, sizeof base_text, "%.1f", base * 1e3);
      std::snprintf(speed_text, sizeof speed_text, "%.1fx", base / ours);
    }
    std::printf("%6zu MiB %10.2f %8.1f %7.2f %10.2f %8.1f %7.2f %10zu %12s %9s %7llu\n", m,
                r.pause_s * 1e3, gbps(bytes, r.pause_s), r.d2h_s / r.pause_s, r.resume_s * 1e3,
                gbps(bytes, r.resume_s), r.h2d_s / r.resume_s, r.free_drop / mib, base_text,
                speed_text, r.wrong);
    if (r.wrong != 0) status = 1;
    rows.push_back(r);
  }
  if (!o.no_swap) {
    std::printf(
        "\nswap: one region paused while another of the same size resumes, vs pause then resume "
        "of the same regions; ratio = both-directions limit (plain pinned D2H + H2D at once) / "
        "swap time\n");
    std::printf("%10s %12s %10s %14s %8s %9s\n", "size", "limit ms", "swap ms", "pause+resume ms",
                "ratio", "speedup");
    for (const row& r : rows) {
      if (r.swap_s <= 0) continue;
      std::printf("%6zu MiB %12.2f %10.2f %14.2f %8.3f %8.2fx\n", r.bytes / mib, r.both_s * 1e3,
                  r.swap_s * 1e3, r.pause_resume_s * 1e3, r.both_s / r.swap_s,
                  r.pause_resume_s / r.swap_s);
    }
    std::printf("goal: ratio >= 0.90 for 1-8 GiB (about 1.6x faster than pause then resume)\n");
  }
  if (!cl.json_path().empty()) write_json(cl.json_path(), ex->name(), o, rows);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bench::command_line cl(
      "bench_region",
      "Pause and resume of the graph-stable region against plain pinned copies of the same size "
      "and a per-allocation synchronous backup; swap of two regions against pause then resume "
      "and the link's both-directions limit. Every ratio's two sides are measured in the same "
      "run, taking turns.",
      "Exit status: 0 ok (or no GPU: skipped), 1 a word came back wrong or a size failed (or "
      "--json could not be written), 2 bad usage.");
  CLI::App& app = cl.app();
  app.add_flag("--quick", o.quick,
               "small sizes: 8 to 16 MiB, chunks of 4 MiB, at most 2 rounds (a smoke run)");
  app.add_option("--min-mib", o.min_mib,
                 "smallest region size in MiB, doubled up to --max-mib, 1..1048576 (default 256)")
      ->type_name("N")
      ->check(tools::unsigned_range(1, std::uint64_t{1} << 20));
  app.add_option("--max-mib", o.max_mib, "largest region size in MiB, 1..1048576 (default 8192)")
      ->type_name("N")
      ->check(tools::unsigned_range(1, std::uint64_t{1} << 20));
  app.add_option("--chunk-mib", o.chunk_mib, "the region's chunk in MiB, 1..65536 (default 64)")
      ->type_name("N")
      ->check(tools::unsigned_range(1, std::uint64_t{1} << 16));
  app.add_option("--reps", o.reps, "timed rounds per size, median taken, 1..100 (default 5)")
      ->type_name("N")
      ->check(tools::integer_range(1, 100));
  app.add_option("--baseline-max-mib", o.baseline_max_mib,
                 "largest size at which the slow per-allocation baseline runs, 0 (never)..1048576 "
                 "(default 2048)")
      ->type_name("N")
      ->check(tools::unsigned_range(0, std::uint64_t{1} << 20));
  app.add_flag("--no-swap", o.no_swap, "leave out the swap figures");
  // Checked once every option is read, and refused like any other bad value.
  app.callback([&o] {
    if (o.min_mib > o.max_mib) {
      throw CLI::ValidationError("--min-mib", std::to_string(o.min_mib) +
                                                  " is out of range: valid range 1.." +
                                                  std::to_string(o.max_mib) + " (--max-mib)");
    }
  });
  return cl.run(argc, argv, [&] { return run(cl, o); });
}
