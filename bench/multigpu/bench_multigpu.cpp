// bench_multigpu: what the other GPUs of a machine cost each one. Each figure is measured for one
// device alone and then for every device at once; the "alone" figure is the limit, measured in
// the same run, and the ratio is together / alone (1.0: the devices do not slow each other down):
//   (a) pinned copies, H2D and D2H: per device one device buffer, one pinned buffer and one stream;
//   (b) pause + resume of one optimized (vmm) region per device, each driven by a host thread of
//       its own, as one process per GPU would.
// With one device only the alone figures are measured: the together ones need two GPUs.
//
//   bench_multigpu [--executor cuda|host] [--quick] [--mib N] [--chunk-mib N] [--reps N]
//                  [--devices N] [--json FILE] [--help]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/workloads/region_patterns.hpp"

namespace {

using namespace offloadkit;
using clock_type = std::chrono::steady_clock;
constexpr std::size_t mib = std::size_t{1} << 20;
constexpr const char* program = "bench_multigpu";
// Ranges of the numeric options.
constexpr std::uint64_t max_mib = 262144;  // 256 GiB per device
constexpr std::uint64_t max_chunk_mib = 65536;
constexpr std::int64_t max_reps = 1000;
constexpr int max_host_devices = 16;

struct options {
  bool quick = false;
  std::size_t mib_per_device = 1024;
  std::size_t chunk_mib = 64;
  int reps = 5;
  int devices = 0;  ///< 0: every device of the executor
};

/// Adds the benchmark's options to `cl`, read into `o`.
void add_options(bench::command_line& cl, options& o) {
  CLI::App& app = cl.app();
  cl.executor_option().description(
      "cuda (default) or host: the CPU executor with 2 simulated devices");
  app.add_flag("--quick", o.quick,
               "a short run: 8 MiB per device, 4 MiB chunks, 2 repetitions (unless given)");
  app.add_option("--mib", o.mib_per_device,
                 "bytes per device, in MiB, 1.." + std::to_string(max_mib) + " (default 1024)")
      ->type_name("N")
      ->check(tools::unsigned_range(1, max_mib));
  app.add_option("--chunk-mib", o.chunk_mib,
                 "region chunk size in MiB, 1.." + std::to_string(max_chunk_mib) + " (default 64)")
      ->type_name("N")
      ->check(tools::unsigned_range(1, max_chunk_mib));
  app.add_option("--reps", o.reps,
                 "repetitions, best taken, 1.." + std::to_string(max_reps) + " (default 5)")
      ->type_name("N")
      ->check(tools::integer_range(1, max_reps));
  app.add_option("--devices", o.devices,
                 "use the first N devices, 1..1024 (default: all; the host executor has at most " +
                     std::to_string(max_host_devices) + ")")
      ->type_name("N")
      ->check(tools::integer_range(1, 1024));
}

std::size_t at(int device) { return static_cast<std::size_t>(device); }

/// The pattern seeds: one per device and use, so that no buffer can pass for another.
std::uint32_t copy_seed(int device) { return 100U + static_cast<std::uint32_t>(device); }
std::uint32_t region_seed(int device) { return 200U + static_cast<std::uint32_t>(device); }

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch())
      .count();
}

double gbps(std::size_t bytes, double s) {
  return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0;
}

/// Runs fn(k) for k in [0, n), each on a thread of its own, all released at once; returns each
/// one's seconds. The first exception thrown by any of them is rethrown once all have finished.
std::vector<double> run_together(int n, const std::function<void(int)>& fn) {
  std::vector<double> secs(at(n), 0);
  std::vector<std::exception_ptr> errors(at(n));
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::vector<std::thread> threads;
  auto release = [&] {
    {
      const std::lock_guard<std::mutex> lock(m);
      go = true;
    }
    cv.notify_all();
  };
  try {
    for (int k = 0; k < n; ++k) {
      threads.emplace_back([&, k] {
        {
          std::unique_lock<std::mutex> lock(m);
          cv.wait(lock, [&] { return go; });
        }
        try {
          const auto t0 = clock_type::now();
          fn(k);
          secs[at(k)] = seconds_between(t0, clock_type::now());
        } catch (...) {
          errors[at(k)] = std::current_exception();
        }
      });
    }
  } catch (...) {
    // A thread could not start: let those that did run and finish before reporting it.
    release();
    for (auto& t : threads) t.join();
    throw;
  }
  release();
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return secs;
}

/// Words at `p` that differ from the pattern `seed`, counted on `s`'s device.
unsigned long long wrong_words(executor& ex, const void* p, std::size_t bytes, std::uint32_t seed,
                               stream_ref s) {
  return region::mismatched_words(ex, p, bytes / 4, seed, s);
}

/// One figure of one device: alone, and together with every other device (negative: not
/// measured, fewer than two devices).
struct figure {
  int device = 0;
  std::string what;  ///< "h2d", "d2h", "pause", "resume"
  double alone_s = 0;
  double together_s = -1;
  unsigned long long wrong = 0;
};

/// The same operation on every device at once: bytes over the time the last device needed.
struct aggregate {
  std::string what;
  double together_s = -1;
  double sum_alone_gbps = 0;
};

enum class direction { h2d, d2h };

struct copy_lane {
  buffer dev, pin;
  stream s;
};

/// Issues one copy per lane in `lanes` (indices into `all`), each on its own stream, and returns
/// each one's seconds from the common start to its completion (a host function queued behind the
/// copy stamps the time, so that a lane that finishes early is not charged for the others).
std::vector<double> timed_copies(executor& ex, std::vector<copy_lane>& all,
                                 const std::vector<int>& lanes, direction dir) {
  const std::size_t n = lanes.size();
  // Shared with the host functions: one still queued when a later copy throws outlives this call.
  const auto stamps = std::make_shared<std::vector<std::atomic<std::int64_t>>>(n);
  const std::int64_t t0 = now_ns();
  for (std::size_t k = 0; k < n; ++k) {
    copy_lane& l = all[at(lanes[k])];
    const std::size_t bytes = l.dev.size();
    if (dir == direction::h2d) {
      ex.copy(l.dev.data(), l.pin.data(), bytes, l.s);
    } else {
      ex.copy(l.pin.data(), l.dev.data(), bytes, l.s);
    }
    ex.host_function([stamps, k] { (*stamps)[k].store(now_ns()); }, l.s);
  }
  for (const int lane : lanes) all[at(lane)].s.synchronize();
  std::vector<double> secs(n);
  for (std::size_t k = 0; k < n; ++k) {
    secs[k] = static_cast<double>((*stamps)[k].load() - t0) / 1e9;
  }
  return secs;
}

/// (a): per device and direction, the best of `reps` copies alone and all devices at once.
void measure_copies(executor& ex, const options& o, int devices, std::vector<figure>& out,
                    std::vector<aggregate>& agg) {
  const std::size_t bytes = o.mib_per_device * mib;
  std::vector<copy_lane> lanes;
  std::vector<int> every;
  for (int d = 0; d < devices; ++d) {
    lanes.push_back({buffer(ex, memory_kind::device, bytes, d),
                     buffer(ex, memory_kind::pinned, bytes), stream(ex, d)});
    every.push_back(d);
    // The pattern that the D2H copies take out and the H2D copies bring back.
    region::write_pattern(ex, lanes.back().dev.data(), bytes / 4, copy_seed(d), lanes.back().s);
  }
  std::vector<figure> rows_of[2];  // by direction: d2h, h2d
  for (const direction dir : {direction::d2h, direction::h2d}) {
    const char* name = dir == direction::h2d ? "h2d" : "d2h";
    if (dir == direction::h2d) {
      // The device buffers start wrong, so that only the H2D copies can make them right again.
      for (auto& l : lanes) ex.fill(l.dev.data(), 0, bytes, l.s);
    }
    (void)timed_copies(ex, lanes, every, dir);  // warm-up
    std::vector<figure> rows;
    for (int d = 0; d < devices; ++d) {
      figure f;
      f.device = d;
      f.what = name;
      f.alone_s = 1e30;
      for (int r = 0; r < o.reps; ++r) {
        f.alone_s = std::min(f.alone_s, timed_copies(ex, lanes, {d}, dir)[0]);
      }
      rows.push_back(f);
    }
    aggregate a;
    a.what = name;
    for (const figure& f : rows) a.sum_alone_gbps += gbps(bytes, f.alone_s);
    if (devices > 1) {
      for (figure& f : rows) f.together_s = 1e30;
      a.together_s = 1e30;
      for (int r = 0; r < o.reps; ++r) {
        const std::vector<double> t = timed_copies(ex, lanes, every, dir);
        for (std::size_t k = 0; k < rows.size(); ++k) {
          rows[k].together_s = std::min(rows[k].together_s, t[k]);
        }
        a.together_s = std::min(a.together_s, *std::max_element(t.begin(), t.end()));
      }
    }
    if (dir == direction::h2d) {
      for (int d = 0; d < devices; ++d) {
        copy_lane& l = lanes[at(d)];
        rows[at(d)].wrong = wrong_words(ex, l.dev.data(), bytes, copy_seed(d), l.s);
      }
    }
    rows_of[dir == direction::h2d ? 1 : 0] = rows;
    agg.push_back(a);
  }
  for (int d = 0; d < devices; ++d) {
    for (const auto& rows : rows_of) out.push_back(rows[at(d)]);
  }
}

/// (b): per device, the best of `reps` pauses and resumes of its region alone, then of every
/// region at once (one host thread per device, all released together).
void measure_regions(executor& ex, const options& o, int devices, std::vector<figure>& out,
                     std::vector<aggregate>& agg) {
  const std::size_t bytes = o.mib_per_device * mib;
  std::vector<std::unique_ptr<region::vmm_region>> regions;
  std::vector<stream> streams;
  for (int d = 0; d < devices; ++d) {
    streams.emplace_back(ex, d);
    regions.push_back(std::make_unique<region::vmm_region>(
        ex, region::region_config{bytes, d, o.chunk_mib * mib}));
    region::write_pattern(ex, regions.back()->data(), bytes / 4, region_seed(d), streams.back());
    // A first cycle allocates the cached pinned buffer; the timed ones are the steady state.
    regions.back()->pause(streams.back());
    regions.back()->resume(streams.back());
    streams.back().synchronize();
  }
  auto pause = [&](int d) { regions[at(d)]->pause(streams[at(d)]); };
  auto resume = [&](int d) {
    regions[at(d)]->resume(streams[at(d)]);
    streams[at(d)].synchronize();
  };
  std::vector<figure> pauses, resumes;
  for (int d = 0; d < devices; ++d) {
    figure p, r;
    p.device = r.device = d;
    p.what = "pause";
    r.what = "resume";
    p.alone_s = r.alone_s = 1e30;
    for (int i = 0; i < o.reps; ++i) {
      auto t0 = clock_type::now();
      pause(d);
      auto t1 = clock_type::now();
      resume(d);
      auto t2 = clock_type::now();
      p.alone_s = std::min(p.alone_s, seconds_between(t0, t1));
      r.alone_s = std::min(r.alone_s, seconds_between(t1, t2));
    }
    pauses.push_back(p);
    resumes.push_back(r);
  }
  aggregate ap, ar;
  ap.what = "pause";
  ar.what = "resume";
  for (int d = 0; d < devices; ++d) {
    ap.sum_alone_gbps += gbps(bytes, pauses[at(d)].alone_s);
    ar.sum_alone_gbps += gbps(bytes, resumes[at(d)].alone_s);
  }
  if (devices > 1) {
    for (auto* rows : {&pauses, &resumes}) {
      for (figure& f : *rows) f.together_s = 1e30;
    }
    ap.together_s = ar.together_s = 1e30;
    for (int i = 0; i < o.reps; ++i) {
      const std::vector<double> tp = run_together(devices, pause);
      const std::vector<double> tr = run_together(devices, resume);
      for (std::size_t k = 0; k < tp.size(); ++k) {
        pauses[k].together_s = std::min(pauses[k].together_s, tp[k]);
        resumes[k].together_s = std::min(resumes[k].together_s, tr[k]);
      }
      ap.together_s = std::min(ap.together_s, *std::max_element(tp.begin(), tp.end()));
      ar.together_s = std::min(ar.together_s, *std::max_element(tr.begin(), tr.end()));
    }
  }
  for (int d = 0; d < devices; ++d) {
    const auto& reg = *regions[at(d)];
    resumes[at(d)].wrong = wrong_words(ex, reg.data(), bytes, region_seed(d), streams[at(d)]);
  }
  for (int d = 0; d < devices; ++d) {
    out.push_back(pauses[at(d)]);
    out.push_back(resumes[at(d)]);
  }
  agg.push_back(ap);
  agg.push_back(ar);
}

void print_rows(const std::vector<figure>& rows, const std::vector<aggregate>& agg,
                std::size_t bytes, int devices) {
  std::printf("%8s %-7s %10s %8s %12s %8s %7s %7s\n", "device", "op", "alone ms", "GB/s",
              "together ms", "GB/s", "ratio", "#wrong");
  for (const figure& f : rows) {
    char together[64] = "           -        -       -";
    if (f.together_s >= 0) {
      std::snprintf(together, sizeof together, "%12.2f %8.1f %7.2f", f.together_s * 1e3,
                    gbps(bytes, f.together_s), f.alone_s / f.together_s);
    }
    std::printf("%8d %-7s %10.2f %8.1f %s %7llu\n", f.device, f.what.c_str(), f.alone_s * 1e3,
                gbps(bytes, f.alone_s), together, f.wrong);
  }
  for (const aggregate& a : agg) {
    if (a.together_s < 0) continue;
    const double all = gbps(bytes * static_cast<std::size_t>(devices), a.together_s);
    std::printf(
        "%8s %-7s %10s %8.1f %12.2f %8.1f %7.2f   (GB/s: sum of alone, all at once; "
        "ratio: all at once / sum)\n",
        "all", a.what.c_str(), "", a.sum_alone_gbps, a.together_s * 1e3, all,
        all / a.sum_alone_gbps);
  }
}

/// A JSON number, or null where there is none (not measured; not finite, as write_json does).
bench::json json_number(double v, bool measured = true) {
  return measured ? bench::json(v) : bench::json(nullptr);
}

bench::json figures_json(const std::vector<figure>& rows, std::size_t bytes) {
  bench::json out = bench::json::array();
  for (const figure& r : rows) {
    const bool together = r.together_s >= 0;
    out.push_back({{"device", r.device},
                   {"op", r.what},
                   {"alone_s", json_number(r.alone_s)},
                   {"alone_gbps", json_number(gbps(bytes, r.alone_s))},
                   {"together_s", json_number(r.together_s, together)},
                   {"together_gbps", json_number(gbps(bytes, r.together_s), together)},
                   {"ratio", json_number(r.alone_s / r.together_s, together)},
                   {"wrong", r.wrong}});
  }
  return out;
}

bench::json aggregates_json(const std::vector<aggregate>& rows, std::size_t bytes, int devices) {
  bench::json out = bench::json::array();
  for (const aggregate& a : rows) {
    const bool together = a.together_s >= 0;
    const double all = gbps(bytes * static_cast<std::size_t>(devices), a.together_s);
    out.push_back({{"op", a.what},
                   {"sum_alone_gbps", json_number(a.sum_alone_gbps)},
                   {"together_s", json_number(a.together_s, together)},
                   {"together_gbps", json_number(all, together)},
                   {"ratio", json_number(all / a.sum_alone_gbps, together)}});
  }
  return out;
}

/// The benchmark, once its command line is read.
int run(const bench::command_line& cl, const options& o) {
  std::unique_ptr<executor> ex;
  if (cl.executor_name() == "cuda") {
    if (const std::string reason = cuda_unavailable_reason(); !reason.empty()) {
      return cl.skip(reason);
    }
    const int available = cuda_executor().device_count();
    if (o.devices > available) {
      throw tools::usage_error("--devices: " + std::to_string(o.devices) +
                               " is out of range: valid range 1.." + std::to_string(available) +
                               " (the GPUs here)");
    }
    cuda_executor_options opts;
    opts.devices = o.devices == 0 ? -1 : o.devices;
    ex = std::make_unique<cuda_executor>(opts);
  } else {
    if (o.devices > max_host_devices) {
      throw tools::usage_error("--devices: " + std::to_string(o.devices) +
                               " is out of range: valid range 1.." +
                               std::to_string(max_host_devices) + " (host executor)");
    }
    host_executor_options opts;
    if (o.devices != 0) opts.devices = o.devices;
    ex = std::make_unique<host_executor>(opts);
  }
  const int devices = ex->device_count();
  const std::size_t bytes = o.mib_per_device * mib;
  const std::string note =
      devices > 1 ? "" : "one device: the together figures need 2 GPUs (only alone is measured)";
  std::printf(
      "%s on %s: %d device(s), %zu MiB per device, best of %d. alone: one device at a time; "
      "together: every device at once; ratio = together GB/s / alone GB/s, same device, this run\n",
      program, ex->name().c_str(), devices, o.mib_per_device, o.reps);
  if (!note.empty()) std::printf("note: %s\n", note.c_str());

  std::vector<figure> copies, regions;
  std::vector<aggregate> copies_all, regions_all;
  std::printf(
      "\npinned copies (each device: its own stream and pinned buffer; #wrong: words that differ "
      "after D2H then H2D, on the h2d row)\n");
  measure_copies(*ex, o, devices, copies, copies_all);
  print_rows(copies, copies_all, bytes, devices);
  std::printf(
      "\nregion pause + resume (vmm_region, %zu MiB chunks; each device: its own host thread and "
      "stream; #wrong: words that differ after every cycle, on the resume row)\n",
      o.chunk_mib);
  measure_regions(*ex, o, devices, regions, regions_all);
  print_rows(regions, regions_all, bytes, devices);

  unsigned long long wrong = 0;
  for (const auto* rows : {&copies, &regions}) {
    for (const figure& f : *rows) wrong += f.wrong;
  }
  if (!cl.json_path().empty()) {
    bench::json doc = {{"benchmark", "multigpu"},
                       {"executor", ex->name()},
                       {"command", cl.command()},
                       {"devices", devices},
                       {"bytes_per_device", bytes},
                       {"chunk_bytes", o.chunk_mib * mib},
                       {"reps", o.reps},
                       {"together_measured", devices > 1},
                       {"note", note},
                       {"copies", figures_json(copies, bytes)},
                       {"copies_all", aggregates_json(copies_all, bytes, devices)},
                       {"regions", figures_json(regions, bytes)},
                       {"regions_all", aggregates_json(regions_all, bytes, devices)},
                       {"wrong", wrong}};
    bench::write_json(cl.json_path(), doc);
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bench::command_line cl(
      program,
      "Pinned copy bandwidth (H2D, D2H) and pause + resume of one optimized region per device, "
      "each device alone and then every device at once; ratio = together / alone.",
      "Exit status: 0 ok (or no GPU: skipped), 1 a result was wrong or the run failed, 2 bad "
      "usage.");
  add_options(cl, o);
  return cl.run(argc, argv, [&] {
    if (o.quick) {
      if (cl.app().count("--mib") == 0) o.mib_per_device = 8;
      if (cl.app().count("--chunk-mib") == 0) o.chunk_mib = 4;
      if (cl.app().count("--reps") == 0) o.reps = 2;
    }
    return run(cl, o);
  });
}
