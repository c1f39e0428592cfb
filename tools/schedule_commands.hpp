// `offloadkit replay`, `offloadkit schedule-gen` and `offloadkit schedule-from-trace`: command
// lines on CLI11 over the schedule libraries of traces/ (replay_files, generate_schedule,
// schedule_from_timeline). argv[0] is the subcommand's name; each returns the process exit status:
//   0 success, 1 restored bytes differ, 2 bad usage, 3 the executor cannot run here,
//   4 the plugin cannot be loaded or has no stash for the executor, 5 an input file cannot be
//   read or is invalid (or the output cannot be written), 6 replay: a pool overflows.
#pragma once

namespace offloadkit::tools {

int replay_command(int argc, char** argv);
int schedule_gen_command(int argc, char** argv);
int schedule_from_trace_command(int argc, char** argv);

}  // namespace offloadkit::tools
