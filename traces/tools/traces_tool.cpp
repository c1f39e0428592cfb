// A standalone front end for the timeline subcommands (the `offloadkit` command links the same
// entry points): offloadkit_traces_tool capture|analyze ...
#include <cstdio>
#include <string>

#include "offloadkit/traces/cli.hpp"

int main(int argc, char** argv) {
  namespace ot = offloadkit::traces;
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "capture") return ot::capture_main(argc - 1, argv + 1);
  if (cmd == "analyze") return ot::analyze_main(argc - 1, argv + 1);
  std::fprintf(stderr, "usage: %s capture|analyze ... (--help for each)\n", argv[0]);
  return 2;
}
