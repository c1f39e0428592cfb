// `offloadkit schedule-gen`: writes one rank's generated 1F1B or interleaved 1F1B schedule file
// (traces::generate_schedule), or with --out-dir one file per rank of the whole pipeline.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "cli_common.hpp"
#include "offloadkit/stash/schedule.hpp"
#include "offloadkit/traces/schedule_generate.hpp"
#include "schedule_commands.hpp"

namespace offloadkit::tools {

int schedule_gen_main(const std::vector<std::string>& args) {
  return run_guarded("schedule-gen", [&args] {
    namespace ot = offloadkit::traces;
    namespace tools = ::offloadkit::tools;
    using lim = stash::schedule_limits;
    auto app_owner =
        make_app("schedule-gen",
                 "Writes a generated 1F1B or interleaved 1F1B schedule file of one pipeline rank\n"
                 "(-o FILE), or of every rank (--out-dir FOLDER: rank<R>.json each).",
                 exit_status_text());
    CLI::App& app = *app_owner;
    ot::generate_options o;
    std::string out, out_dir;
    auto num = [&](const char* name, auto& target, std::uint64_t lo, std::uint64_t hi,
                   const std::string& what) {
      using T = std::remove_reference_t<decltype(target)>;
      return app
          .add_option_function<std::string>(
              name,
              [&target, lo, hi](const std::string& v) {
                std::uint64_t parsed = 0;
                (void)tools::parse_unsigned(v, lo, hi, parsed);
                target = static_cast<T>(parsed);
              },
              what + " (" + std::to_string(lo) + ".." + std::to_string(hi) + ")")
          ->type_name("N")
          ->check(tools::unsigned_range(lo, hi));
    };
    app.add_option("--kind", o.kind, "the schedule (default 1f1b)")
        ->type_name("1f1b|interleaved")
        ->check(tools::one_of({"1f1b", "interleaved"}));
    num("--pp", o.pipeline_size, 1, ot::max_generate_pipeline, "pipeline ranks (default 4)");
    auto* rank =
        num("--rank", o.pipeline_rank, 0, ot::max_generate_pipeline - 1, "this rank (default 0)");
    num("--vp", o.virtual_stages, 1, lim::vp_stages, "virtual stages per rank (default 1)");
    num("--mb", o.microbatches, 1, lim::microbatches, "microbatches (default 32)");
    num("--layers", o.layers, 1, lim::layers, "stashed layers per virtual stage (default 2)");
    num("--row-bytes", o.row_bytes, 1, lim::row_bytes, "bytes per row (default 8192)");
    num("--max-rows", o.max_rows, 0, lim::max_rows, "rows of the oversized buffer (default 4096)");
    num("--mean-rows", o.mean_rows, 0, lim::max_rows, "mean rows per key (default 1024)");
    num("--page-rows", o.page_rows, 1, lim::rows_per_page, "rows per page (default 64)");
    app.add_option("--skew", o.skew, "log-normal sigma of the row counts (0..4, default 0.8)")
        ->type_name("S")
        ->check(tools::real_range(0, ot::max_skew));
    num("--seed", o.seed, 0, UINT64_MAX, "random seed (default 1)");
    auto* file = app.add_option("-o,--output", out, "the file to write")->type_name("FILE");
    auto* dir = app.add_option("--out-dir", out_dir, "write rank<R>.json for every rank here")
                    ->type_name("FOLDER");
    file->excludes(dir);
    dir->excludes(rank);
    if (!parse_arguments(app, args, std::cout)) return exit_status::ok;
    if (out.empty() && out_dir.empty()) {
      throw usage_error("-o FILE or --out-dir FOLDER is required");
    }
    std::vector<std::uint32_t> ranks = {o.pipeline_rank};
    if (!out_dir.empty()) {
      if (::mkdir(out_dir.c_str(), 0777) != 0 && errno != EEXIST) {
        throw input_error("--out-dir: " + out_dir + ": " + std::strerror(errno));
      }
      ranks.clear();
      for (std::uint32_t r = 0; r < o.pipeline_size; ++r) ranks.push_back(r);
    }
    for (const std::uint32_t r : ranks) {
      o.pipeline_rank = r;
      ot::schedule_file f;
      try {
        f = ot::generate_schedule(o);
      } catch (const stash::schedule_error& e) {
        // Options each in range but not together (an interleaved microbatch count that is not a
        // multiple of the pipeline size, mean rows above max rows).
        static const std::map<std::string, std::string> option_of = {
            {"kind", "--kind"},           {"pipeline_size", "--pp"},  {"pipeline_rank", "--rank"},
            {"virtual_stages", "--vp"},   {"microbatches", "--mb"},   {"layers", "--layers"},
            {"row_bytes", "--row-bytes"}, {"max_rows", "--max-rows"}, {"mean_rows", "--mean-rows"},
            {"page_rows", "--page-rows"}, {"skew", "--skew"}};
        const auto it = option_of.find(e.where());
        throw usage_error((it == option_of.end() ? e.where() : it->second) + ": " + e.reason());
      } catch (const std::exception& e) {
        throw usage_error(e.what());
      }
      const std::string path =
          out_dir.empty() ? out : out_dir + "/rank" + std::to_string(r) + ".json";
      try {
        ot::write_schedule(f, path);
      } catch (const std::exception& e) {
        throw input_error(e.what());
      }
      std::printf("wrote %s: %s, %zu steps, %zu keys\n", path.c_str(), f.name.c_str(),
                  f.work.sched.steps.size(), stash::key_count(f.work.sched));
    }
    return exit_status::ok;
  });
}

}  // namespace offloadkit::tools
