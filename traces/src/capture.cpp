// Running a command under the injection library (capture.hpp).
#include "offloadkit/traces/capture.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "offloadkit/error.hpp"

#ifndef OFFLOADKIT_INJECTION_NAME
#define OFFLOADKIT_INJECTION_NAME "liboffloadkit_injection.so"
#endif

namespace offloadkit::traces {
namespace {

std::string dir_of_self() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

std::string absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == nullptr) return p;
  return std::string(cwd) + "/" + p;
}

}  // namespace

std::string find_injection_library() {
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("OFFLOADKIT_INJECTION"); e != nullptr && *e != '\0') {
    candidates.emplace_back(e);
  }
#ifdef OFFLOADKIT_INJECTION_PATH
  candidates.emplace_back(OFFLOADKIT_INJECTION_PATH);
#endif
  const std::string self = dir_of_self();
  for (const char* sub : {"/", "/../traces/", "/../lib/", "/traces/"}) {
    candidates.push_back(self + sub + OFFLOADKIT_INJECTION_NAME);
  }
  std::string tried;
  for (const auto& p : candidates) {
    char real[PATH_MAX];
    if (access(p.c_str(), R_OK) == 0 && realpath(p.c_str(), real) != nullptr) return real;
    tried += (tried.empty() ? "" : ", ") + p;
  }
  // A message for the user of the command, with no source location: nothing here is a bug.
  throw runtime_error(std::string("the injection library ") + OFFLOADKIT_INJECTION_NAME +
                      " was not found (tried " + tried + "; set OFFLOADKIT_INJECTION)");
}

capture_result capture_command(const std::vector<std::string>& command,
                               const std::string& timeline_path, const std::string& injection) {
  OFFLOADKIT_EXPECTS(!command.empty(), logic_error, "capture_command: no command to run");
  capture_result result;
  result.timeline_path = absolute(timeline_path);
  std::remove(result.timeline_path.c_str());
  std::vector<char*> argv;
  for (const auto& word : command) {
    result.command_line += (result.command_line.empty() ? "" : " ") + word;
    argv.push_back(const_cast<char*>(word.c_str()));
  }
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) OFFLOADKIT_FAIL(runtime_error, "fork failed: ", std::strerror(errno));
  if (pid == 0) {
    setenv("CUDA_INJECTION64_PATH", injection.c_str(), 1);
    setenv("OFFLOADKIT_CAPTURE_OUT", result.timeline_path.c_str(), 1);
    setenv("OFFLOADKIT_CAPTURE_COMMAND", result.command_line.c_str(), 1);
    setenv("OFFLOADKIT_CAPTURE_PID", std::to_string(getpid()).c_str(), 1);
    // NVTX hands its calls (ranges, marks, domains, payloads) only to the library this variable
    // names: the same injection library, whose NVTX collector records them.
    setenv("NVTX_INJECTION64_PATH", injection.c_str(), 1);
    execvp(argv[0], argv.data());
    // The forked child has nothing to return to: it reports and ends as a shell's child does.
    std::fprintf(stderr, "offloadkit capture: cannot run '%s': %s\n", argv[0],
                 std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    OFFLOADKIT_EXPECTS(errno == EINTR, runtime_error, "waitpid failed: ", std::strerror(errno));
  }
  if (WIFEXITED(status)) {
    result.exit_status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_status = 128 + WTERMSIG(status);
  }
  result.timeline_written = access(result.timeline_path.c_str(), R_OK) == 0;
  return result;
}

}  // namespace offloadkit::traces
