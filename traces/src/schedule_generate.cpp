// Pipeline schedule generators (Megatron-LM's 1F1B and interleaved 1F1B orders for one rank) and
// the `offloadkit schedule-gen` subcommand.
#include "offloadkit/traces/schedule_generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

#include "offloadkit/traces/cli.hpp"

namespace offloadkit::traces {
namespace {

void expect(bool ok, const char* where, const std::string& why) {
  if (!ok) throw schedule_error(where, why);
}

struct chunk {
  bool forward;
  int vp;
  int mb;
};

/// The k-th forward (or backward) chunk of the interleaved order: groups of pipeline_size
/// microbatches go through every virtual stage before the next group starts.
chunk interleaved_chunk(int k, bool forward, const generate_options& o) {
  const int p = o.pipeline_size, v = o.virtual_stages;
  int vp = (k / p) % v;
  if (!forward) vp = v - 1 - vp;
  const int mb = (k / (p * v)) * p + k % p;
  return {forward, vp, mb};
}

std::vector<chunk> chunk_order(const generate_options& o) {
  std::vector<chunk> order;
  const int p = o.pipeline_size, r = o.pipeline_rank, m = o.microbatches;
  if (o.kind == "1f1b") {
    const int warmup = std::min(p - r - 1, m);
    int f = 0, b = 0;
    for (; f < warmup; ++f) order.push_back({true, 0, f});
    while (f < m) {
      order.push_back({true, 0, f++});
      order.push_back({false, 0, b++});
    }
    while (b < m) order.push_back({false, 0, b++});
    return order;
  }
  const int total = m * o.virtual_stages;
  const int warmup = std::min((p - r - 1) * 2 + (o.virtual_stages - 1) * p, total);
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(interleaved_chunk(f, true, o));
  while (f < total) {
    order.push_back(interleaved_chunk(f++, true, o));
    order.push_back(interleaved_chunk(b++, false, o));
  }
  while (b < total) order.push_back(interleaved_chunk(b++, false, o));
  return order;
}

}  // namespace

schedule generate_schedule(const generate_options& o) {
  expect(o.kind == "1f1b" || o.kind == "interleaved", "kind",
         "'" + o.kind + "' is not one of: 1f1b, interleaved");
  expect(o.pipeline_size >= 1 && o.pipeline_size <= 1024, "pipeline_size",
         std::to_string(o.pipeline_size) + " is outside [1, 1024]");
  expect(
      o.pipeline_rank >= 0 && o.pipeline_rank < o.pipeline_size, "pipeline_rank",
      std::to_string(o.pipeline_rank) + " is outside [0, " + std::to_string(o.pipeline_size) + ")");
  expect(
      o.kind == "interleaved" || o.virtual_stages == 1, "virtual_stages",
      "1f1b has one virtual stage; use kind interleaved for " + std::to_string(o.virtual_stages));
  expect(o.virtual_stages >= 1 && o.virtual_stages <= max_virtual_stages, "virtual_stages",
         std::to_string(o.virtual_stages) + " is outside [1, " +
             std::to_string(max_virtual_stages) + "]");
  expect(o.microbatches >= 1 && o.microbatches <= 65536, "microbatches",
         std::to_string(o.microbatches) + " is outside [1, 65536]");
  expect(o.kind == "1f1b" || o.microbatches % o.pipeline_size == 0, "microbatches",
         std::to_string(o.microbatches) + " is not a multiple of pipeline_size " +
             std::to_string(o.pipeline_size) + " (interleaved 1F1B needs it)");
  expect(o.layers >= 1 && o.layers <= 256, "layers",
         std::to_string(o.layers) + " is outside [1, 256]");
  expect(o.mean_rows <= o.max_rows, "mean_rows",
         std::to_string(o.mean_rows) + " exceeds max_rows " + std::to_string(o.max_rows));
  expect(o.skew >= 0 && o.skew <= 4, "skew", std::to_string(o.skew) + " is outside [0, 4]");

  schedule s;
  s.name = o.kind + " pp=" + std::to_string(o.pipeline_size) +
           " rank=" + std::to_string(o.pipeline_rank) + " vp=" + std::to_string(o.virtual_stages) +
           " mb=" + std::to_string(o.microbatches) + " layers=" + std::to_string(o.layers) +
           " skew=" + std::to_string(o.skew).substr(0, 4) + " seed=" + std::to_string(o.seed);
  s.pipeline_size = o.pipeline_size;
  s.pipeline_rank = o.pipeline_rank;
  s.virtual_stages = o.virtual_stages;
  s.layers = o.layers;
  s.microbatches = o.microbatches;
  s.row_bytes.assign(static_cast<std::size_t>(o.layers), o.row_bytes);
  s.max_rows = o.max_rows;
  s.page_rows = o.page_rows;
  // Log-normal around the mean: most experts near it, a few far above (the dropless-MoE case the
  // oversized buffers exist for), clipped to max_rows; a few empty keys as well.
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> pct(0, 99);
  s.rows.resize(s.key_count());
  const double mu = std::log(std::max(1.0, static_cast<double>(o.mean_rows))) - o.skew * o.skew / 2;
  for (auto& r : s.rows) {
    const double x = std::exp(mu + o.skew * normal(rng));
    r = pct(rng) < 2 ? 0 : static_cast<std::uint32_t>(std::min<double>(o.max_rows, std::round(x)));
  }
  for (const chunk& c : chunk_order(o)) {
    for (int l = 0; l < o.layers; ++l) {
      const int layer = c.forward ? l : o.layers - 1 - l;
      s.steps.push_back({c.forward ? schedule_op::stash : schedule_op::restore,
                         {c.vp, layer, c.mb},
                         s.steps.size()});
    }
  }
  validate(s);
  return s;
}

int schedule_gen_main(int argc, char** argv) {
  generate_options o;
  std::string out;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--kind")
        o.kind = value();
      else if (a == "--pp")
        o.pipeline_size = std::stoi(value());
      else if (a == "--rank")
        o.pipeline_rank = std::stoi(value());
      else if (a == "--vp")
        o.virtual_stages = std::stoi(value());
      else if (a == "--mb")
        o.microbatches = std::stoi(value());
      else if (a == "--layers")
        o.layers = std::stoi(value());
      else if (a == "--row-bytes")
        o.row_bytes = std::stoull(value());
      else if (a == "--max-rows")
        o.max_rows = static_cast<std::uint32_t>(std::stoul(value()));
      else if (a == "--mean-rows")
        o.mean_rows = static_cast<std::uint32_t>(std::stoul(value()));
      else if (a == "--page-rows")
        o.page_rows = static_cast<std::uint32_t>(std::stoul(value()));
      else if (a == "--skew")
        o.skew = std::stod(value());
      else if (a == "--seed")
        o.seed = std::stoull(value());
      else if (a == "-o")
        out = value();
      else
        throw std::invalid_argument("unknown option '" + a + "'");
    }
    if (out.empty()) throw std::invalid_argument("missing -o FILE");
  } catch (const std::exception& e) {
    std::fprintf(
        stderr,
        "offloadkit schedule-gen: %s\nusage: offloadkit schedule-gen --kind 1f1b|interleaved "
        "--pp P --rank R --vp V --mb M --layers L [--row-bytes B] [--max-rows N] "
        "[--mean-rows N] [--page-rows N] [--skew S] [--seed N] -o FILE\n",
        e.what());
    return 2;
  }
  try {
    const schedule s = generate_schedule(o);
    write_schedule(s, out);
    std::printf("wrote %s: %s, %zu steps, %zu keys\n", out.c_str(), s.name.c_str(), s.steps.size(),
                s.key_count());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offloadkit schedule-gen: %s\n", e.what());
    return 1;
  }
}

}  // namespace offloadkit::traces
