// The check command's options (check_options.cpp): what they hold once parsed, and the parsing
// that check_main and the fuzz target's parse_check_arguments share (check_cli.cpp runs them).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace offloadkit::tools::detail {

/// --timeout's default.
inline constexpr int default_timeout_s = 600;
/// --shutdown-grace's default: how long a property's process may take to exit once its result
/// is written (interpreter exit, CUDA teardown) before it is killed and recorded as hung at exit.
/// Far below the time limit, so that a library that hangs at exit costs this, not --timeout, per
/// property.
inline constexpr int default_shutdown_grace_s = 30;

/// The check command's options as parse_check_options leaves them.
struct check_options {
  std::string executor = "auto";
  std::uint64_t seed = 0;
  int cases = 0;
  std::string feature;
  std::string implementation;
  std::string property;
  /// --free-memory: "only" the properties that read the device's free memory, "without" them, or
  /// empty for both.
  std::string free_memory;
  std::string plugin;  ///< absolute path of the plugin library, empty for the built-in batteries
  /// MODULE:FACTORY of --python, or of the one argument that says the same (a module given as a
  /// file path made absolute); empty without either.
  std::string python;
  std::string factory_argument;  ///< MODULE:FACTORY given as the command's one argument
  bool shrink = true;
  int timeout_s = default_timeout_s;
  bool timeout_given = false;
  int shutdown_grace_s = default_shutdown_grace_s;
  bool in_process = false;
  bool list = false;
  bool run_one = false;
  int result_fd = -1;
  /// --driver-faults: the driver-call countdown instead of the property batteries.
  bool driver_faults = false;
  std::int64_t fault_call = -1;  ///< --fault-call N; -1: every case
  /// The forwarded options as given, each name followed by its value (if it takes one).
  std::vector<std::string> forwarded;
  /// --report FILE: the report the parent writes at the end of the run; empty without it.
  std::string report;
};

/// Parses the check command's arguments into `o` and checks how they combine. Returns false for
/// --help (the help text went to `help_out`); throws usage_error for anything it cannot act on.
bool parse_check_options(const std::vector<std::string>& args, const std::string& program_name,
                         std::ostream& help_out, check_options& o);

}  // namespace offloadkit::tools::detail
