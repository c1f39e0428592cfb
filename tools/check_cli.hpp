// The `check` command as a library: `offloadkit check` and test binaries that bring their own
// check_cases (tools/tests) run the same option parsing, the same per-property child processes
// and the same report.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "offloadkit/interpose/scenarios.hpp"
#include "offloadkit/testing/check.hpp"

namespace offloadkit::tools {

/// What runs the check command: the cases and how the program is called.
struct check_program {
  /// The name printed in reproduce commands ("offloadkit").
  std::string name = "offloadkit";
  /// The arguments that select the check command, before its options: a child process is started
  /// as `/proc/self/exe <command...> --run-one ...`.
  std::vector<std::string> command = {"check"};
  /// The program a child process starts, with `command` after it; empty: this executable
  /// (/proc/self/exe). The Python package names sys.executable: /proc/self/exe of an interpreter
  /// started from a virtual environment is the base interpreter, which does not see that
  /// environment's packages.
  std::string executable;
  /// The plugin library that --python loads; empty: the Python bridge that embeds CPython
  /// (liboffloadkit_python_plugin.so). The Python package's extension module names itself: it
  /// holds the same bridge, built to run inside the interpreter that imported it.
  std::string python_bridge;
  /// Every property for the executor named "host" or "cuda", in the order they run. Called in the
  /// parent and again in every child, which must get the same list.
  std::function<std::vector<check_case>(const std::string& executor_name)> cases;
  /// The properties of the plugin library at `path` for the executor named `executor_name`, in
  /// the order they run (--plugin); appends to `notes` a line per feature that yields none and
  /// why. Throws when the plugin cannot be used. Null: the program takes no --plugin.
  std::function<std::vector<check_case>(const std::string& path, const std::string& executor_name,
                                        std::vector<std::string>& notes)>
      plugin_cases;
  /// The implementations of the plugin library at `path`, by feature, for --driver-faults.
  /// Throws when the plugin cannot be used. Null: the program takes no --driver-faults.
  std::function<interpose::fault_subjects(const std::string& path)> fault_subjects;
};

/// The program a child process of `program` starts: program.executable, else this executable.
std::string child_executable(const check_program& program);

/// Parses the check command's arguments as check_main does, without running or loading anything
/// (the fuzz target's entry point). Returns false for --help (the help text goes to `help_out`);
/// throws usage_error for a command line check_main refuses before it looks at the cases.
bool parse_check_arguments(const std::vector<std::string>& args, std::ostream& help_out);

/// Runs the check command with `args` (the arguments after the command). Returns the exit status
/// (exit_status); throws usage_error for a command line it cannot act on and plugin_unusable for
/// a plugin it cannot use (run_guarded turns them into their exit statuses).
int check_main(const std::vector<std::string>& args, const check_program& program);

}  // namespace offloadkit::tools
