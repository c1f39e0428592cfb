// `offloadkit capture` (run a command under the injection library, then analyse its timeline) and
// `offloadkit analyze` (analyse a timeline file).
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "offloadkit/traces/analysis.hpp"
#include "offloadkit/traces/cli.hpp"
#include "offloadkit/traces/cupti_recorder.hpp"
#include "offloadkit/traces/export.hpp"

#ifndef OFFLOADKIT_INJECTION_NAME
#define OFFLOADKIT_INJECTION_NAME "liboffloadkit_injection.so"
#endif

namespace offloadkit::traces {
namespace {

struct analysis_args {
  analysis_options options;
  double h2d_limit = 0;  // GB/s; 0: no ratio printed
  double d2h_limit = 0;
  double min_overlap = -1;  // <0: reported, not checked
  bool strict = false;      // fail on pageable copies / steady-state pinned allocs / syncs
  std::string svg;
};

/// Consumes one analysis option at argv[i]; returns false when it is not one.
bool parse_analysis_option(int argc, char** argv, int& i, analysis_args& a) {
  const std::string arg = argv[i];
  auto value = [&]() -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
    return argv[++i];
  };
  if (arg == "--svg") {
    a.svg = value();
  } else if (arg == "--step-prefix") {
    a.options.step_prefix = value();
  } else if (arg == "--h2d-limit") {
    a.h2d_limit = std::stod(value());
  } else if (arg == "--d2h-limit") {
    a.d2h_limit = std::stod(value());
  } else if (arg == "--min-overlap") {
    a.min_overlap = std::stod(value());
  } else if (arg == "--strict") {
    a.strict = true;
  } else {
    return false;
  }
  return true;
}

const char* analysis_usage =
    "  --svg FILE          timeline picture (default: the timeline path with .svg)\n"
    "  --step-prefix P     NVTX ranges/markers named P... delimit steps (default: step)\n"
    "  --h2d-limit GB/s    print H2D bandwidth as a ratio to this limit\n"
    "  --d2h-limit GB/s    print D2H bandwidth as a ratio to this limit\n"
    "  --min-overlap F     fail unless at least F (0..1) of copy time overlaps compute\n"
    "  --strict            also fail on pageable copies, pinned allocations after the first\n"
    "                      step and host synchronizations inside steps\n";

std::string default_svg(const std::string& json_path) {
  const std::string ext = ".json";
  if (json_path.size() > ext.size() &&
      json_path.compare(json_path.size() - ext.size(), ext.size(), ext) == 0) {
    return json_path.substr(0, json_path.size() - ext.size()) + ".svg";
  }
  return json_path + ".svg";
}

/// Prints the report and the checks; returns 0 when every requested check passed.
int analyse(const timeline& t, const std::string& json_path, const analysis_args& a) {
  std::printf("%s\n", summary(t, a.options, a.h2d_limit, a.d2h_limit).c_str());
  int rc = 0;
  std::vector<check_report> reports;
  if (a.min_overlap >= 0) reports.push_back(check_copy_overlap(t, a.min_overlap, a.options));
  if (a.strict) {
    reports.push_back(check_no_pageable_copies(t));
    reports.push_back(check_no_steady_state_pinned_allocations(t, a.options));
    reports.push_back(check_no_host_syncs_in_steps(t, a.options));
  }
  for (const auto& r : reports) {
    std::printf("%s %s: %s\n", r.passed ? "PASS" : "FAIL", r.name.c_str(), r.text.c_str());
    if (!r.passed) rc = 1;
  }
  const std::string svg = a.svg.empty() ? default_svg(json_path) : a.svg;
  svg_options so;
  so.title = t.source.empty() ? json_path : t.source;
  write_svg(t, svg, so);
  std::printf("timeline: %s (open in https://ui.perfetto.dev)\npicture: %s\n", json_path.c_str(),
              svg.c_str());
  return rc;
}

std::string dir_of_self() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

/// The injection library: $OFFLOADKIT_INJECTION, the build tree's copy, or next to the binary.
std::string find_injection(std::string& tried) {
  std::vector<std::string> c;
  if (const char* e = std::getenv("OFFLOADKIT_INJECTION"); e != nullptr && *e != '\0')
    c.push_back(e);
#ifdef OFFLOADKIT_INJECTION_PATH
  c.emplace_back(OFFLOADKIT_INJECTION_PATH);
#endif
  const std::string self = dir_of_self();
  for (const char* sub : {"/", "/../traces/", "/../lib/", "/traces/"}) {
    c.push_back(self + sub + OFFLOADKIT_INJECTION_NAME);
  }
  for (const auto& p : c) {
    char real[PATH_MAX];
    if (access(p.c_str(), R_OK) == 0 && realpath(p.c_str(), real) != nullptr) return real;
    tried += (tried.empty() ? "" : ", ") + p;
  }
  return "";
}

std::string absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == nullptr) return p;
  return std::string(cwd) + "/" + p;
}

}  // namespace

int capture_main(int argc, char** argv) {
  analysis_args a;
  std::string out;
  std::vector<char*> command;
  try {
    int i = 1;
    for (; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--") {
        ++i;
        break;
      }
      if (arg == "-o" || arg == "--output") {
        if (i + 1 >= argc) throw std::invalid_argument("-o needs a file");
        out = argv[++i];
      } else if (arg == "-h" || arg == "--help") {
        std::printf("usage: offloadkit capture -o out.json [options] -- <command...>\n%s",
                    analysis_usage);
        return 0;
      } else if (!parse_analysis_option(argc, argv, i, a)) {
        throw std::invalid_argument("unknown option '" + arg + "'");
      }
    }
    for (; i < argc; ++i) command.push_back(argv[i]);
    if (out.empty()) throw std::invalid_argument("missing -o out.json");
    if (command.empty()) throw std::invalid_argument("missing the command after --");
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "offloadkit capture: %s\nusage: offloadkit capture -o out.json [options] -- "
                 "<command...>\n%s",
                 e.what(), analysis_usage);
    return 2;
  }
  const std::string reason = cupti_recorder::unavailable_reason();
  if (!reason.empty()) {
    std::printf("skipped: %s\n", reason.c_str());
    return 77;
  }
  std::string tried;
  const std::string injection = find_injection(tried);
  if (injection.empty()) {
    std::fprintf(stderr,
                 "offloadkit capture: the injection library %s was not found (tried %s; "
                 "set OFFLOADKIT_INJECTION)\n",
                 OFFLOADKIT_INJECTION_NAME, tried.c_str());
    return 2;
  }
  out = absolute(out);
  std::remove(out.c_str());
  std::string cmdline;
  for (char* c : command) cmdline += (cmdline.empty() ? "" : " ") + std::string(c);
  command.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("offloadkit capture: fork");
    return 2;
  }
  if (pid == 0) {
    setenv("CUDA_INJECTION64_PATH", injection.c_str(), 1);
    setenv("OFFLOADKIT_CAPTURE_OUT", out.c_str(), 1);
    setenv("OFFLOADKIT_CAPTURE_COMMAND", cmdline.c_str(), 1);
    setenv("OFFLOADKIT_CAPTURE_PID", std::to_string(getpid()).c_str(), 1);
    // NVTX ranges reach CUPTI only through NVTX's own injection variable.
    setenv("NVTX_INJECTION64_PATH", cupti_recorder::library_path().c_str(), 0);
    execvp(command[0], command.data());
    std::fprintf(stderr, "offloadkit capture: cannot run '%s': %s\n", command[0],
                 std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::perror("offloadkit capture: waitpid");
      return 2;
    }
  }
  int child_rc = 0;
  if (WIFEXITED(status)) {
    child_rc = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    child_rc = 128 + WTERMSIG(status);
  }
  std::printf("command: %s (exit %d)\n", cmdline.c_str(), child_rc);
  if (access(out.c_str(), R_OK) != 0) {
    std::fprintf(stderr,
                 "offloadkit capture: no timeline was written to %s: the command made no CUDA "
                 "driver call, or it ended without running exit handlers\n",
                 out.c_str());
    return child_rc != 0 ? child_rc : 1;
  }
  try {
    const timeline t = read_chrome_trace(out);
    const int rc = analyse(t, out, a);
    return child_rc != 0 ? child_rc : rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offloadkit capture: %s\n", e.what());
    return 1;
  }
}

int analyze_main(int argc, char** argv) {
  analysis_args a;
  std::string path;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "-h" || arg == "--help") {
        std::printf("usage: offloadkit analyze TIMELINE.json [options]\n%s", analysis_usage);
        return 0;
      }
      if (parse_analysis_option(argc, argv, i, a)) continue;
      if (!arg.empty() && arg[0] == '-')
        throw std::invalid_argument("unknown option '" + arg + "'");
      if (!path.empty()) throw std::invalid_argument("more than one timeline given");
      path = arg;
    }
    if (path.empty()) throw std::invalid_argument("missing the timeline file");
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "offloadkit analyze: %s\nusage: offloadkit analyze TIMELINE.json [options]\n%s",
                 e.what(), analysis_usage);
    return 2;
  }
  try {
    return analyse(read_chrome_trace(path), path, a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offloadkit analyze: %s\n", e.what());
    return 1;
  }
}

}  // namespace offloadkit::traces
