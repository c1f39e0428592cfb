// Running a foreign CUDA program under the injection library (CUDA_INJECTION64_PATH), which
// records its timeline with CUPTI into a file (`offloadkit capture` is the command around it).
#pragma once

#include <string>
#include <vector>

namespace offloadkit::traces {

/// How a captured command ended.
struct capture_result {
  /// The command's exit status; 128 + N when it was killed by signal N; 127 when it could not be
  /// started (as a shell reports it).
  int exit_status = 0;
  std::string command_line;       ///< the command's words joined by spaces, for the report
  std::string timeline_path;      ///< where the timeline was asked for, absolute
  bool timeline_written = false;  ///< false: the command made no CUDA driver call, or it ended
                                  ///< without running exit handlers
};

/// The injection library: $OFFLOADKIT_INJECTION, the build tree's copy, or one beside the running
/// binary. Throws offloadkit::runtime_error naming every place it looked when there is none.
std::string find_injection_library();

/// Runs `command` (a program and its arguments, looked up on PATH) with the injection library
/// `injection`, which writes the timeline to `timeline_path` (made absolute; an old file there is
/// removed first) when the program exits. Waits for it. Throws offloadkit::logic_error for an
/// empty command and offloadkit::runtime_error when no process can be started.
capture_result capture_command(const std::vector<std::string>& command,
                               const std::string& timeline_path, const std::string& injection);

}  // namespace offloadkit::traces
