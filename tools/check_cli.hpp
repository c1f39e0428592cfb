// The `check` command as a library: `offloadkit check` and test binaries that bring their own
// check_cases (tools/tests) run the same option parsing, the same per-property child processes
// and the same report.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "offloadkit/interpose/scenarios.hpp"
#include "offloadkit/testing/check.hpp"

namespace offloadkit::tools {

/// A command line the program cannot act on; the message names the bad value and the valid ones.
/// The caller prints it and exits with check_exit::usage.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A plugin given with --plugin cannot be loaded, breaks the ABI, or has nothing to run here; the
/// message names the plugin and what was expected. Exit status check_exit::plugin.
class plugin_unusable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Exit statuses of the check command.
namespace check_exit {
constexpr int passed = 0;
constexpr int failed = 1;       ///< a property failed, crashed, exited early or timed out
constexpr int usage = 2;        ///< bad usage
constexpr int unavailable = 3;  ///< the executor asked for cannot run here
constexpr int plugin = 4;       ///< the plugin cannot be loaded or has nothing to run here
// Interrupted by a signal (SIGINT, SIGTERM, SIGHUP): 128 + the signal's number, as a shell does.
}  // namespace check_exit

/// What runs the check command: the cases and how the program is called.
struct check_program {
  /// The name printed in reproduce commands ("offloadkit").
  std::string name = "offloadkit";
  /// The arguments that select the check command, before its options: a child process is started
  /// as `/proc/self/exe <command...> --run-one ...`.
  std::vector<std::string> command = {"check"};
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

/// The options, notes and exit statuses of the check command (part of `help` and all of
/// `check --help`).
std::string check_options_text();

/// Runs the check command with `args` (the arguments after the command). Returns the exit status
/// (check_exit); throws usage_error for a command line it cannot act on.
int check_main(const std::vector<std::string>& args, const check_program& program);

}  // namespace offloadkit::tools
