// The child-process runner under `offloadkit check`: a program that cannot start is an error
// naming it, only the tail of a long output is kept, a result descriptor handed over on its own
// number reaches the child, and an interrupt of the parent stops the child's whole group.
#include "isolation.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <system_error>
#include <thread>

namespace {

using namespace offloadkit::tools;
using namespace std::chrono_literals;

child_run shell(const std::string& script, std::chrono::milliseconds timeout = 60s,
                int extra_fd = -1, int child_fd = -1, std::size_t tail = std::size_t{64} * 1024) {
  return run_child({"/bin/sh", "-c", script}, timeout, extra_fd, child_fd, tail);
}

TEST(Isolation, AProgramThatCannotStartIsAnErrorNamingIt) {
  try {
    (void)run_child({"/nonexistent/offloadkit-child"}, 10s);
    ADD_FAILURE() << "a missing program started";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start /nonexistent/offloadkit-child"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)run_child({}, 10s), std::invalid_argument);
}

TEST(Isolation, OnlyTheTailOfALongOutputIsKept) {
  const child_run run = shell(
      "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; echo last", 60s, -1, -1, 64);
  ASSERT_EQ(run.how, child_run::end::exited) << describe_end(run, 60s);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output.size(), 64u);
  EXPECT_EQ(last_lines(run.output, 2), "line 1999\nlast");
}

TEST(Isolation, AResultDescriptorOnItsOwnNumberReachesTheChild) {
  result_file result;
  // The child's descriptor has the number the parent's already has: it must still be inherited.
  const int fd = result.fd();
  const child_run run = shell("echo done >&" + std::to_string(fd), 60s, fd, fd);
  ASSERT_EQ(run.how, child_run::end::exited) << describe_end(run, 60s) << run.output;
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(result.read_all(), "done\n");
  result.clear();
  EXPECT_EQ(result.read_all(), "");
}

TEST(Isolation, AnInterruptStopsTheChildAndIsReported) {
  std::thread interrupter([] {
    std::this_thread::sleep_for(500ms);
    ::kill(::getpid(), SIGTERM);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const child_run run = shell("sleep 30", 60s);
  interrupter.join();
  EXPECT_EQ(run.how, child_run::end::interrupted);
  EXPECT_EQ(run.signal, SIGTERM);
  EXPECT_EQ(describe_end(run, 60s), "interrupted by SIGTERM");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s) << "the child was left running";
}

TEST(Isolation, EndsAreDescribedInOneLine) {
  child_run run;
  run.how = child_run::end::signaled;
  run.signal = SIGSEGV;
  EXPECT_EQ(describe_end(run, 1s), "crashed: signal 11 (SIGSEGV)");
  run.how = child_run::end::timed_out;
  EXPECT_EQ(describe_end(run, 1500ms), "timed out after 1.5 s");
  EXPECT_EQ(describe_end(run, 2s), "timed out after 2 s");
  run.how = static_cast<child_run::end>(99);
  EXPECT_EQ(describe_end(run, 1s), "ended in an unknown way");
  EXPECT_EQ(signal_name(77), "signal 77");
  EXPECT_EQ(last_lines("a\nb\nc\n\n", 2), "b\nc");
  EXPECT_EQ(last_lines("only", 3), "only");
}

}  // namespace
