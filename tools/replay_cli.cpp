// `offloadkit replay FILE|FOLDER...`: plans every rank's schedule file, replays its data through a
// paged-stash implementation, and prints per rank and for the whole pipeline the pages per tier
// that never overflow (traces::replay_files and traces::render_report do the work).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "offloadkit/stash/schedule.hpp"
#include "offloadkit/traces/replay.hpp"
#include "schedule_commands.hpp"

namespace offloadkit::tools {
namespace {

namespace ot = offloadkit::traces;
namespace tools = ::offloadkit::tools;

/// "DEVICE,PINNED" with both in [0, 2^31 - 1] and their sum too (what the stash implementations
/// accept).
std::string parse_pools(const std::string& v, stash::tier_pools& out) {
  const std::uint64_t lim = stash::schedule_limits::pool_pages;
  const std::string range =
      "valid: DEVICE,PINNED pages, each and their sum in 0.." + std::to_string(lim);
  const auto comma = v.find(',');
  if (comma == std::string::npos) return "'" + v + "' is not DEVICE,PINNED: " + range;
  std::uint64_t d = 0, p = 0;
  if (!tools::parse_unsigned(v.substr(0, comma), 0, lim, d).empty() ||
      !tools::parse_unsigned(v.substr(comma + 1), 0, lim, p).empty()) {
    return "'" + v + "' is not two integers DEVICE,PINNED in range: " + range;
  }
  if (d + p > lim)
    return v + " is out of range (the sum is " + std::to_string(d + p) + "): " + range;
  out = {d, p};
  return {};
}

}  // namespace

int replay_main(const std::vector<std::string>& args) {
  return run_guarded("replay", [&args] {
    auto app_owner = make_app(
        "replay",
        "Plans and replays paged-stash schedule files: one per pipeline rank, or folders of them.\n"
        "Prints per rank and as the maximum over ranks the device and pinned pages that never\n"
        "overflow, then replays every stash and restore through a stash implementation and\n"
        "compares every restored byte.",
        "The pages per tier: with --pool-pages (or a file's pools) the device tier is the pool's\n"
        "and the pinned tier takes what the peak exceeds it by; without pools everything is "
        "device.\n\n" +
            exit_status_text());
    CLI::App& app = *app_owner;
    std::vector<std::string> inputs;
    ot::replay_request req;
    std::string pools_text, data_row_text;
    bool quiet = false;
    app.add_option("inputs", inputs,
                   "schedule files (traces/SCHEDULE_FORMAT.md) or folders of them")
        ->required()
        ->type_name("FILE|FOLDER");
    auto* impl = app.add_option("--impl", req.impl, "the stash implementation (default reference)")
                     ->type_name("reference|optimized")
                     ->check(tools::one_of({"reference", "optimized"}));
    app.add_option("--plugin", req.plugin, "replay through the paged stash of a plugin library")
        ->type_name("PATH")
        ->excludes(impl);
    app.add_option("--executor", req.executor, "where the data moves (default host)")
        ->type_name("host|cuda")
        ->check(tools::one_of({"host", "cuda"}));
    app.add_option("--pool-pages", pools_text,
                   "a pool for every rank (overrides the files' pools); each tier and the sum in "
                   "0.." +
                       std::to_string(stash::schedule_limits::pool_pages))
        ->type_name("DEVICE,PINNED")
        ->check(CLI::Validator(
            [](std::string& v) {
              stash::tier_pools p;
              return parse_pools(v, p);
            },
            ""));
    app.add_option("--data-row-bytes", data_row_text,
                   "bytes per row of the replayed data (default: the file's widest row)")
        ->type_name("BYTES")
        ->check(tools::unsigned_range(1, stash::schedule_limits::row_bytes));
    app.add_flag("--plan-only", req.plan_only, "plan only; replay no data");
    app.add_flag("--quiet", quiet, "no progress lines");
    if (!parse_arguments(app, args, std::cout)) return exit_status::ok;
    if (!pools_text.empty()) {
      stash::tier_pools p;
      (void)parse_pools(pools_text, p);
      req.pools = p;
    }
    if (!data_row_text.empty()) {
      (void)tools::parse_unsigned(data_row_text, 1, stash::schedule_limits::row_bytes,
                                  req.data_row_bytes);
    }
    if (!quiet) req.progress = ot::progress_printer(stderr, ::isatty(::fileno(stderr)) != 0);
    // input_error, plugin_unusable, unavailable_error and running out of memory become their exit
    // statuses in run_guarded.
    const ot::replay_report rep = ot::replay_files(inputs, req);
    std::fputs(ot::render_report(rep).c_str(), stdout);
    return rep.exit_code();
  });
}

}  // namespace offloadkit::tools
