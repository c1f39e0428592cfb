// A check program whose properties misbehave the ways third-party offload code does: segfault,
// abort, exit() without a word, hang, leave a process behind, crash on the way out. It runs the
// same check command as `offloadkit check` (offloadkit_check_cli) with these cases instead of the
// batteries, so that expect_isolation.cmake can prove that each misbehaviour is one failure row
// and that the properties after it still run. Test-only: nothing here is linked into offloadkit.
#include <rapidcheck.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "check_cli.hpp"

namespace {

using offloadkit::check_case;
using offloadkit::executor;

/// An address nothing is mapped at; volatile, so that the compiler cannot see the store is invalid
/// and replace it with a trap of its own.
volatile std::uintptr_t unmapped_address = 8;

void passes(executor& /*ex*/) {
  const int n = *rc::gen::inRange(0, 1000);
  RC_ASSERT(n >= 0);
}

void fails(executor& /*ex*/) {
  const int n = *rc::gen::inRange(0, 1000);
  RC_ASSERT(n < 3);
}

void segfaults(executor& /*ex*/) {
  std::fprintf(stderr, "fixture: about to store to an unmapped address\n");
  std::fflush(stderr);
  *reinterpret_cast<volatile int*>(unmapped_address) = 1;
}

void aborts(executor& /*ex*/) { std::abort(); }

void exits(executor& /*ex*/) {
  std::printf("fixture: giving up with exit(1)\n");
  std::exit(1);
}

void hangs(executor& /*ex*/) {
  std::printf("fixture: waiting forever\n");
  std::fflush(stdout);
  for (;;) ::pause();
}

/// Exits while a process it started still holds its stdout: the run must not wait for that
/// process to close the pipe.
void exits_leaving_a_process(executor& /*ex*/) {
  if (::fork() == 0) {
    for (;;) ::pause();
  }
  std::_Exit(0);
}

/// Passes every case, then crashes after main returns (a static destructor of the code under
/// test, say).
void crashes_on_exit(executor& /*ex*/) {
  static const bool registered = [] {
    std::atexit([] { std::raise(SIGSEGV); });
    return true;
  }();
  RC_ASSERT(registered);
}

/// Passes every case, then never exits (a thread of the code under test that exit waits for,
/// say): stopped --shutdown-grace after its result, not at the time limit.
void hangs_on_exit(executor& /*ex*/) {
  static const bool registered = [] {
    std::atexit([] {
      for (;;) ::pause();
    });
    return true;
  }();
  RC_ASSERT(registered);
}

std::vector<check_case> fixture_cases(const std::string& /*executor_name*/) {
  std::vector<check_case> cases;
  auto add = [&cases](const char* name, void (*body)(executor&)) {
    check_case c;
    c.feature = "fixture";
    c.implementation = "misbehaving";
    c.name = name;
    c.property = body;
    c.default_cases = 5;
    cases.push_back(std::move(c));
  };
  add("passes_first", passes);
  add("fails", fails);
  add("segfaults", segfaults);
  add("aborts", aborts);
  add("exits", exits);
  add("hangs", hangs);
  add("exits_leaving_a_process", exits_leaving_a_process);
  add("crashes_on_exit", crashes_on_exit);
  add("passes_last", passes);
  add("hangs_on_exit", hangs_on_exit);
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  // Crashing on purpose must not write core files into the build tree.
  rlimit core{};
  if (::getrlimit(RLIMIT_CORE, &core) == 0) {
    core.rlim_cur = 0;
    ::setrlimit(RLIMIT_CORE, &core);
  }
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] != "check") {
    std::cerr << "usage: check_isolation_fixture check [options]\n";
    return offloadkit::tools::exit_status::usage;
  }
  offloadkit::tools::check_program program;
  program.name = "check_isolation_fixture";
  program.cases = fixture_cases;
  try {
    return offloadkit::tools::check_main({args.begin() + 1, args.end()}, program);
  } catch (const offloadkit::tools::usage_error& e) {
    std::cerr << "check_isolation_fixture: " << e.what() << "\n";
    return offloadkit::tools::exit_status::usage;
  } catch (const std::exception& e) {
    std::cerr << "check_isolation_fixture: " << e.what() << "\n";
    return offloadkit::tools::exit_status::check_failed;
  }
}
