// Generated schedule files: offloadkit::stash's 1F1B and interleaved 1F1B orders for one rank,
// with log-normal row counts.
#include "offloadkit/traces/schedule_generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include "offloadkit/stash/schedule.hpp"

namespace offloadkit::traces {
namespace {

void expect(bool ok, const char* where, const std::string& why) {
  if (!ok) throw schedule_error(where, why);
}

std::string range(std::uint64_t lo, std::uint64_t hi) {
  return " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

}  // namespace

schedule_file generate_schedule(const generate_options& o) {
  using lim = stash::schedule_limits;
  expect(o.kind == "1f1b" || o.kind == "interleaved", "kind",
         "'" + o.kind + "' is not one of: 1f1b, interleaved");
  expect(o.pipeline_size >= 1 && o.pipeline_size <= max_generate_pipeline, "pipeline_size",
         std::to_string(o.pipeline_size) + range(1, max_generate_pipeline));
  expect(o.pipeline_rank < o.pipeline_size, "pipeline_rank",
         std::to_string(o.pipeline_rank) + range(0, o.pipeline_size - 1));
  expect(
      o.kind == "interleaved" || o.virtual_stages == 1, "virtual_stages",
      "1f1b has one virtual stage; use kind interleaved for " + std::to_string(o.virtual_stages));
  expect(o.virtual_stages >= 1 && o.virtual_stages <= lim::vp_stages, "virtual_stages",
         std::to_string(o.virtual_stages) + range(1, lim::vp_stages));
  expect(o.microbatches >= 1 && o.microbatches <= lim::microbatches, "microbatches",
         std::to_string(o.microbatches) + range(1, lim::microbatches));
  expect(o.kind == "1f1b" || o.microbatches % o.pipeline_size == 0, "microbatches",
         std::to_string(o.microbatches) + " is not a multiple of pipeline_size " +
             std::to_string(o.pipeline_size) + " (interleaved 1F1B needs it)");
  expect(o.layers >= 1 && o.layers <= lim::layers, "layers",
         std::to_string(o.layers) + range(1, lim::layers));
  expect(std::uint64_t{o.virtual_stages} * o.layers * o.microbatches <= lim::keys, "microbatches",
         "virtual_stages x layers x microbatches exceeds " + std::to_string(lim::keys) + " keys");
  expect(o.row_bytes >= 1 && o.row_bytes <= lim::row_bytes, "row_bytes",
         std::to_string(o.row_bytes) + range(1, lim::row_bytes));
  expect(o.max_rows <= lim::max_rows, "max_rows",
         std::to_string(o.max_rows) + range(0, lim::max_rows));
  expect(o.mean_rows <= o.max_rows, "mean_rows",
         std::to_string(o.mean_rows) + range(0, o.max_rows) + " (max_rows)");
  expect(o.page_rows >= 1 && o.page_rows <= lim::rows_per_page, "page_rows",
         std::to_string(o.page_rows) + range(1, lim::rows_per_page));
  expect(o.skew >= 0 && o.skew <= max_skew, "skew", std::to_string(o.skew) + " is outside [0, 4]");

  schedule_file f;
  f.name = o.kind + " pp=" + std::to_string(o.pipeline_size) +
           " rank=" + std::to_string(o.pipeline_rank) + " vp=" + std::to_string(o.virtual_stages) +
           " mb=" + std::to_string(o.microbatches) + " layers=" + std::to_string(o.layers) +
           " skew=" + std::to_string(o.skew).substr(0, 4) + " seed=" + std::to_string(o.seed);
  f.pipeline_size = o.pipeline_size;
  f.pipeline_rank = o.pipeline_rank;
  f.page_rows = o.page_rows;
  f.work.sched =
      o.kind == "1f1b"
          ? stash::one_f_one_b(o.pipeline_size, o.pipeline_rank, o.microbatches, o.layers)
          : stash::interleaved_one_f_one_b(o.pipeline_size, o.pipeline_rank, o.virtual_stages,
                                           o.microbatches, o.layers);
  f.work.row_bytes = o.row_bytes;
  f.work.max_rows = o.max_rows;
  // Log-normal around the mean: most experts near it, a few far above (the dropless-MoE case the
  // oversized buffers exist for), clipped to max_rows; a few empty keys as well.
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> pct(0, 99);
  const double mu = std::log(std::max(1.0, static_cast<double>(o.mean_rows))) - o.skew * o.skew / 2;
  const stash::schedule& s = f.work.sched;
  f.work.rows.reserve(stash::key_count(s));
  for (std::uint32_t v = 0; v < s.vp_stages; ++v) {
    for (std::uint32_t l = 0; l < s.layers; ++l) {
      for (std::uint32_t m = 0; m < s.microbatches; ++m) {
        const double x = std::exp(mu + o.skew * normal(rng));
        const std::uint64_t r = pct(rng) < 2 ? 0
                                             : static_cast<std::uint64_t>(std::min<double>(
                                                   static_cast<double>(o.max_rows), std::round(x)));
        f.work.rows.push_back({{v, l, m}, r});
      }
    }
  }
  validate(f);
  return f;
}

}  // namespace offloadkit::traces
