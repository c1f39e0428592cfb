// Entry points of the timeline subcommands, wired into the `offloadkit` command:
//   offloadkit capture -o out.json [--svg out.svg] [--step-prefix P] [--h2d-limit GB/s]
//                      [--d2h-limit GB/s] [--min-overlap F] -- <command...>
//   offloadkit analyze TIMELINE.json [--svg out.svg] [same analysis options]
// argv[0] is the subcommand's name; each returns a process exit code (0 success, 1 a failed
// check, 2 bad usage, 77 skipped because CUPTI or the GPU is unavailable). `replay` and
// `schedule-gen` live in tools/ (schedule_commands.hpp).
#pragma once

namespace offloadkit::traces {

int capture_main(int argc, char** argv);
int analyze_main(int argc, char** argv);

}  // namespace offloadkit::traces
