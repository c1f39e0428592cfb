// `offloadkit check --driver-faults`: the driver-call countdown on a plugin's implementations. For
// each feature the plugin provides, the feature's scenario (offloadkit/interpose/scenarios.hpp)
// runs in a child process with liboffloadkit_interpose.so preloaded and its call N armed to fail,
// for N = 0, 1, 2, ... until a run reaches no call N; each case is classified and the command
// ends with a table per feature.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "check_cli.hpp"
#include "report.hpp"

namespace offloadkit::tools {

/// What check_cli.cpp parsed for --driver-faults.
struct driver_fault_request {
  std::string library;  ///< the plugin library (for --python: the Python bridge)
  std::string subject;  ///< how messages name it: "plugin PATH", "Python plugin MODULE:FACTORY"
  std::string feature;  ///< --feature; empty: every feature the plugin provides
  std::string executor = "auto";
  std::optional<std::uint64_t> only_call;  ///< --fault-call: this case alone
  int timeout_s = 600;
  int shutdown_grace_s = 30;  ///< --shutdown-grace: a case's time to exit after its result
  bool run_one = false;       ///< a child: run one case of `feature`
  int result_fd = -1;
  /// Options every child gets and every reproduce command shows (--plugin or --python, and
  /// --driver-faults), each name followed by its value.
  std::vector<std::string> forwarded;
  /// --report FILE (empty without it), and its header as far as the options tell it.
  std::string report;
  report_header header;
};

/// Runs the countdown (or, with run_one, one case in this process). Returns the exit status:
/// exit_status::ok when every case of every feature is clean, failed otherwise, unavailable
/// where the cuda back end or the interposer cannot be had, 128 + N when interrupted by signal N.
/// Throws usage_error and plugin_unusable as check_main does.
int driver_faults_main(const check_program& program, const driver_fault_request& request);

/// Where the interposer may be, in the order to look: $OFFLOADKIT_INTERPOSE_LIBRARY (unless it
/// turns the interposer off: see interposer_switched_off), beside an installed command
/// (<prefix>/lib from <prefix>/bin), the build tree this command was built in.
std::vector<std::string> interposer_candidates();

/// Whether $OFFLOADKIT_INTERPOSE_LIBRARY is `none` or `off`: `check` then runs its property
/// children without the interposer.
bool interposer_switched_off();

}  // namespace offloadkit::tools
