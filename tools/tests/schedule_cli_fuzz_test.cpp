// The replay and schedule-gen command lines as a whole, arguments and file contents together:
// random picks of valid and invalid arguments over a generated schedule file cut and edited at
// random. Every run must end with one of the documented exit statuses (0 to 6), never a crash or
// an escaped exception, and a run that reports an error must not also succeed.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "offloadkit/traces/schedule_format.hpp"
#include "offloadkit/traces/schedule_generate.hpp"
#include "schedule_commands.hpp"

namespace {

using command_fn = int (*)(const std::vector<std::string>&);

/// Runs a subcommand with `args`, whose first word is the subcommand's name (as on the command
/// line; the subcommand takes what follows it).
int run(command_fn command, const std::vector<std::string>& args) {
  return command(std::vector<std::string>(args.begin() + 1, args.end()));
}

std::string scratch(const char* name) {
  return std::string(OFFLOADKIT_SCRATCH) + "/" + name + "." + std::to_string(::getpid());
}

}  // namespace

/// The property: replay ends with a documented status (0 to 6); with valid arguments an invalid
/// file is status 5 and a valid one 0 or 6 (the data of a valid schedule restores exactly).
void replay_statuses(command_fn replay) {
  offloadkit::traces::generate_options g;
  g.pipeline_size = *rc::gen::inRange<std::uint32_t>(1, 4);
  g.pipeline_rank = *rc::gen::inRange<std::uint32_t>(0, g.pipeline_size);
  g.microbatches = *rc::gen::inRange<std::uint32_t>(1, 6);
  g.layers = *rc::gen::inRange<std::uint32_t>(1, 3);
  g.max_rows = 40;
  g.mean_rows = 20;
  g.page_rows = 8;
  std::string text = offloadkit::traces::to_json(offloadkit::traces::generate_schedule(g));
  const int edits = *rc::gen::inRange(0, 4);
  for (int i = 0; i < edits && !text.empty(); ++i) {
    const auto pos = *rc::gen::inRange<std::size_t>(0, text.size());
    if (*rc::gen::arbitrary<bool>()) {
      text.erase(pos, *rc::gen::inRange<std::size_t>(1, 30));
    } else {
      text.insert(pos, *rc::gen::element<std::string>("[", "-1", "1e3", "4294967296", "{}", "\"F\"",
                                                      "[\"S\",0,0,0],", "null"));
    }
  }
  bool file_valid = true;
  try {
    (void)offloadkit::traces::parse_schedule(text);
  } catch (const offloadkit::traces::schedule_error&) {
    file_valid = false;
  }
  const std::string file = scratch("fuzz_schedule.json");
  std::ofstream(file, std::ios::binary) << text;
  std::vector<std::string> args = {"replay", file, "--quiet"};
  const bool valid_args = *rc::gen::arbitrary<bool>();
  if (valid_args) {
    // Each option at most once, with a valid value.
    if (*rc::gen::arbitrary<bool>()) {
      args.emplace_back("--pool-pages");
      args.push_back(*rc::gen::element<std::string>("0,0", "3,2", "1000,1000"));
    }
    if (*rc::gen::arbitrary<bool>()) args.insert(args.end(), {"--data-row-bytes", "64"});
    if (*rc::gen::arbitrary<bool>()) {
      args.emplace_back("--impl");
      args.push_back(*rc::gen::element<std::string>("reference", "optimized"));
    }
    if (*rc::gen::arbitrary<bool>()) args.emplace_back("--plan-only");
  } else {
    const int extra = *rc::gen::inRange(0, 4);
    for (int i = 0; i < extra; ++i) {
      const auto opt = *rc::gen::element<std::string>("--pool-pages", "--data-row-bytes", "--impl",
                                                      "--executor", "--plan-only", "--bogus", "-5");
      args.push_back(opt);
      if (opt.rfind("--", 0) == 0 && opt != "--plan-only" && opt != "--bogus") {
        args.push_back(*rc::gen::element<std::string>("0,0", "3,2", "-5,0", "2147483647,1", "64",
                                                      "1e3", "0", "reference", "optimized", "host",
                                                      "model", ""));
      }
    }
  }
  const int status = run(replay, args);
  std::remove(file.c_str());
  RC_ASSERT(status >= 0);
  RC_ASSERT(status <= 6);
  if (valid_args && !file_valid) RC_ASSERT(status == 5);
  if (valid_args && file_valid) RC_ASSERT(status == 0 || status == 6);
}

/// Planted: replay as it was, where an invalid file exited with status 1 like a data mismatch.
int replay_invalid_file_is_1(const std::vector<std::string>& args) {
  const int status = offloadkit::tools::replay_main(args);
  return status == 5 ? 1 : status;
}

RC_GTEST_PROP(ScheduleCli, ReplayEndsWithADocumentedStatus, ()) {
  replay_statuses(offloadkit::tools::replay_main);
}

TEST(ScheduleCli, CatchesAnInvalidFileReportedAsAMismatch) {
  EXPECT_FALSE(rc::check("invalid file is 1", [] { replay_statuses(replay_invalid_file_is_1); }));
}

RC_GTEST_PROP(ScheduleCli, ScheduleGenWritesOnlyFilesReplayAccepts, ()) {
  const std::string file = scratch("fuzz_generated.json");
  std::remove(file.c_str());
  std::vector<std::string> args = {"schedule-gen", "-o", file, "--mb", "4", "--pp", "2"};
  const int extra = *rc::gen::inRange(0, 4);
  for (int i = 0; i < extra; ++i) {
    args.push_back(*rc::gen::element<std::string>("--max-rows", "--mean-rows", "--layers",
                                                  "--page-rows", "--row-bytes", "--skew", "--vp",
                                                  "--rank"));
    args.push_back(*rc::gen::element<std::string>("-1", "0", "1", "3", "64", "1e3", "2147483648",
                                                  "2147483649", "4294967297", "0.5", "abc"));
  }
  const int status = run(offloadkit::tools::schedule_gen_main, args);
  RC_ASSERT(status == 0 || status == 2);
  if (status == 0) {
    // What schedule-gen wrote, replay reads.
    const int replayed =
        run(offloadkit::tools::replay_main, {"replay", file, "--plan-only", "--quiet"});
    RC_ASSERT(replayed == 0);
  }
  std::remove(file.c_str());
}
