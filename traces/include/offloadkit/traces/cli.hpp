// Entry points of the schedule subcommands, wired into the `offloadkit` command:
//   offloadkit replay FILE [--impl model|reference|optimized] [--executor host|cuda]
//                      [--pool-pages N,M] [--quiet]
//   offloadkit schedule-gen --kind 1f1b|interleaved --pp P --rank R --vp V --mb M --layers L
//                      [--skew S] [--seed N] -o FILE
// argv[0] is the subcommand's name; each returns a process exit code (0 success, 1 a failed
// check or replay, 2 bad usage, 77 skipped because CUPTI or the GPU is unavailable).
#pragma once

namespace offloadkit::traces {

int replay_main(int argc, char** argv);
int schedule_gen_main(int argc, char** argv);

}  // namespace offloadkit::traces
