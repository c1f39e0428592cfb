// bench_recorder: what recording a production schedule costs a step. One step of a MoE rank
// stashes K keys whose row counts live on the device (layers x experts x microbatches); the
// recorder (async_schedule_recorder) copies each count into its pinned ring in stream order and
// reads the ring after the step's synchronization. Measured per step, best of the steps:
//   host    the time the recorder's calls take on the host (record_* and resolve()),
//   step    a step with the recorder against the same step without it, both ending in the
//           step's synchronization: the host time plus the ring copies the stream waits for,
// per key (one 4-byte copy each) and per layer (record_stashes: one copy of all its experts'
// counts). With --mlp-json (bench_activation_mlp's JSON of the same run), each figure is also given
// as a fraction of that benchmark's 4096x4096 offload step.
//
//   bench_recorder [--executor cuda|host] [--experts E] [--layers L] [--microbatches M]
//                  [--steps S] [--mlp-json FILE] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/traces/async_recorder.hpp"

namespace {

using namespace offloadkit;
namespace ot = offloadkit::traces;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct figures {
  double host_s = 1e30;  ///< best host time in the recorder's calls
  double step_s = 1e30;  ///< best step time with the recorder
};

/// One step: for each microbatch forward, every layer's experts stashed; then every microbatch's
/// backward restores in reverse. `batched`: one copy per layer instead of one per key.
figures measure(executor& ex, const ot::schedule_shape& shape, std::uint32_t experts, int steps,
                bool batched) {
  stream s(ex);
  const std::size_t keys = std::size_t{shape.layers} * shape.microbatches;
  buffer dev(ex, memory_kind::device, keys * 4);
  buffer host(ex, memory_kind::pinned, keys * 4);
  for (std::size_t i = 0; i < keys; ++i) {
    host.as<std::uint32_t>()[i] = static_cast<std::uint32_t>((i * 37) % 4096);
  }
  ex.copy(dev.data(), host.data(), keys * 4, s);
  ex.synchronize(s);
  figures f;
  for (int step = 0; step < steps + 1; ++step) {  // step 0 warms up
    // A recorder per step, as a job makes one per step (its ring is allocated outside the timing).
    ot::async_schedule_recorder rec(shape, ex, {keys, true});
    const auto t0 = clock_type::now();
    double host_s = 0;
    auto timed = [&host_s](auto&& call) {
      const auto c0 = clock_type::now();
      call();
      host_s += seconds_since(c0);
    };
    for (std::uint32_t m = 0; m < shape.microbatches; ++m) {
      for (std::uint32_t l = 0; l < shape.layers; l += experts) {
        const std::uint32_t* rows = dev.as<std::uint32_t>() + (std::size_t{m} * shape.layers) + l;
        if (batched) {
          timed([&] { rec.record_stashes({0, l, m}, rows, experts, s); });
        } else {
          for (std::uint32_t e = 0; e < experts; ++e) {
            timed([&] { rec.record_stash({0, l + e, m}, rows + e, s); });
          }
        }
      }
    }
    for (std::uint32_t m = 0; m < shape.microbatches; ++m) {
      for (std::uint32_t l = shape.layers; l-- > 0;) timed([&] { rec.record_restore({0, l, m}); });
    }
    ex.synchronize(s);  // the step's own synchronization
    timed([&] { rec.resolve(); });
    const double step_s = seconds_since(t0);
    if (step > 0) {
      f.host_s = std::min(f.host_s, host_s);
      f.step_s = std::min(f.step_s, step_s);
    }
  }
  return f;
}

/// The same step's synchronization without a recorder.
double baseline(executor& ex, int steps) {
  stream s(ex);
  double best = 1e30;
  for (int step = 0; step < steps + 1; ++step) {
    const auto t0 = clock_type::now();
    ex.synchronize(s);
    if (step > 0) best = std::min(best, seconds_since(t0));
  }
  return best;
}

/// bench_activation_mlp's offload step time at h=4096, 4096 tokens, from its JSON (0 if absent).
double mlp_step_s(const std::string& path) {
  if (path.empty()) return 0;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--mlp-json " + path + ": cannot open the file");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in, nullptr, false);
  } catch (const std::exception& e) {  // a read error of the stream itself (a folder, say)
    throw std::runtime_error("--mlp-json " + path + ": cannot read the file: " + e.what());
  }
  if (doc.is_discarded() || !doc.contains("rows") || !doc["rows"].is_array()) {
    throw std::runtime_error("--mlp-json " + path + ": not bench_activation_mlp's JSON");
  }
  for (const auto& sc : doc["rows"]) {
    if (sc.value("h", 0) == 4096 && sc.value("tokens", 0) == 4096) {
      return sc.value("offload_s", 0.0);
    }
  }
  return 0;
}

/// The benchmark, once its command line is read.
int run(const bench::command_line& cl, std::uint32_t experts, std::uint32_t moe_layers,
        std::uint32_t microbatches, int steps, const std::string& mlp_json) {
  std::string skipped;
  const std::unique_ptr<executor> ex = cl.make_executor(skipped);
  if (!ex) return cl.skip(skipped);
  ot::schedule_shape shape;
  shape.name = "bench_recorder";
  shape.layers = moe_layers * experts;
  shape.microbatches = microbatches;
  shape.row_bytes = {8192};
  shape.max_rows = 4096;
  const double mlp_s = mlp_step_s(mlp_json);
  const double base_s = baseline(*ex, steps);
  const std::uint32_t keys = shape.layers * microbatches;
  std::printf(
      "bench_recorder on %s: %u keys per step (%u MoE layers x %u experts x %u "
      "microbatches), best of %d steps; step = recorded step - the same "
      "synchronization without a recorder (%.1f us)\n",
      ex->name().c_str(), keys, moe_layers, experts, microbatches, steps, base_s * 1e6);
  if (mlp_s > 0) {
    std::printf(
        "fractions are of bench_activation_mlp's 4096x4096 offload step in this run "
        "(%.2f ms)\n",
        mlp_s * 1e3);
  }
  std::printf("%-10s %8s %10s %10s %10s %12s %12s\n", "ring copy", "copies", "host us", "step us",
              "us/key", "host/MLP", "step/MLP");
  bench::json out = {
      {"benchmark", "recorder"}, {"executor", ex->name()},      {"keys", keys},
      {"baseline_s", base_s},    {"mlp_offload_step_s", mlp_s}, {"rows", bench::json::array()}};
  for (const bool batched : {false, true}) {
    const figures f = measure(*ex, shape, experts, steps, batched);
    const double step_cost = std::max(0.0, f.step_s - base_s);
    const std::uint32_t copies = batched ? keys / experts : keys;
    const auto frac = [&](double s) { return mlp_s > 0 ? s / mlp_s : 0.0; };
    std::printf("%-10s %8u %10.1f %10.1f %10.2f %11.3f%% %11.3f%%\n",
                batched ? "per layer" : "per key", copies, f.host_s * 1e6, step_cost * 1e6,
                step_cost * 1e6 / keys, 100 * frac(f.host_s), 100 * frac(step_cost));
    out["rows"].push_back({{"copies", batched ? "per_layer" : "per_key"},
                           {"ring_copies", copies},
                           {"host_s", f.host_s},
                           {"step_s", step_cost},
                           {"host_fraction_of_mlp_step", frac(f.host_s)},
                           {"step_fraction_of_mlp_step", frac(step_cost)}});
  }
  if (!cl.json_path().empty()) bench::write_json(cl.json_path(), out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mlp_json;
  std::uint32_t experts = 8, moe_layers = 2, microbatches = 8;
  int steps = 50;
  bool quick = false;
  bench::command_line cl(
      "bench_recorder",
      "What recording a production schedule costs a step (async_schedule_recorder).",
      "Exit status: 0 ok (or no GPU: skipped), 1 the run failed (or --mlp-json could not be read "
      "or --json written), 2 bad usage.");
  CLI::App& app = cl.app();
  app.add_option("--experts", experts, "experts per MoE layer, 1..256 (default 8)")
      ->type_name("E")
      ->check(tools::unsigned_range(1, 256));
  app.add_option("--layers", moe_layers, "MoE layers, 1..64 (default 2)")
      ->type_name("L")
      ->check(tools::unsigned_range(1, 64));
  app.add_option("--microbatches", microbatches, "microbatches per step, 1..4096 (default 8)")
      ->type_name("M")
      ->check(tools::unsigned_range(1, 4096));
  app.add_option("--steps", steps, "steps measured, best taken, 1..100000 (default 50)")
      ->type_name("S")
      ->check(tools::integer_range(1, 100000));
  app.add_option("--mlp-json", mlp_json, "bench_activation_mlp --json output of this run")
      ->type_name("FILE");
  app.add_flag("--quick", quick, "5 steps (a smoke run)");
  return cl.run(argc, argv, [&] {
    return run(cl, experts, moe_layers, microbatches, quick ? 5 : steps, mlp_json);
  });
}
