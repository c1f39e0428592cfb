// bench_activation: training-step time with the optimized activation offloader versus no offload,
// over compute/copy ratios from 0.5 to 4 (the driver's compute kernel is calibrated to a multiple
// of one layer's copy time). Reports the overhead over no offload and, where copy dominates, the
// ratio to the copy floor: the bytes actually moved each way over the pinned bandwidth measured in
// the same run. Every step verifies every restored tensor on the device (#wrong).
//
// Back-to-back offload steps are NVTX ranges "step offload" (no-offload steps "baseline step",
// phase-timed ones "phase-timed ..."), so that `offloadkit capture -- bench_activation --ratio R`
// measures copy/compute overlap in the offload steps alone.
//
//   bench_activation [--executor cuda|host] [--quick] [--layers N] [--mib-per-layer M]
//                    [--ratio R] [--json FILE] [--help]
// Exit status: 0 ok (or no GPU: skipped), 1 a restored tensor was wrong or the run failed (or
// --json could not be written), 2 bad usage.
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "harness.hpp"
#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/workloads/training_step.hpp"

namespace {

using namespace offloadkit;
using bench::median;
using namespace offloadkit::activation;

struct args {
  bool quick = false;
  int layers = 8;
  double mib_per_layer = 0;  // 0: 128 on cuda, 2 on host
  double ratio = 0;          // 0: the sweep
};

struct row {
  double ratio = 0;
  double d2h_mib = 0, h2d_mib = 0;
  double t_none = 0, t_opt = 0;
  double floor = 0;  // copy floor: d2h bytes / bw_d2h + h2d bytes / bw_h2d
  // Phases timed on their own (phase_sync): forward and backward, without and with offload, and
  // each phase's copy floor (all bytes of the step move in that phase when phases are separated).
  double fw_none = 0, fw_opt = 0, fw_floor = 0;
  double bw_none = 0, bw_opt = 0, bw_floor = 0;
  std::size_t from_source = 0;
  std::uint64_t wrong = 0;
};

/// One step of `step` inside an NVTX range named for what it is (see the header).
step_report timed_step(training_step& step, offloader* off, std::uint64_t seed,
                       const step_options& so) {
  nvtxRangePushA(off == nullptr  ? "baseline step"
                 : so.phase_sync ? "phase-timed offload step"
                                 : "step offload");
  try {
    step_report r = step.run(off, seed, so);
    nvtxRangePop();
    return r;
  } catch (...) {
    nvtxRangePop();
    throw;
  }
}

std::uint64_t wrong_of(const step_report& r) {
  return r.wrong_words + r.wrong_device + r.wrong_meta + r.bad_releases;
}

/// The benchmark, once its command line is read.
int run(const bench::command_line& cl, const args& a) {
  std::string skipped;
  const std::unique_ptr<executor> ex = cl.make_executor(skipped);
  if (!ex) return cl.skip(skipped);

  const bool gpu = cl.executor_name() == "cuda";
  const double mib = a.mib_per_layer > 0 ? a.mib_per_layer : (gpu ? 128.0 : 2.0);
  const std::size_t per_layer = static_cast<std::size_t>(mib * 1024 * 1024);
  const std::size_t threads = gpu ? 32768 : 64;
  const int reps = a.quick ? 2 : 5;

  // One layer saves four bf16 tensors of equal size ([rows, 1024]).
  std::vector<layer_spec> layers(a.layers);
  const std::int64_t rows = static_cast<std::int64_t>(per_layer / 4 / 2 / 1024);
  for (auto& l : layers) {
    for (int j = 0; j < 4; ++j) l.saved.push_back({{rows, 1024}, dtype::bf16});
  }
  const std::size_t layer_bytes = static_cast<std::size_t>(rows) * 1024 * 2 * 4;

  const std::size_t probe = std::min<std::size_t>(layer_bytes, std::size_t{256} << 20);
  const double bw_d2h = bench::pinned_copy_bandwidth(*ex, probe, true, reps + 2);
  const double bw_h2d = bench::pinned_copy_bandwidth(*ex, probe, false, reps + 2);
  const double layer_d2h = static_cast<double>(layer_bytes) / bw_d2h;
  const double layer_h2d = static_cast<double>(layer_bytes) / bw_h2d;

  std::printf(
      "# activation offload, %s executor: %d layers x %.1f MiB saved (4 bf16 tensors each)\n",
      ex->name().c_str(), a.layers, static_cast<double>(layer_bytes) / (1 << 20));
  std::printf("# pinned bandwidth measured now: D2H %.2f GB/s, H2D %.2f GB/s (%zu MiB copies)\n",
              bw_d2h / 1e9, bw_h2d / 1e9, probe >> 20);
  std::printf(
      "# ratio = layer compute time / layer copy time (each direction); overhead = "
      "offload/none - 1;\n# floor = moved bytes over the measured bandwidth, both "
      "directions; limit = max(none, floor)\n");
  std::printf("%6s %10s %10s %10s %10s %9s %10s %9s %9s %8s %7s\n", "ratio", "D2H MiB", "H2D MiB",
              "none ms", "offload ms", "overhead", "floor ms", "/floor", "/limit", "on-dev",
              "#wrong");

  training_step step(*ex, layers, threads);
  offload_options opts;
  opts.keep_threshold = 0;
  opts.prefetch_bytes = 3 * layer_bytes;
  opts.prefetch_layers = 2;
  async_offloader off(*ex, opts);
  step_options so;
  so.poison_on_release = false;

  const std::vector<double> ratios = a.ratio > 0 ? std::vector<double>{a.ratio}
                                     : a.quick   ? std::vector<double>{0.5, 2}
                                                 : std::vector<double>{0.5, 1, 1.5, 2, 3, 4};
  std::vector<row> rows_out;
  std::uint64_t total_wrong = 0;
  for (const double r : ratios) {
    const auto fw = calibrate_iterations(*ex, 0, threads, r * layer_d2h);
    const auto bw = calibrate_iterations(*ex, 0, threads, r * layer_h2d);
    step.set_iterations(fw, bw);
    row out;
    out.ratio = r;
    std::vector<double> t_none, t_opt;
    (void)step.run(nullptr, 1, so);  // warm the driver's pool
    for (int i = 0; i < reps; ++i) {
      const step_report rep = timed_step(step, nullptr, 100 + i, so);
      out.wrong += wrong_of(rep);
      t_none.push_back(rep.seconds);
    }
    (void)step.run(&off, 2, so);  // warm the offloader's pools
    std::size_t d2h = 0, h2d = 0;
    for (int i = 0; i < reps; ++i) {
      const offload_stats before = off.stats();
      const step_report rep = timed_step(step, &off, 200 + i, so);
      const offload_stats after = off.stats();
      out.wrong += wrong_of(rep);
      t_opt.push_back(rep.seconds);
      d2h = after.offloaded_bytes - before.offloaded_bytes;
      h2d = after.restored_bytes - before.restored_bytes;
      out.from_source = after.served_from_source - before.served_from_source;
    }
    {
      step_options ps = so;
      ps.phase_sync = true;
      std::vector<double> fn, bn, fo, bo;
      std::size_t pd2h = 0, ph2d = 0;
      for (int i = 0; i < reps; ++i) {
        const step_report rn = timed_step(step, nullptr, 300 + i, ps);
        const offload_stats before = off.stats();
        const step_report ro = timed_step(step, &off, 400 + i, ps);
        const offload_stats after = off.stats();
        out.wrong += wrong_of(rn) + wrong_of(ro);
        fn.push_back(rn.forward_seconds);
        bn.push_back(rn.backward_seconds);
        fo.push_back(ro.forward_seconds);
        bo.push_back(ro.backward_seconds);
        pd2h = after.offloaded_bytes - before.offloaded_bytes;
        ph2d = after.restored_bytes - before.restored_bytes;
      }
      out.fw_none = median(fn);
      out.bw_none = median(bn);
      out.fw_opt = median(fo);
      out.bw_opt = median(bo);
      out.fw_floor = static_cast<double>(pd2h) / bw_d2h;
      out.bw_floor = static_cast<double>(ph2d) / bw_h2d;
    }
    out.t_none = median(t_none);
    out.t_opt = median(t_opt);
    out.d2h_mib = static_cast<double>(d2h) / (1 << 20);
    out.h2d_mib = static_cast<double>(h2d) / (1 << 20);
    out.floor = static_cast<double>(d2h) / bw_d2h + static_cast<double>(h2d) / bw_h2d;
    total_wrong += out.wrong;
    const double limit = std::max(out.t_none, out.floor);
    std::printf("%6.2f %10.1f %10.1f %10.3f %10.3f %8.1f%% %10.3f %9.3f %9.3f %8zu %7llu\n",
                out.ratio, out.d2h_mib, out.h2d_mib, out.t_none * 1e3, out.t_opt * 1e3,
                (out.t_opt / out.t_none - 1) * 100, out.floor * 1e3, out.t_opt / out.floor,
                out.t_opt / limit, out.from_source, static_cast<unsigned long long>(out.wrong));
    std::fflush(stdout);
    rows_out.push_back(out);
  }
  std::printf(
      "# on-dev: tensors of the last layer handed back from their still-resident source "
      "(not copied back)\n");
  std::printf(
      "\n# each phase on its own (synchronized between forward and backward; every "
      "tensor moves both ways)\n# limit = max(phase without offload, phase copy floor)\n");
  std::printf("%6s %9s %9s %9s %9s %9s %9s %9s %9s\n", "ratio", "fw none", "fw offl", "D2H flr",
              "fw/limit", "bw none", "bw offl", "H2D flr", "bw/limit");
  for (const row& o : rows_out) {
    std::printf("%6.2f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", o.ratio, o.fw_none * 1e3,
                o.fw_opt * 1e3, o.fw_floor * 1e3, o.fw_opt / std::max(o.fw_none, o.fw_floor),
                o.bw_none * 1e3, o.bw_opt * 1e3, o.bw_floor * 1e3,
                o.bw_opt / std::max(o.bw_none, o.bw_floor));
  }
  std::printf("# (times in ms)\n");

  if (!cl.json_path().empty()) {
    bench::json doc = {
        {"benchmark", "activation"},   {"executor", ex->name()}, {"layers", a.layers},
        {"layer_bytes", layer_bytes},  {"bw_d2h", bw_d2h},       {"bw_h2d", bw_h2d},
        {"rows", bench::json::array()}};
    for (const row& o : rows_out) {
      doc["rows"].push_back(
          {{"ratio", o.ratio},
           {"d2h_bytes", o.d2h_mib * (1 << 20)},
           {"h2d_bytes", o.h2d_mib * (1 << 20)},
           {"none_s", o.t_none},
           {"offload_s", o.t_opt},
           {"overhead", (o.t_opt / o.t_none - 1)},
           {"floor_s", o.floor},
           {"ratio_to_floor", o.t_opt / o.floor},
           {"ratio_to_limit", o.t_opt / std::max(o.t_none, o.floor)},
           {"served_from_source", o.from_source},
           {"forward", {{"none_s", o.fw_none}, {"offload_s", o.fw_opt}, {"floor_s", o.fw_floor}}},
           {"backward", {{"none_s", o.bw_none}, {"offload_s", o.bw_opt}, {"floor_s", o.bw_floor}}},
           {"wrong", o.wrong}});
    }
    bench::write_json(cl.json_path(), doc);
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  args a;
  bench::command_line cl(
      "bench_activation",
      "Training-step time with the optimized activation offloader against no offload, over "
      "compute/copy ratios, and each phase against its copy floor measured in the same run.",
      "Exit status: 0 ok (or no GPU: skipped), 1 a restored tensor was wrong or the run failed "
      "(or --json could not be written), 2 bad usage.");
  CLI::App& app = cl.app();
  app.add_flag("--quick", a.quick, "a small stack and a short sweep (a smoke run)");
  app.add_option("--layers", a.layers, "layers of the stack, 1..64 (default 8)")
      ->type_name("N")
      ->check(tools::integer_range(1, 64));
  app.add_option("--mib-per-layer", a.mib_per_layer,
                 "MiB saved per layer (default 128 on cuda, 2 on host)")
      ->type_name("MIB")
      ->check(tools::real_range(0, 65536, true, "MiB"));
  app.add_option("--ratio", a.ratio, "one compute/copy ratio instead of the sweep from 0.5 to 4")
      ->type_name("R")
      ->check(tools::real_range(0.1, 16));
  return cl.run(argc, argv, [&] { return run(cl, a); });
}
