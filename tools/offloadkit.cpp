// offloadkit: the command line. The first argument names the subcommand; each parses its own
// options (CLI11, tools/cli_common.hpp) and prints them with --help. `offloadkit check` runs every
// registered property battery on the best executor available (cuda where a GPU is usable, host
// otherwise) or the one asked for, each property in a child process of its own (check_cli.hpp);
// capture and analyze report on CUPTI timelines (timeline_cli.hpp); replay, schedule-gen and
// schedule-from-trace work on schedule files; ecosystem runs the Python package's command of that
// name. The Python package's `offloadkit` command hands every command it does not run itself to
// this program, whose table below is the one list of commands both print.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "batteries.hpp"
#include "check_cli.hpp"
#include "cli_common.hpp"
#include "conformance.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/plugin.h"
#include "plugin_subjects.hpp"
#include "python_command.hpp"
#include "schedule_commands.hpp"
#include "timeline_cli.hpp"

#ifndef OFFLOADKIT_VERSION
#define OFFLOADKIT_VERSION "unknown"
#endif

namespace {

namespace tools = offloadkit::tools;
namespace exit_status = offloadkit::tools::exit_status;

struct command_entry {
  const char* name;
  const char* summary;
};

constexpr command_entry commands[] = {
    {"check", "run every registered property battery and print a table of the results"},
    {"capture", "run a CUDA program under the CUPTI recorder and report its timeline"},
    {"analyze", "report on a captured timeline (overlap, pageable copies, pinned allocations)"},
    {"replay", "validate a schedule file and replay it through a stash implementation"},
    {"schedule-gen", "write a generated 1F1B or interleaved schedule file"},
    {"schedule-from-trace", "turn the schedule events of a captured timeline into a schedule file"},
    {"conformance", "build the conformance matrix of several libraries from their check reports"},
    {"ecosystem", "check the libraries offloadkit.adapters drives (in Python) into a matrix"},
    {"version", "print the version and whether the cuda back end is usable here"},
    {"help", "print this text; help COMMAND prints that command's options"},
};

std::string command_names() {
  std::string names;
  for (const auto& c : commands) names += std::string(names.empty() ? "" : ", ") + c.name;
  return names;
}

std::string help_text() {
  std::string text =
      "usage: offloadkit <command> [options]\n"
      "\n"
      "commands:\n";
  for (const auto& c : commands) {
    std::string name = c.name;
    text += "  " + name + std::string(21 - name.size(), ' ') + c.summary + "\n";
  }
  text +=
      "\n"
      "Every command prints its own options with --help (offloadkit check --help).\n"
      "Errors go to stderr as `offloadkit <command>: <option>: <value> ...` with the valid\n"
      "values or range.\n"
      "\n" +
      tools::exit_status_text() +
      "  capture ends with the captured command's own status when that is not 0.\n";
  return text;
}

int run_version(const std::vector<std::string>& rest) {
  auto app = tools::make_app("version",
                             "Prints the version and whether the cuda back end is usable here.");
  if (!tools::parse_arguments(*app, rest, std::cout)) return exit_status::ok;
  std::cout << "offloadkit " << OFFLOADKIT_VERSION << "\n";
  const std::string reason = offloadkit::cuda_unavailable_reason();
  std::cout << "cuda back end: "
            << (reason.empty() ? std::string("usable") : "unavailable (" + reason + ")") << "\n";
  return exit_status::ok;
}

int run_check(const std::vector<std::string>& rest) {
  return tools::run_guarded("check", [&rest] {
    tools::check_program program;
    program.cases = tools::all_check_cases;
    program.plugin_cases = tools::plugin_check_cases;
    program.fault_subjects = tools::plugin_fault_subjects;
    return tools::check_main(rest, program);
  });
}

/// `ecosystem` is the Python package's command: it drives the libraries a Python interpreter
/// imports. The program becomes `python3 -m offloadkit ecosystem` in the interpreter
/// OFFLOADKIT_PYTHON names (else python3 on PATH), as `check --python` does; its --help is that
/// command's, or, where no interpreter has the package, this text and why.
int run_ecosystem(const std::vector<std::string>& rest) {
  const bool help = std::find_if(rest.begin(), rest.end(), [](const std::string& a) {
                      return a == "--help" || a == "-h";
                    }) != rest.end();
  return tools::run_guarded("ecosystem", [&rest, help] {
    tools::python_interpreter python;
    try {
      python = tools::find_python_interpreter("ecosystem");
      tools::expect_offloadkit_package(python, OFFLOADKIT_VERSION, OKIT_ABI_VERSION);
    } catch (const offloadkit::unavailable_error& e) {
      if (!help) throw;
      std::cout << "usage: offloadkit ecosystem [options]\n\n"
                   "Checks every library offloadkit.adapters drives, as a Python interpreter\n"
                   "imports them, and writes their conformance matrix: it runs `python3 -m\n"
                   "offloadkit ecosystem` in the interpreter OFFLOADKIT_PYTHON names (else\n"
                   "python3 on PATH), whose --help lists the options. Not available here: "
                << e.what() << "\n";
      return exit_status::ok;
    }
    tools::exec_python_command(python, "ecosystem", rest);
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // `help COMMAND` is `COMMAND --help`.
  const auto asks_for_help = [](const std::string& a) {
    return a == "help" || a == "--help" || a == "-h";
  };
  if (args.size() == 2 && args[0] == "help" && !asks_for_help(args[1])) {
    args = {args[1], "--help"};
  }
  if (args.empty()) {
    std::cerr << "offloadkit: no command given: valid commands are " << command_names()
              << "\n(offloadkit help shows the usage)\n";
    return exit_status::usage;
  }
  const std::string& command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "check") return run_check(rest);
  if (command == "capture") return tools::capture_main(rest);
  if (command == "analyze") return tools::analyze_main(rest);
  if (command == "replay") return tools::replay_main(rest);
  if (command == "schedule-gen") return tools::schedule_gen_main(rest);
  if (command == "schedule-from-trace") return tools::schedule_from_trace_main(rest);
  if (command == "conformance") return tools::conformance_main(rest);
  if (command == "ecosystem") return run_ecosystem(rest);
  if (command == "version" || command == "--version") {
    return tools::run_guarded("version", [&rest] { return run_version(rest); });
  }
  if (command == "help" || command == "--help" || command == "-h") {
    if (rest.size() > 1 || (rest.size() == 1 && !asks_for_help(rest[0]))) {
      std::cerr << "offloadkit help: " << rest[0] << ": unknown command: valid commands are "
                << command_names() << "\n";
      return exit_status::usage;
    }
    std::cout << help_text();
    return exit_status::ok;
  }
  std::cerr << "offloadkit: " << command << ": unknown command: valid commands are "
            << command_names() << "\n(offloadkit help shows the usage)\n";
  return exit_status::usage;
}
