// nccl_region_test: an NCCL all-reduce across two GPUs, captured in a CUDA graph before a region
// is paused and replayed after it is resumed, must give the right sum. The region is
// offloadkit's vmm_region: pause releases its physical memory and resume maps new physical memory
// at the same virtual address, which is what torch_memory_saver does to a KV cache (and where its
// issue #88 saw NCCL graphs hang after a resume).
//
// One process drives both GPUs (ncclCommInitAll over devices 0 and 1), each with its own stream
// from the cuda executor. Each variant runs in a child process of its own, so that a hang or a
// crash in one is one row of the table and the others still run; `--variant NAME` runs one
// in-process. Every wait has a deadline: a step that does not complete in time is reported as a
// hang and the process ends with _exit (NCCL kernels cannot be cancelled).
//
// Variants (NCCL_NVLS_ENABLE=0 in all of them):
//   plain                    in-place all-reduce of the region, NCCL's defaults. The issue's
//                            criterion: the right sum after every resume.
//   plain-nographreg         the same with NCCL_GRAPH_REGISTER=0: a control that tells, should
//                            plain fail, whether NCCL's graph-time registration is the cause.
//   out-of-place             region -> output region, NCCL_GRAPH_REGISTER=1 (NCCL's default):
//                            NCCL may register the output's cuMem memory when the graph is
//                            captured (zero-copy over NVLink) and keep that registration until
//                            the graph is destroyed. Shows whether that survives a remap.
//   out-of-place-nographreg  the same with NCCL_GRAPH_REGISTER=0, the workaround of #88.
//   registered               out of place, both regions registered with ncclCommRegister before
//                            the capture and kept registered across pause and resume.
//   registered-reregister    deregistered before each pause, registered again and the graphs
//                            captured again after each resume.
// The out-of-place variants force NCCL_PROTO=Simple: NCCL registers user buffers for the Simple
// protocol only (src/register/coll_reg.cc), and an in-place ring or tree all-reduce never. The
// registered variants turn graph-time registration off, so that only ncclCommRegister's is at
// work. Whether NCCL held a registration across a pause shows in the device memory the pause
// gives back: memory NCCL mapped for the peer is not released until NCCL unmaps it.
//
// `--executor host` runs the same scenario on the host executor with a host stand-in for NCCL
// (collectives.hpp), optionally planting a hang, a wrong sum, a crash or an error, so that the
// checks and the report are exercised on machines without GPUs.
//
// What NCCL documents (NCCL User Guide, "User Buffer Registration",
// docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/bufferreg.html): a buffer registered
// while a graph is captured stays registered until the graph is destroyed, and one registered
// with ncclCommRegister until ncclCommDeregister; registration requires memory from ncclMemAlloc
// or a cuMem allocator. The guide does not say in so many words that a registered buffer must not
// be remapped, but registration belongs to the allocation: for a peer on the same node NCCL maps
// the buffer's physical allocation (cuMemRetainAllocationHandle) into the peer's address space
// (src/transport/p2p.cc, ipcRegisterBuffer), and that mapping is not told about a later remap.
// So a wrong sum in out-of-place or registered is reported as a finding, not a failure; the
// exit status depends on plain, out-of-place-nographreg and registered-reregister, which must
// give the right sum.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli_common.hpp"
#include "collectives.hpp"
#include "markup.hpp"
#include "nccl_api.hpp"
#include "nccl_test.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/region/region.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::multigpu {

// ---- variants -----------------------------------------------------------------------------------

const std::vector<variant>& all_variants() {
  static const std::vector<variant> variants = {
      {"plain",
       false,
       registration::none,
       true,
       {},
       "in-place all-reduce of the region, NCCL's defaults"},
      {"plain-nographreg",
       false,
       registration::none,
       false,
       {{"NCCL_GRAPH_REGISTER", "0"}},
       "as plain with NCCL's graph-time registration off: a control, should plain fail"},
      {"out-of-place",
       true,
       registration::none,
       false,
       {{"NCCL_GRAPH_REGISTER", "1"}, {"NCCL_PROTO", "Simple"}},
       "region -> output region; NCCL may register the output's memory at capture (its default)"},
      {"out-of-place-nographreg",
       true,
       registration::none,
       true,
       {{"NCCL_GRAPH_REGISTER", "0"}, {"NCCL_PROTO", "Simple"}},
       "region -> output region with NCCL's graph-time registration off"},
      {"registered",
       true,
       registration::kept,
       false,
       {{"NCCL_GRAPH_REGISTER", "0"}, {"NCCL_LOCAL_REGISTER", "1"}, {"NCCL_PROTO", "Simple"}},
       "region -> output region, both registered with ncclCommRegister and kept registered"},
      {"registered-reregister",
       true,
       registration::redone,
       true,
       {{"NCCL_GRAPH_REGISTER", "0"}, {"NCCL_LOCAL_REGISTER", "1"}, {"NCCL_PROTO", "Simple"}},
       "as registered, but deregistered before pause, registered and captured again after "
       "resume"},
  };
  return variants;
}

const variant* find_variant(const std::string& name) {
  for (const variant& v : all_variants()) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

// ---- output -------------------------------------------------------------------------------------

std::string mib(long long bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

std::string seconds_since(clock_type::time_point start) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s",
                std::chrono::duration<double>(clock_type::now() - start).count());
  return text;
}

void write_out(const std::string& text) {
  std::fflush(stdout);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

namespace {

/// The first wrong sum found, if any.
std::mutex earlier_mutex;
std::string earlier_wrong;

}  // namespace

void note_wrong(const std::string& text) {
  const std::lock_guard<std::mutex> lock(earlier_mutex);
  if (earlier_wrong.empty()) earlier_wrong = text;
}

std::string after_earlier_wrong(const std::string& text) {
  const std::lock_guard<std::mutex> lock(earlier_mutex);
  return earlier_wrong.empty() ? text : "wrong sum: " + earlier_wrong + "; then " + text;
}

void finish(int code, const std::string& result) {
  write_out(std::string(result_prefix) + result + "\n");
  ::_exit(code);
}

void hang(const std::string& what, int seconds) {
  const std::string text =
      "hang: " + what + " did not complete within " + std::to_string(seconds) + " s";
  write_out(text + "\n");
  finish(exit_hang, after_earlier_wrong(text));
}

void skip(const std::string& reason) {
  write_out("OFFLOADKIT SKIP: " + reason + "\n");
  finish(exit_skip, "skipped: " + reason);
}

namespace {

// ---- options ------------------------------------------------------------------------------------

/// Parses the command line into `o`: -1 to go on, or the exit status (0 after --help, 2 after a
/// usage error, on stderr as "nccl_region_test: <option>: <value> ... valid ...").
int parse_options(int argc, char** argv, options& o) {
  namespace tools = offloadkit::tools;
  auto app = tools::make_app(
      "",
      "An NCCL all-reduce across GPUs 0 and 1, captured in a CUDA graph before a vmm_region is\n"
      "paused and replayed after it is resumed. Without --variant, runs every variant in a child\n"
      "process and prints a table; exit 0 when every gating variant gives the right sum, 1 when\n"
      "one does not, 77 when the test cannot run here (no two GPUs, no NCCL).",
      "Environment: OFFLOADKIT_NCCL_LIBRARY (path of libnccl.so.2), OFFLOADKIT_PYTHON (the\n"
      "interpreter whose site-packages hold NCCL's wheel; default python3 on PATH, then\n"
      "/usr/bin/python3). NCCL_NVLS_ENABLE is always 0.\n"
      "Exit status: 0 right sums, 1 a wrong sum, 2 bad usage, 3 error, 4 hang, 77 skipped.",
      "nccl_region_test");
  app->add_option("--variant", o.variant,
                  "run one variant in this process (--list names them); exit 0 right sum, 1 "
                  "wrong sum, 3 error, 4 hang, 77 skipped")
      ->type_name("NAME");
  app->add_option("--rounds", o.rounds,
                  "pause/resume rounds after the first replay, 1..50 (default 3; the last one "
                  "pauses with discard when N >= 2)")
      ->type_name("N")
      ->check(tools::integer_range(1, 50));
  app->add_option("--elements", o.elements,
                  "floats per region, 1..268435456 (default 6303801, about 24 MiB)")
      ->type_name("N")
      ->check(tools::unsigned_range(1, 268435456));
  app->add_option("--deadline", o.deadline_s,
                  "seconds each step may take before it is reported as a hang, 1..3600 (default "
                  "60)")
      ->type_name("S")
      ->check(tools::integer_range(1, 3600));
  tools::add_executor_option(*app, o.executor)
      ->description(
          "cuda (default): NCCL on GPUs 0 and 1; host: the host executor with a host stand-in "
          "for NCCL, a dry run of the scenario without GPUs");
  app->add_option("--host-fault", o.fault_name,
                  "with --executor host, plant a fault at the first replay after a resume: none, "
                  "hang, wrong, crash, error (shows how each is reported)")
      ->type_name("F")
      ->check(tools::one_of({"none", "hang", "wrong", "crash", "error"}));
  app->add_option("--findings", o.findings,
                  "without --variant, also write the table and what each variant's result means "
                  "to FILE (Markdown), whatever the outcome")
      ->type_name("FILE")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.empty() ? std::string("an empty path: name the file to write") : "";
          },
          ""));
  app->add_flag("--list", o.list, "name the variants and whether each gates the verdict");
  app->add_flag("--find-nccl", o.find_nccl_only, "only look for NCCL and say what was tried");
  // Checked once every option is read, and refused like any other bad value.
  app->callback([&o] {
    if (!o.findings.empty() && !o.variant.empty()) {
      throw CLI::ValidationError("--findings", o.findings +
                                                   " needs the runner (no --variant): one variant "
                                                   "prints its own result");
    }
    if (o.fault_name != "none" && o.executor != "host") {
      throw CLI::ValidationError("--host-fault",
                                 o.fault_name + " needs --executor host (NCCL is not faulted)");
    }
  });
  if (const int status = tools::parse_program_arguments(*app, argc, argv, std::cout, std::cerr);
      status >= 0) {
    return status;
  }
  (void)parse_host_fault(o.fault_name, o.fault);
  return -1;
}

// ---- the runner: every variant in a child process -----------------------------------------------

struct child_outcome {
  enum class end { exited, signaled, timed_out } how = end::exited;
  int code = 0;
  int signal = 0;
  std::string result;  ///< the child's result line, without the prefix
  long long held = -1;
  double seconds = 0;
};

std::string signal_text(int sig) {
  const char* name = ::strsignal(sig);
  return "signal " + std::to_string(sig) + (name != nullptr ? std::string(" (") + name + ")" : "");
}

/// Runs `args` (args[0] is this program) with stdout and stderr into a pipe, echoing each line
/// with `prefix` as it arrives (a child that hangs has already shown how far it got), for at most
/// `limit`. The child has a process group of its own and dies with this process.
child_outcome run_child(const std::vector<std::string>& args, const std::string& prefix,
                        std::chrono::seconds limit) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2 failed: ") + std::strerror(errno));
  }
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // The child: async-signal-safe calls only until exec. The runner made no CUDA call.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::execv(argv[0], argv.data());
    static const char failed[] = "nccl_region_test: exec of the variant's process failed\n";
    (void)!::write(STDERR_FILENO, failed, sizeof failed - 1);
    ::_exit(127);
  }
  ::close(fds[1]);
  const int out = fds[0];
  ::fcntl(out, F_SETFL, O_NONBLOCK);

  child_outcome outcome;
  std::string pending;
  auto take_line = [&](const std::string& line) {
    std::printf("%s%s\n", prefix.c_str(), line.c_str());
    if (line.rfind(result_prefix, 0) == 0) outcome.result = line.substr(std::strlen(result_prefix));
    if (line.rfind(held_prefix, 0) == 0) {
      outcome.held = std::strtoll(line.c_str() + std::strlen(held_prefix), nullptr, 10);
    }
  };
  // Reads what the pipe has; false at end of file.
  auto drain = [&]() {
    char chunk[8192];
    for (;;) {
      const ssize_t n = ::read(out, chunk, sizeof chunk);
      if (n > 0) {
        pending.append(chunk, static_cast<std::size_t>(n));
        for (std::size_t eol = 0; (eol = pending.find('\n')) != std::string::npos;) {
          take_line(pending.substr(0, eol));
          pending.erase(0, eol + 1);
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0;  // EAGAIN: open, nothing now; 0: end of file
    }
  };

  const auto start = clock_type::now();
  int status = 0;
  for (;;) {
    pollfd p{out, POLLIN, 0};
    (void)::poll(&p, 1, 100);
    drain();
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (clock_type::now() - start > limit) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      outcome.how = child_outcome::end::timed_out;
      break;
    }
  }
  ::kill(-pid, SIGKILL);  // anything the child left in its group
  while (drain()) {
    pollfd p{out, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) break;
  }
  if (!pending.empty()) take_line(pending);
  ::close(out);
  outcome.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  if (outcome.how != child_outcome::end::timed_out) {
    if (WIFSIGNALED(status)) {
      outcome.how = child_outcome::end::signaled;
      outcome.signal = WTERMSIG(status);
    } else {
      outcome.code = WEXITSTATUS(status);
    }
  }
  return outcome;
}

std::string describe(const child_outcome& c, std::chrono::seconds limit) {
  switch (c.how) {
    case child_outcome::end::timed_out:
      return "hang: no result within " + std::to_string(limit.count()) +
             " s; the runner killed it" + (c.result.empty() ? "" : " (last: " + c.result + ")");
    case child_outcome::end::signaled:
      return "crashed: " + signal_text(c.signal);
    case child_outcome::end::exited:
      break;
  }
  const bool known = c.code == exit_right || c.code == exit_wrong || c.code == exit_error ||
                     c.code == exit_hang || c.code == exit_skip;
  if (known && !c.result.empty()) return c.result;
  return "exited with code " + std::to_string(c.code) +
         (c.result.empty() ? " without a result" : ": " + c.result);
}

/// What a variant's outcome means, for the report under the table.
std::string interpretation(const variant& v, const child_outcome& c, const std::string& result) {
  const bool right = c.how == child_outcome::end::exited && c.code == exit_right;
  if (v.name == "plain") {
    return right ? "the graph captured before the first pause gives the right sum after every "
                   "resume (the issue's criterion)."
                 : "FAILS the issue's criterion: " + result;
  }
  if (v.name == "plain-nographreg") {
    return right ? "right sum (the control for plain: NCCL's graph-time registration off)."
                 : "fails (not gating): " + result;
  }
  if (v.name != "out-of-place" && v.name != "registered") {
    if (!right) return "FAILS: " + result;
    return v.name == "registered-reregister"
               ? "right sum: deregistering before the pause, then registering and capturing again "
                 "after the resume, is what a registered region needs."
               : "right sum: without NCCL's graph-time registration the graph reaches the output "
                 "through its address, which resume maps again.";
  }
  // The findings. Whether NCCL kept a mapping of the regions' memory across a pause (its
  // registration) tells whether the registration this variant looks at was in effect.
  const bool graph = v.name == "out-of-place";
  const std::string how = graph ? "NCCL's graph-time registration (NCCL_GRAPH_REGISTER=1, its "
                                  "default)"
                                : "a registration made with ncclCommRegister";
  if (c.held > 0) {
    const std::string kept = "while paused, " + mib(c.held) +
                             " of the regions' device memory stayed mapped elsewhere (NCCL's "
                             "mapping of the memory it had registered)";
    if (right) return "right sum, although " + kept + ".";
    return how + " does not survive a remap: " + kept +
           ". NCCL maps registered physical memory into the peer GPU and keeps that mapping "
           "until " +
           (graph ? "the graph is destroyed" : "ncclCommDeregister") +
           ", so after the resume the peer still reaches the old memory. NCCL documents that a "
           "registration lasts that long (NCCL User Guide, User Buffer Registration) and ties it "
           "to the allocation; it does not promise to follow a remap, so this is a finding, not a "
           "failure. " +
           (graph ? "Under a region that is paused, set NCCL_GRAPH_REGISTER=0 "
                    "(out-of-place-nographreg) or capture again after resume; torch_memory_saver "
                    "#88 saw this as a hang."
                  : "Deregister before the pause, register and capture again after the resume "
                    "(registered-reregister).") +
           " Result: " + result;
  }
  if (c.held == 0) {
    const std::string none =
        "every pause gave all of the regions' device memory back to the driver, so NCCL held no "
        "registration of it across the pause: " +
        how +
        " was not in effect for this all-reduce here (the NCCL INFO REG lines above say what NCCL "
        "did)";
    return right ? "right sum; " + none + ", and this run says nothing about a registered remap."
                 : "FAILS, and not because of a registration: " + none + ". " + result;
  }
  return right ? "right sum." : "FAILS before any pause: " + result;
}

int run_all(const options& o) {
  const std::string self = [] {
    std::string path(4096, '\0');
    const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
    if (n <= 0) {
      throw std::runtime_error(std::string("readlink(/proc/self/exe) failed: ") +
                               std::strerror(errno));
    }
    path.resize(static_cast<std::size_t>(n));
    return path;
  }();
  // A child bounds every step itself; this limit only catches one that cannot end at all.
  const std::chrono::seconds limit(3LL * o.deadline_s + 60);
  std::printf(
      "nccl_region_test: %zu variants, each in a process of its own (executor %s%s; "
      "NCCL_NVLS_ENABLE=0; %d pause/resume rounds; %zu floats per region; %d s per step)\n",
      all_variants().size(), o.executor.c_str(),
      o.fault == host_fault::none ? "" : (", planted fault " + o.fault_name).c_str(), o.rounds,
      o.elements, o.deadline_s);

  struct row {
    const variant* v;
    child_outcome outcome;
    std::string result;
  };
  std::vector<row> rows;
  for (const variant& v : all_variants()) {
    std::printf("\n---- %s: %s\n", v.name.c_str(), v.what.c_str());
    const std::vector<std::string> args = {self,
                                           "--variant",
                                           v.name,
                                           "--rounds",
                                           std::to_string(o.rounds),
                                           "--elements",
                                           std::to_string(o.elements),
                                           "--deadline",
                                           std::to_string(o.deadline_s),
                                           "--executor",
                                           o.executor,
                                           "--host-fault",
                                           o.fault_name};
    child_outcome c = run_child(args, "[" + v.name + "] ", limit);
    std::string result = describe(c, limit);
    std::printf("---- %s: %s (%.1f s)\n", v.name.c_str(), result.c_str(), c.seconds);
    rows.push_back({&v, std::move(c), std::move(result)});
  }

  // The table, what each result means, and the verdict: printed, and written to --findings
  // whatever the verdict, so that a passing run records its findings too.
  const std::string planted = o.fault == host_fault::none ? "" : ", planted fault " + o.fault_name;
  std::string table =
      "nccl_region_test results (executor " + o.executor + planted + ", NCCL_NVLS_ENABLE=0):\n";
  std::string markdown =
      "# nccl_region_test findings\n\nExecutor " + o.executor + planted + "; NCCL_NVLS_ENABLE=0; " +
      std::to_string(o.rounds) + " pause/resume rounds; " + std::to_string(o.elements) +
      " floats per region; " + std::to_string(o.deadline_s) +
      " s per step.\n\n| variant | gates | result | seconds |\n|---|---|---|---|\n";
  char line[64];
  for (const row& r : rows) {
    std::snprintf(line, sizeof line, "  %-24s | %-5s | ", r.v->name.c_str(),
                  r.v->gates ? "yes" : "no");
    table += line + r.result + "\n";
    std::snprintf(line, sizeof line, "%.1f", r.outcome.seconds);
    markdown += "| " + r.v->name + " | " + (r.v->gates ? "yes" : "no") + " | " +
                offloadkit::tools::md_cell(r.result) + " | " + line + " |\n";
  }
  table += "\n";
  markdown += "\n## What each result means\n\n";
  for (const row& r : rows) {
    if (r.outcome.how == child_outcome::end::exited && r.outcome.code == exit_skip) continue;
    const std::string meaning = interpretation(*r.v, r.outcome, r.result);
    table += "  " + r.v->name + ": " + meaning + "\n";
    markdown += "- **" + r.v->name + "**: " + offloadkit::tools::md_cell(meaning) + "\n";
  }

  int code = exit_right;
  std::string verdict;
  const row& plain = rows.front();
  if (plain.outcome.how == child_outcome::end::exited && plain.outcome.code == exit_skip) {
    const std::string& r = plain.result;
    verdict = "OFFLOADKIT SKIP: " + (r.rfind("skipped: ", 0) == 0 ? r.substr(9) : r);
    code = exit_skip;
  } else {
    std::string failed;
    std::string skipped_names;
    for (const row& r : rows) {
      const bool right =
          r.outcome.how == child_outcome::end::exited && r.outcome.code == exit_right;
      const bool skipped =
          r.outcome.how == child_outcome::end::exited && r.outcome.code == exit_skip;
      if (r.v->gates && !right && !skipped) failed += (failed.empty() ? "" : ", ") + r.v->name;
      if (r.v->gates && skipped) skipped_names += (skipped_names.empty() ? "" : ", ") + r.v->name;
    }
    if (!failed.empty()) {
      verdict = "FAIL: " + failed +
                " did not give the right sum (see the table and each variant's output)";
      code = exit_wrong;
    } else {
      verdict = "PASS: every gating variant gives the right sum after resume" +
                (skipped_names.empty() ? "" : " (skipped: " + skipped_names + ")");
    }
  }
  std::printf("\n%s%s\n", table.c_str(), verdict.c_str());
  if (!o.findings.empty()) {
    markdown += "\n" + verdict + "\n";
    std::ofstream out(o.findings, std::ios::binary | std::ios::trunc);
    out << markdown;
    out.close();
    if (!out) {
      std::fprintf(stderr, "nccl_region_test: --findings: %s cannot be written: %s\n",
                   o.findings.c_str(), std::strerror(errno));
      return exit_error;
    }
    std::printf("findings written to %s\n", o.findings.c_str());
  }
  return code;
}

int find_nccl_main() {
  const nccl_search s = find_nccl();
  for (const std::string& a : s.attempts) std::printf("not used: %s\n", a.c_str());
  if (!s.loaded) {
    std::printf("NCCL not found: %s\n", s.summary().c_str());
    return 1;
  }
  std::printf("NCCL %s from %s (ncclCommRegister: %s)\n", s.api.version_text().c_str(),
              s.api.path.c_str(), s.api.comm_register != nullptr ? "yes" : "no");
  return 0;
}

int main_impl(int argc, char** argv) {
  // Line by line, so that a child's output reaches the runner as it goes and nothing is lost
  // when a hang ends the process with _exit.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // NVLink SHARP off, in every process and before NCCL is loaded: forced (overwrite = 1), not
  // defaulted, because NVLS registers buffers with a multicast object, a mechanism of its own
  // that this test does not check, and the issue asks for it off.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  options o;
  if (const int status = parse_options(argc, argv, o); status >= 0) return status;
  if (o.list) {
    for (const variant& v : all_variants()) {
      std::printf("%-24s %-7s %s\n", v.name.c_str(), v.gates ? "gates" : "finding", v.what.c_str());
    }
    return 0;
  }
  if (o.find_nccl_only) return find_nccl_main();
  if (o.variant.empty()) return run_all(o);
  const variant* v = find_variant(o.variant);
  if (v == nullptr) {
    std::string names;
    for (const variant& known : all_variants()) names += (names.empty() ? "" : ", ") + known.name;
    std::fprintf(stderr,
                 "nccl_region_test: --variant: '%s' is not a variant: valid are %s\n"
                 "(nccl_region_test --help shows the usage)\n",
                 o.variant.c_str(), names.c_str());
    return exit_usage;
  }
  run_scenario(*v, o);
}

}  // namespace
}  // namespace offloadkit::multigpu

int main(int argc, char** argv) {
  try {
    return offloadkit::multigpu::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_region_test: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "nccl_region_test: an exception that is not a std::exception\n");
  }
  return offloadkit::multigpu::exit_error;
}
