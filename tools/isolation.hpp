// Running one piece of untrusted work in a child process: `offloadkit check` runs each property
// this way, so that a segfault, an abort, an exit() or a hang in code under test ends that
// property only. The child is a fresh exec (never a fork of a process that may hold CUDA state,
// which does not survive fork), in a process group of its own so that a time limit or an
// interrupt stops everything it started.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace offloadkit::tools {

/// How a child process ended, as the parent saw it.
struct child_run {
  enum class end {
    exited,       ///< returned from main or called exit(): `exit_code`
    signaled,     ///< killed by `signal` (a crash, an abort, a kill from outside)
    timed_out,    ///< still running at the time limit; the parent killed its process group
    interrupted,  ///< the parent got `signal` (SIGINT, SIGTERM, SIGHUP) and killed the group
  };
  end how = end::exited;
  int exit_code = 0;
  int signal = 0;
  /// timed_out only: it was stopped because it was still running `after_result` after it wrote
  /// its result (run_child's `after_result`), not at the time limit.
  bool past_grace = false;
  std::chrono::milliseconds grace{0};  ///< the `after_result` it ran past
  /// The last bytes (at most run_child's `output_tail_bytes`) the child wrote to stdout and
  /// stderr, in the order it wrote them: both are one pipe.
  std::string output;
  double seconds = 0;  ///< wall time from start to end
};

/// Runs `argv` (argv[0] is the program's path) with stdin from /dev/null and stdout and stderr
/// into a pipe the parent reads, with `extra_fd` (when not -1) inherited as file descriptor
/// `child_fd`, in this process's environment with the NAME=VALUE entries of `environment` added
/// (replacing variables of the same name). Waits for it to end, at most `timeout`. Never returns
/// while a process of the child's group can still be running: the group is killed once the child
/// has ended (a leftover grandchild holding the pipe would otherwise keep the run waiting). With a
/// positive `after_result` and an `extra_fd`, the child has that long to end once something is
/// written to `extra_fd` (its result): a child that hangs on its way out after its result is
/// stopped then, not at `timeout` (past_grace). Throws std::system_error when the child cannot be
/// started.
child_run run_child(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                    int extra_fd = -1, int child_fd = -1,
                    std::size_t output_tail_bytes = std::size_t{64} * 1024,
                    const std::vector<std::string>& environment = {},
                    std::chrono::milliseconds after_result = std::chrono::milliseconds::zero());

/// "SIGSEGV" for 11, "signal 77" for a number without a name.
std::string signal_name(int signal);

/// One line for a child that ended without a usable result: "crashed: signal 11 (SIGSEGV)",
/// "exited with code 1", "timed out after 600 s", "interrupted by SIGINT"; for one stopped past
/// its `after_result` grace, "still running 30 s after its result (killed)".
std::string describe_end(const child_run& run, std::chrono::milliseconds timeout);

/// The path of the running executable (/proc/self/exe resolved), so that a child runs exactly
/// this binary even when it was started through a relative path or PATH.
std::string self_executable();

/// The last `lines` lines of `text` (all of it when it has fewer).
std::string last_lines(const std::string& text, std::size_t lines);

/// An anonymous in-memory file (memfd, close-on-exec in this process) for a child to write its
/// result into: nothing to clean up, whatever way the child ends.
class result_file {
 public:
  result_file();
  ~result_file();
  result_file(const result_file&) = delete;
  result_file& operator=(const result_file&) = delete;

  int fd() const { return fd_; }
  /// Everything written to it so far (from offset 0).
  std::string read_all() const;
  /// Empties it, for the next child.
  void clear();

 private:
  int fd_ = -1;
};

/// Writes `text` to `fd` from offset 0 (the result a child hands its parent). Throws
/// std::system_error when the write fails.
void write_result(int fd, const std::string& text);

}  // namespace offloadkit::tools
