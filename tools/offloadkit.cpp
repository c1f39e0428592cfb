// offloadkit: the command line. `offloadkit check` runs every registered property battery on the
// best executor available (cuda where a GPU is usable, host otherwise) or the one asked for, each
// property in a child process of its own, shows one line per property while it runs, and ends with
// a table and the commands that replay any failure (check_cli.hpp). The trace subcommands come
// from offloadkit_traces_cli.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "batteries.hpp"
#include "check_cli.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/traces/cli.hpp"
#include "schedule_commands.hpp"

#ifndef OFFLOADKIT_VERSION
#define OFFLOADKIT_VERSION "unknown"
#endif

namespace {

using offloadkit::tools::usage_error;
namespace check_exit = offloadkit::tools::check_exit;

const char* const valid_commands =
    "valid commands are check, capture, analyze, replay, schedule-gen, version, help";

const char* const commands_text =
    "usage: offloadkit <command> [options]\n"
    "\n"
    "commands:\n"
    "  check         run every registered property battery and print a table of the results\n"
    "  capture       run a CUDA program under the CUPTI recorder and report its timeline\n"
    "  analyze       report on a captured timeline (overlap, pageable copies, pinned allocations)\n"
    "  replay        validate a schedule file and replay it through a stash implementation\n"
    "  schedule-gen  write a generated 1F1B or interleaved schedule file\n"
    "  version       print the version and whether the cuda back end is usable here\n"
    "  help          print this text\n"
    "\n"
    "check, capture, analyze, replay and schedule-gen print their own options with --help.\n"
    "\n";

int run_version() {
  std::cout << "offloadkit " << OFFLOADKIT_VERSION << "\n";
  const std::string reason = offloadkit::cuda_unavailable_reason();
  std::cout << "cuda back end: "
            << (reason.empty() ? std::string("usable") : "unavailable (" + reason + ")") << "\n";
  return check_exit::passed;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  std::string usage_hint = "offloadkit help";
  try {
    if (args.empty()) throw usage_error(std::string("no command given: ") + valid_commands);
    const std::string& command = args[0];
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (command == "check") {
      usage_hint = "offloadkit check --help";
      offloadkit::tools::check_program program;
      program.cases = offloadkit::tools::all_check_cases;
      program.plugin_cases = offloadkit::tools::plugin_check_cases;
      program.fault_subjects = offloadkit::tools::plugin_fault_subjects;
      return offloadkit::tools::check_main(rest, program);
    }
    // The trace subcommands parse their own arguments; argv[0] becomes the subcommand's name.
    namespace ot = offloadkit::traces;
    if (command == "capture") return ot::capture_main(argc - 1, argv + 1);
    if (command == "analyze") return ot::analyze_main(argc - 1, argv + 1);
    if (command == "replay") return offloadkit::tools::replay_command(argc - 1, argv + 1);
    if (command == "schedule-gen") {
      return offloadkit::tools::schedule_gen_command(argc - 1, argv + 1);
    }
    if (command == "version" || command == "--version") {
      if (!rest.empty()) throw usage_error("version takes no arguments, got '" + rest[0] + "'");
      return run_version();
    }
    if (command == "help" || command == "--help" || command == "-h") {
      std::cout << commands_text << offloadkit::tools::check_options_text();
      return check_exit::passed;
    }
    throw usage_error("unknown command '" + command + "': " + valid_commands);
  } catch (const usage_error& e) {
    std::cerr << "offloadkit: " << e.what() << "\n(" << usage_hint << " shows the usage)\n";
    return check_exit::usage;
  } catch (const offloadkit::tools::plugin_unusable& e) {
    std::cerr << "offloadkit: " << e.what() << "\n";
    return check_exit::plugin;
  } catch (const std::exception& e) {
    std::cerr << "offloadkit: " << e.what() << "\n";
    return check_exit::failed;
  }
}
