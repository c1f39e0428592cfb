// bench_stash: how close the fused paged stash comes to the copy it replaces, measured in the
// same run on the same bytes.
//
//   device tier:  stash + restore of `rows` bf16 rows of `hidden` (64-row pages, all device pages)
//                 vs a plain device-to-device copy out and back of the same bytes;
//   pinned tier:  the same with every page in pinned host memory vs plain pinned D2H + H2D;
//   layer:        a MoE layer's keys (8-64 experts, log-normal row counts) stashed and restored
//                 in one batch, and one call per key, vs one plain copy out and back of the
//                 layer's total bytes, in each tier;
//   memory:       peak stashed bytes (and peak page bytes) vs oversized static buffers for a 1F1B
//                 schedule with skewed token counts, from the capacity planner (no GPU needed).
//
// Every time is the median over --windows windows of 20 iterations (default 5), the windows of a
// row's stash and plain copies taking turns (1 window of 2 iterations with --quick).
//
// Usage: bench_stash [--executor cuda|host] [--quick] [--windows N] [--json FILE] [--help]
// Exit status: 0 ok, 1 a restored byte was wrong or the run failed, 2 bad usage.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "moe_layer.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/paged_stash.hpp"
#include "offloadkit/stash/planner.hpp"
#include "offloadkit/stash/schedule.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::stash;
using clock_type = std::chrono::steady_clock;

struct row {
  std::string tier;
  std::uint64_t hidden = 0, rows = 0, bytes = 0;
  double stash_ms = 0, plain_ms = 0, stash_gbs = 0, plain_gbs = 0, ratio = 0;
  std::uint64_t wrong = 0;
};

struct memory_row {
  std::uint32_t rank = 0;
  capacity_plan plan;
};

/// Per-iteration time (ms) of each of `fs`: the median over `windows` windows of `iters`
/// iterations each. The functions' windows take turns, so that a slow spell of the machine (the
/// link or the clocks) falls on every function about equally instead of on one row's one side.
std::vector<double> median_ms(executor& ex, stream_ref s, int iters, int windows,
                              const std::vector<std::function<void()>>& fs) {
  for (const auto& f : fs) f();  // warm-up
  ex.synchronize(s);
  std::vector<std::vector<double>> t(fs.size());
  for (int w = 0; w < windows; ++w) {
    for (std::size_t i = 0; i < fs.size(); ++i) {
      const auto t0 = clock_type::now();
      for (int k = 0; k < iters; ++k) fs[i]();
      ex.synchronize(s);
      t[i].push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count() /
                     iters);
    }
  }
  std::vector<double> out;
  out.reserve(t.size());
  for (auto& x : t) out.push_back(bench::median(std::move(x)));
  return out;
}

row run_tier(executor& ex, stream_ref s, bool pinned_tier, std::uint64_t hidden, std::uint64_t rows,
             int iters, int windows) {
  row r;
  r.tier = pinned_tier ? "pinned" : "device";
  r.hidden = hidden;
  r.rows = rows;
  const std::uint64_t row_bytes = hidden * 2;  // bf16
  r.bytes = rows * row_bytes;
  stash_config cfg;
  cfg.row_bytes = row_bytes;
  cfg.rows_per_page = 64;
  cfg.max_rows = rows;
  const std::uint64_t pages = pages_for(rows, cfg.rows_per_page);
  cfg.device_pages = pinned_tier ? 0 : pages;
  cfg.pinned_pages = pinned_tier ? pages : 0;
  cfg.max_keys = 1;
  paged_stash st(ex, cfg, s);

  buffer src(ex, memory_kind::device, r.bytes), dst(ex, memory_kind::device, r.bytes);
  buffer tmp(ex, pinned_tier ? memory_kind::pinned : memory_kind::device, r.bytes);
  buffer count(ex, memory_kind::device, sizeof(std::uint64_t));
  buffer host(ex, memory_kind::pinned, r.bytes + sizeof(std::uint64_t));
  std::mt19937_64 rng(hidden * 131 + rows);
  auto* h = host.as<unsigned char>();
  for (std::uint64_t o = 0; o < r.bytes; o += 8) {
    const std::uint64_t v = rng();
    std::memcpy(h + o, &v, std::min<std::uint64_t>(8, r.bytes - o));
  }
  ex.copy(src.data(), h, r.bytes, s);
  std::memcpy(h + r.bytes, &rows, sizeof rows);
  ex.copy(count.data(), h + r.bytes, sizeof rows, s);
  ex.synchronize(s);

  const stash_key key{0, 0, 0};
  const std::vector<double> ms =
      median_ms(ex, s, iters, windows,
                {[&] {
                   st.stash(key, src.data(), count.as<std::uint64_t>(), s);
                   st.restore(key, dst.data(), nullptr, s);
                 },
                 [&] {
                   ex.copy(tmp.data(), src.data(), r.bytes, s);
                   ex.copy(dst.data(), tmp.data(), r.bytes, s);
                 }});
  r.stash_ms = ms[0];
  r.plain_ms = ms[1];
  // Check the stash's result (the plain copy wrote dst last, so stash once more first).
  ex.fill(dst.data(), 0, r.bytes, s);
  st.stash(key, src.data(), count.as<std::uint64_t>(), s);
  st.restore(key, dst.data(), nullptr, s);
  std::vector<unsigned char> want(h, h + r.bytes);
  ex.copy(h, dst.data(), r.bytes, s);
  ex.synchronize(s);
  for (std::uint64_t o = 0; o < r.bytes; ++o) r.wrong += h[o] != want[o];
  if (!st.status(s).ok()) r.wrong += 1;
  // Bytes moved: out and back.
  r.stash_gbs = 2.0 * static_cast<double>(r.bytes) / (r.stash_ms * 1e6);
  r.plain_gbs = 2.0 * static_cast<double>(r.bytes) / (r.plain_ms * 1e6);
  r.ratio = r.plain_ms / r.stash_ms;
  return r;
}

struct layer_row {
  std::string tier;
  std::uint64_t keys = 0, hidden = 0, rows = 0, bytes = 0;
  double batch_ms = 0, per_key_ms = 0, plain_ms = 0, batch_ratio = 0, per_key_ratio = 0;
  double graph_ms = 0, plain_graph_ms = 0, graph_ratio = 0;
  std::uint64_t wrong = 0;
};

/// A layer of `keys` experts: stash_batch + restore_batch, then stash + restore per key, against
/// one plain copy out and back of the layer's total bytes (device to device, or through pinned
/// memory for the pinned tier).
layer_row run_layer(executor& ex, stream_ref s, bool pinned_tier, std::uint64_t keys,
                    std::uint64_t hidden, std::uint64_t total_rows, int iters, int windows) {
  layer_row r;
  r.tier = pinned_tier ? "pinned" : "device";
  r.keys = keys;
  r.hidden = hidden;
  r.rows = total_rows;
  const std::uint64_t row_bytes = hidden * 2;  // bf16
  r.bytes = total_rows * row_bytes;
  const std::vector<std::uint64_t> counts =
      bench::layer_rows(keys, total_rows, keys * 7919 + hidden);
  stash_config cfg;
  cfg.row_bytes = row_bytes;
  cfg.rows_per_page = 64;
  cfg.max_rows = *std::max_element(counts.begin(), counts.end());
  std::uint64_t pages = 0;
  for (auto c : counts) pages += pages_for(c, cfg.rows_per_page);
  cfg.device_pages = pinned_tier ? 0 : pages;
  cfg.pinned_pages = pinned_tier ? pages : 0;
  cfg.max_keys = keys;
  paged_stash st(ex, cfg, s);

  const std::uint64_t slot_bytes = cfg.max_rows * row_bytes;  // each expert's oversized buffer
  buffer src(ex, memory_kind::device, slot_bytes * keys),
      dst(ex, memory_kind::device, slot_bytes * keys);
  buffer flat(ex, memory_kind::device, r.bytes), flat_back(ex, memory_kind::device, r.bytes);
  buffer tmp(ex, pinned_tier ? memory_kind::pinned : memory_kind::device, r.bytes);
  buffer count(ex, memory_kind::device, sizeof(std::uint64_t) * keys);
  buffer host(ex, memory_kind::pinned, slot_bytes * keys);
  std::mt19937_64 rng(keys * 31 + hidden);
  auto* h = host.as<unsigned char>();
  for (std::uint64_t o = 0; o + 8 <= slot_bytes * keys; o += 8) {
    const std::uint64_t v = rng();
    std::memcpy(h + o, &v, 8);
  }
  ex.copy(src.data(), h, slot_bytes * keys, s);
  std::vector<std::uint64_t> c64(counts.begin(), counts.end());
  ex.copy(count.data(), c64.data(), sizeof(std::uint64_t) * keys, s);
  ex.synchronize(s);

  std::vector<stash_item> in;
  std::vector<restore_item> out;
  for (std::uint64_t k = 0; k < keys; ++k) {
    const stash_key key{0, 0, static_cast<std::uint32_t>(k)};
    in.push_back({key, src.as<unsigned char>() + k * slot_bytes, count.as<std::uint64_t>() + k});
    out.push_back({key, dst.as<unsigned char>() + k * slot_bytes, nullptr});
  }
  const auto batch = [&] {
    st.stash_batch(in, s);
    st.restore_batch(out, s);
  };
  const auto plain = [&] {
    ex.copy(tmp.data(), flat.data(), r.bytes, s);
    ex.copy(flat_back.data(), tmp.data(), r.bytes, s);
  };
  // The same work captured once and replayed (a training step's graph): the device's cost without
  // the host's per-call work, against the plain copies captured the same way.
  const auto capture = [&](const std::function<void()>& issue) {
    ex.synchronize(s);
    ex.begin_capture(s);
    issue();
    return graph(ex, ex.end_capture(s));
  };
  graph batch_graph = capture(batch), plain_graph = capture(plain);
  const std::vector<double> ms =
      median_ms(ex, s, iters, windows,
                {batch,
                 [&] {
                   for (const auto& it : in) {
                     st.stash(it.key, it.src, it.rows, s);
                   }
                   for (const auto& it : out) {
                     st.restore(it.key, it.dst, it.rows_out, s);
                   }
                 },
                 plain, [&] { batch_graph.replay(s); }, [&] { plain_graph.replay(s); }});
  r.batch_ms = ms[0];
  r.per_key_ms = ms[1];
  r.plain_ms = ms[2];
  r.graph_ms = ms[3];
  r.plain_graph_ms = ms[4];
  r.graph_ratio = r.plain_graph_ms / r.graph_ms;
  // Check the batch's result: every expert's rows back in its buffer.
  ex.fill(dst.data(), 0, slot_bytes * keys, s);
  st.stash_batch(in, s);
  st.restore_batch(out, s);
  std::vector<unsigned char> back(slot_bytes * keys);
  ex.copy(back.data(), dst.data(), back.size(), s);
  ex.synchronize(s);
  for (std::uint64_t k = 0; k < keys; ++k) {
    const std::uint64_t n = counts[k] * row_bytes, o = k * slot_bytes;
    r.wrong += std::memcmp(back.data() + o, h + o, n) != 0;
  }
  if (!st.status(s).ok()) r.wrong += 1;
  r.batch_ratio = r.plain_ms / r.batch_ms;
  r.per_key_ratio = r.plain_ms / r.per_key_ms;
  return r;
}

/// A skewed 1F1B workload: token counts per expert-layer microbatch drawn from a lognormal around
/// the mean with a long tail, clamped to the oversized buffer's capacity.
workload skewed_workload(std::uint32_t p, std::uint32_t rank, std::uint32_t m, std::uint32_t layers,
                         std::uint64_t hidden, std::uint64_t mean_rows, std::uint64_t max_rows) {
  workload w;
  w.sched = one_f_one_b(p, rank, m, layers);
  w.row_bytes = hidden * 2;
  w.max_rows = max_rows;
  std::mt19937_64 rng(1234 + rank);
  std::lognormal_distribution<double> dist(0.0, 0.8);
  for (std::uint32_t mb = 0; mb < m; ++mb) {
    for (std::uint32_t l = 0; l < layers; ++l) {
      const double r = static_cast<double>(mean_rows) * dist(rng) / std::exp(0.32);
      w.rows.push_back(
          {{0, l, mb}, std::min<std::uint64_t>(max_rows, static_cast<std::uint64_t>(r))});
    }
  }
  return w;
}

/// The figures as the JSON document --json writes.
bench::json figures(const std::string& exec, int windows, const std::vector<row>& rows,
                    const std::vector<layer_row>& layers, const std::vector<memory_row>& mem) {
  bench::json doc = {{"benchmark", "bench_stash"}, {"executor", exec}, {"windows", windows}};
  doc["throughput"] = bench::json::array();
  for (const row& r : rows) {
    doc["throughput"].push_back({{"tier", r.tier},
                                 {"hidden", r.hidden},
                                 {"rows", r.rows},
                                 {"bytes", r.bytes},
                                 {"stash_ms", r.stash_ms},
                                 {"plain_ms", r.plain_ms},
                                 {"stash_gbs", r.stash_gbs},
                                 {"plain_gbs", r.plain_gbs},
                                 {"ratio", r.ratio},
                                 {"wrong", r.wrong}});
  }
  doc["layers"] = bench::json::array();
  for (const layer_row& r : layers) {
    doc["layers"].push_back({{"tier", r.tier},
                             {"keys", r.keys},
                             {"hidden", r.hidden},
                             {"rows", r.rows},
                             {"bytes", r.bytes},
                             {"batch_ms", r.batch_ms},
                             {"per_key_ms", r.per_key_ms},
                             {"plain_ms", r.plain_ms},
                             {"batch_ratio", r.batch_ratio},
                             {"per_key_ratio", r.per_key_ratio},
                             {"graph_ms", r.graph_ms},
                             {"plain_graph_ms", r.plain_graph_ms},
                             {"graph_ratio", r.graph_ratio},
                             {"wrong", r.wrong}});
  }
  doc["memory"] = bench::json::array();
  for (const memory_row& m : mem) {
    const auto& p = m.plan;
    doc["memory"].push_back({{"rank", m.rank},
                             {"peak_pages", p.peak_pages},
                             {"peak_stash_bytes", p.peak_stash_bytes},
                             {"peak_page_bytes", p.peak_page_bytes},
                             {"oversized_bytes", p.oversized_bytes}});
  }
  return doc;
}

/// The benchmark, once its command line is read.
int run(const bench::command_line& cl, bool quick, int windows_asked) {
  // Memory: planner only.
  const std::uint64_t hidden_mem = 4096, mean_rows = quick ? 256 : 4096;
  const std::uint64_t max_rows = mean_rows * 4;  // capacity factor 4 for dropless routing
  std::vector<memory_row> mem;
  std::printf(
      "# peak stash memory, 1F1B p=8, 16 microbatches, 4 expert layers, hidden %llu bf16, "
      "lognormal token counts (mean %llu rows, buffers of %llu rows), 64-row pages\n",
      static_cast<unsigned long long>(hidden_mem), static_cast<unsigned long long>(mean_rows),
      static_cast<unsigned long long>(max_rows));
  std::printf("%5s %12s %16s %16s %16s %8s\n", "rank", "peak_pages", "peak_stash_MiB",
              "peak_pages_MiB", "oversized_MiB", "saving");
  for (std::uint32_t rank : {0u, 3u, 7u}) {
    const workload w = skewed_workload(8, rank, 16, 4, hidden_mem, mean_rows, max_rows);
    memory_row m{rank, plan_capacity(w, 64)};
    const auto& p = m.plan;
    std::printf("%5u %12llu %16.1f %16.1f %16.1f %7.2fx\n", rank,
                static_cast<unsigned long long>(p.peak_pages),
                static_cast<double>(p.peak_stash_bytes) / 1048576.0,
                static_cast<double>(p.peak_page_bytes) / 1048576.0,
                static_cast<double>(p.oversized_bytes) / 1048576.0,
                p.peak_page_bytes ? static_cast<double>(p.oversized_bytes) /
                                        static_cast<double>(p.peak_page_bytes)
                                  : 0.0);
    mem.push_back(m);
  }

  std::string skipped;
  const std::unique_ptr<executor> ex = cl.make_executor(skipped);
  std::vector<row> rows;
  // The memory plan is figures of its own, written with the reason the rest is skipped.
  if (!ex) return cl.skip(skipped, figures(cl.executor_name(), 0, rows, {}, mem));

  stream s(*ex);
  const std::vector<std::uint64_t> hiddens =
      quick ? std::vector<std::uint64_t>{64} : std::vector<std::uint64_t>{4096, 7168};
  const std::vector<std::uint64_t> counts =
      quick ? std::vector<std::uint64_t>{100, 1000} : std::vector<std::uint64_t>{1024, 4096, 16384};
  const int iters = quick ? 2 : 20;
  const int windows = quick ? 1 : windows_asked;
  std::printf(
      "\n# stash + restore vs plain copy out and back, bf16, 64-row pages, %s executor; times: "
      "median of %d windows of %d iterations\n",
      cl.executor_name().c_str(), windows, iters);
  std::printf("%7s %7s %6s %10s %10s %10s %10s %10s %7s %7s\n", "tier", "hidden", "rows", "MiB",
              "stash_ms", "plain_ms", "stash_GB/s", "plain_GB/s", "ratio", "#wrong");
  for (bool pinned : {false, true}) {
    for (auto hd : hiddens) {
      for (auto n : counts) {
        const row r = run_tier(*ex, s, pinned, hd, n, iters, windows);
        std::printf("%7s %7llu %6llu %10.1f %10.3f %10.3f %10.1f %10.1f %7.3f %7llu\n",
                    r.tier.c_str(), static_cast<unsigned long long>(r.hidden),
                    static_cast<unsigned long long>(r.rows),
                    static_cast<double>(r.bytes) / 1048576.0, r.stash_ms, r.plain_ms, r.stash_gbs,
                    r.plain_gbs, r.ratio, static_cast<unsigned long long>(r.wrong));
        rows.push_back(r);
      }
    }
  }
  std::printf(
      "ratio = plain time / stash time (1.0: the stash costs what the copy it replaces "
      "costs). Goals: device >= 0.85, pinned >= 0.90.\n");

  // A MoE layer: 8 to 64 experts, 8 to 128 MiB in all.
  std::vector<layer_row> layers;
  std::printf(
      "\n# a layer's experts: stash_batch + restore_batch, and per-key calls, vs one plain "
      "copy out and back of the layer's bytes; bf16, 64-row pages, log-normal rows\n");
  std::printf("%7s %5s %7s %8s %10s %10s %10s %8s %8s %10s %10s %8s %7s\n", "tier", "keys",
              "hidden", "MiB", "batch_ms", "perkey_ms", "plain_ms", "batch", "per_key", "graph_ms",
              "pgraph_ms", "graph", "#wrong");
  const std::uint64_t layer_hidden = quick ? 64 : 4096;
  const std::vector<std::uint64_t> layer_mib =
      quick ? std::vector<std::uint64_t>{1} : std::vector<std::uint64_t>{8, 32, 128};
  for (bool pinned : {false, true}) {
    for (std::uint64_t keys : {8u, 32u, 64u}) {
      for (std::uint64_t mib : layer_mib) {
        const std::uint64_t total = mib * 1048576 / (layer_hidden * 2);
        const layer_row r = run_layer(*ex, s, pinned, keys, layer_hidden, total, iters, windows);
        std::printf(
            "%7s %5llu %7llu %8.1f %10.4f %10.4f %10.4f %8.3f %8.3f %10.4f %10.4f %8.3f %7llu\n",
            r.tier.c_str(), static_cast<unsigned long long>(r.keys),
            static_cast<unsigned long long>(r.hidden), static_cast<double>(r.bytes) / 1048576.0,
            r.batch_ms, r.per_key_ms, r.plain_ms, r.batch_ratio, r.per_key_ratio, r.graph_ms,
            r.plain_graph_ms, r.graph_ratio, static_cast<unsigned long long>(r.wrong));
        layers.push_back(r);
      }
    }
  }
  std::printf(
      "batch / per_key = plain time / stash time of the layer, each call issued from the host; "
      "graph = the same ratio with both sides captured in a graph and replayed. Goals (layers >= "
      "8 MiB): device >= 0.90, pinned >= 0.93.\n");
  if (!cl.json_path().empty()) {
    bench::write_json(cl.json_path(), figures(cl.executor_name(), windows, rows, layers, mem));
  }
  std::uint64_t wrong = 0;
  for (const auto& r : rows) wrong += r.wrong;
  for (const auto& r : layers) wrong += r.wrong;
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  bench::command_line cl(
      "bench_stash",
      "Paged stash and restore (one key, and a MoE layer's keys in one batch) against plain "
      "copies of the same bytes, measured in the same run; peak stash memory from the capacity "
      "planner.",
      "Exit status: 0 ok, 1 a restored byte was wrong or the run failed, 2 bad usage.");
  bool quick = false;
  int windows_asked = 5;
  cl.app().add_flag("--quick", quick, "small shapes, 1 window of 2 iterations (a smoke run)");
  cl.app()
      .add_option("--windows", windows_asked,
                  "windows of 20 iterations per time, median taken, 1..100 (default 5)")
      ->type_name("N")
      ->check(tools::integer_range(1, 100));
  return cl.run(argc, argv, [&] { return run(cl, quick, windows_asked); });
}
