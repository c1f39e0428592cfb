// `offloadkit replay`, `offloadkit schedule-gen` and `offloadkit schedule-from-trace`: command
// lines on CLI11 over the schedule libraries of traces/ (replay_files, generate_schedule,
// schedule_from_timeline). Each takes the arguments after the subcommand's name, as every
// subcommand does, reports its errors through run_guarded and returns the process exit status:
//   0 success, 1 restored bytes differ, 2 bad usage, 3 the executor cannot run here,
//   4 the plugin cannot be loaded or has no stash for the executor, 5 an input file cannot be
//   read or is invalid (or the output cannot be written), 6 replay: a pool overflows.
#pragma once

#include <string>
#include <vector>

namespace offloadkit::tools {

int replay_main(const std::vector<std::string>& args);
int schedule_gen_main(const std::vector<std::string>& args);
int schedule_from_trace_main(const std::vector<std::string>& args);

}  // namespace offloadkit::tools
