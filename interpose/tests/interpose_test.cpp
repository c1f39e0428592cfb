// The interposer and the countdown against the stand-in driver, without a GPU. Every program runs
// in a child process (the check command's run_child) with the interposer preloaded through its
// environment, as `check --driver-faults` runs its cases.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "isolation.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/interpose/control.h"
#include "offloadkit/interpose/countdown.hpp"
#include "offloadkit/interpose/scenarios.hpp"
#include "offloadkit/plugin/host.hpp"

namespace {

namespace oi = offloadkit::interpose;
using offloadkit::tools::child_run;
using offloadkit::tools::run_child;

constexpr std::chrono::seconds child_limit{60};

/// A report path in a scratch folder of the test's own, removed with it.
class scratch {
 public:
  scratch() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/okit-interpose-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
  }
  ~scratch() {
    std::remove(report().c_str());
    std::remove(claim().c_str());
    std::remove(result().c_str());
    ::rmdir(dir_.c_str());
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  [[nodiscard]] std::string report() const { return dir_ + "/report.json"; }
  [[nodiscard]] std::string claim() const { return report() + OKIT_INTERPOSE_CLAIM_SUFFIX; }
  [[nodiscard]] std::string result() const { return dir_ + "/result.json"; }
  /// Before each run: no report and no claim of an earlier one.
  void clear() const {
    std::remove(report().c_str());
    std::remove(claim().c_str());
  }

 private:
  std::string dir_;
};

/// Sanitizer runtimes insist on coming first in a process; the uninstrumented interposer comes
/// before them in the children of an instrumented build.
std::string sanitizer_options() {
  const char* existing = std::getenv("ASAN_OPTIONS");
  return std::string("ASAN_OPTIONS=verify_asan_link_order=0") +
         (existing != nullptr && *existing ? std::string(":") + existing : "");
}

struct probe_run {
  child_run run;
  std::optional<oi::interposer_report> report;
};

/// Runs `argv` with the interposer preloaded, the report at `s.report()`, and `extra` variables
/// (OFFLOADKIT_FAULT_CALL=..., ...).
probe_run under_interposer(const std::vector<std::string>& argv, const scratch& s,
                           std::vector<std::string> extra = {}) {
  s.clear();
  std::vector<std::string> env = {"LD_PRELOAD=" INTERPOSER,
                                  std::string(OKIT_INTERPOSE_ENV_REPORT) + "=" + s.report(),
                                  sanitizer_options()};
  env.insert(env.end(), extra.begin(), extra.end());
  probe_run p;
  p.run = run_child(argv, child_limit, -1, -1, std::size_t{64} * 1024, env);
  p.report = oi::read_report(s.report());
  return p;
}

std::vector<std::string> probe(const std::string& route, const std::string& mode,
                               std::vector<std::string> options = {}) {
  std::vector<std::string> argv = {DRIVER_PROBE, FAKE_DRIVER, route, mode};
  argv.insert(argv.end(), options.begin(), options.end());
  return argv;
}

std::string call_env(std::uint64_t n) {
  return std::string(OKIT_INTERPOSE_ENV_CALL) + "=" + std::to_string(n);
}

// ---- counting, by every route ------------------------------------------------------------------

// The suite name is part of the test names (Interpose/Routes.*).
// NOLINTNEXTLINE(readability-identifier-naming)
class Routes : public ::testing::TestWithParam<const char*> {};

TEST_P(Routes, CountsEveryCallAndBalancesTheLedger) {
  const scratch s;
  const probe_run p = under_interposer(probe(GetParam(), "clean"), s);
  ASSERT_EQ(p.run.how, child_run::end::exited) << p.run.output;
  ASSERT_EQ(p.run.exit_code, 0) << p.run.output;
  EXPECT_NE(p.run.output.find("probe: live 0"), std::string::npos) << p.run.output;
  ASSERT_TRUE(p.report.has_value()) << p.run.output;
  const oi::interposer_report& r = *p.report;
  EXPECT_EQ(r.reason, "exit");
  EXPECT_FALSE(r.armed_call.has_value());
  EXPECT_FALSE(r.failed_function.has_value());
  // The region: one reservation, two chunks created, mapped and given access twice (create and
  // resume); one device allocation, two pinned ones. 16 acquiring calls are numbered.
  const std::vector<std::pair<std::string, std::uint64_t>> expected = {
      {"cuMemAddressReserve", 1}, {"cuMemAddressFree", 1}, {"cuMemCreate", 4},
      {"cuMemRelease", 4},        {"cuMemMap", 4},         {"cuMemUnmap", 4},
      {"cuMemSetAccess", 4},      {"cuMemAlloc", 1},       {"cuMemFree", 1},
      {"cuMemHostAlloc", 1},      {"cuMemAllocHost", 1},   {"cuMemFreeHost", 2}};
  EXPECT_EQ(r.functions.size(), expected.size());
  for (const auto& [name, calls] : expected) {
    ASSERT_EQ(r.functions.count(name), 1u) << name << " was not counted";
    EXPECT_EQ(r.functions.at(name).calls, calls) << name;
    EXPECT_EQ(r.functions.at(name).failed, 0u) << name;
    EXPECT_EQ(r.functions.at(name).errors, 0u) << name;
  }
  EXPECT_EQ(r.counted_calls, 16u);
  EXPECT_EQ(oi::describe_leak(r.outstanding), "");
  EXPECT_EQ(r.untracked_releases, 0u);
}

TEST(Interpose, AnEmptyReportPathWritesNothingInTheWorkingFolder) {
  // offloadkit check hands its property children OFFLOADKIT_FAULT_REPORT= (empty): no report and
  // no claim file (".owner") may appear where the child runs.
  const scratch s;
  s.clear();
  const std::string dir = s.report().substr(0, s.report().rfind('/'));
  const std::string command =
      "cd " + dir + " && exec " + DRIVER_PROBE + " " + FAKE_DRIVER + " exported clean";
  const child_run run =
      run_child({"/bin/sh", "-c", command}, child_limit, -1, -1, std::size_t{64} * 1024,
                {"LD_PRELOAD=" INTERPOSER, std::string(OKIT_INTERPOSE_ENV_REPORT) + "=",
                 sanitizer_options()});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string claim = dir + "/" OKIT_INTERPOSE_CLAIM_SUFFIX;
  const bool claimed = ::access(claim.c_str(), F_OK) == 0;
  std::remove(claim.c_str());
  EXPECT_FALSE(claimed) << claim << " was written";
}

INSTANTIATE_TEST_SUITE_P(Interpose, Routes,
                         ::testing::Values("exported", "dlsym", "procaddress", "procaddress_v1"));

TEST(Interpose, TheStandInDriverWorksWithoutTheInterposer) {
  const child_run run = run_child(probe("procaddress", "clean"), child_limit);
  EXPECT_EQ(run.how, child_run::end::exited);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("probe: ok"), std::string::npos) << run.output;
}

// ---- the runtime's allocations, bound by dlsym on its handle ------------------------------------

std::vector<std::string> runtime_probe(const std::string& mode) {
  return {RUNTIME_PROBE, FAKE_RUNTIME, mode};
}

TEST(Interpose, TheRuntimesAllocationsAreCountedAndFiledEachUnderItsKind) {
  const scratch s;
  const probe_run p = under_interposer(runtime_probe("clean"), s);
  ASSERT_EQ(p.run.how, child_run::end::exited) << p.run.output;
  ASSERT_EQ(p.run.exit_code, 0) << p.run.output;
  EXPECT_NE(p.run.output.find("probe: live 0"), std::string::npos) << p.run.output;
  ASSERT_TRUE(p.report.has_value()) << p.run.output;
  const oi::interposer_report& r = *p.report;
  const std::vector<std::pair<std::string, std::uint64_t>> expected = {{"cudaMalloc", 1},
                                                                       {"cudaFree", 1},
                                                                       {"cudaMallocHost", 1},
                                                                       {"cudaHostAlloc", 1},
                                                                       {"cudaFreeHost", 2}};
  EXPECT_EQ(r.functions.size(), expected.size());
  for (const auto& [name, calls] : expected) {
    ASSERT_EQ(r.functions.count(name), 1u) << name << " was not counted";
    EXPECT_EQ(r.functions.at(name).calls, calls) << name;
  }
  EXPECT_EQ(r.counted_calls, 3u);  // the acquiring calls
  EXPECT_EQ(oi::describe_leak(r.outstanding), "");
  EXPECT_EQ(r.untracked_releases, 0u);
}

TEST(Interpose, APinnedLeakThroughTheRuntimeIsInTheLedgerAsPinned) {
  const scratch s;
  const probe_run p = under_interposer(runtime_probe("leak"), s);
  ASSERT_EQ(p.run.exit_code, 0) << p.run.output;
  EXPECT_NE(p.run.output.find("probe: live 1"), std::string::npos) << p.run.output;
  ASSERT_TRUE(p.report.has_value()) << p.run.output;
  EXPECT_EQ(p.report->outstanding.pinned_allocations, 1);
  EXPECT_EQ(p.report->outstanding.pinned_bytes, 64 * 1024);
  EXPECT_EQ(p.report->outstanding.device_allocations, 0);
  EXPECT_EQ(p.report->untracked_releases, 0u);
}

// ---- failing call N ----------------------------------------------------------------------------

TEST(Interpose, FailsCallNWithOutOfMemory) {
  const scratch s;
  // Acquiring calls in order: reserve (0), then create (1), map (2), set access (3) per chunk.
  // The probe retries a failed chunk from its create: 16 calls plus the ones retried.
  struct fault {
    std::uint64_t n;
    std::string function;
    std::uint64_t calls;
  };
  const std::vector<fault> cases = {{0, "cuMemAddressReserve", 17},
                                    {1, "cuMemCreate", 17},
                                    {2, "cuMemMap", 18},
                                    {3, "cuMemSetAccess", 19}};
  for (const auto& [n, function, calls] : cases) {
    for (const char* route : {"dlsym", "procaddress"}) {
      const probe_run p = under_interposer(probe(route, "clean"), s, {call_env(n)});
      ASSERT_EQ(p.run.how, child_run::end::exited) << p.run.output;
      EXPECT_EQ(p.run.exit_code, 0) << route << " N=" << n << "\n" << p.run.output;
      EXPECT_NE(p.run.output.find("probe: " + function + " failed with error 2"), std::string::npos)
          << route << " N=" << n << "\n"
          << p.run.output;
      ASSERT_TRUE(p.report.has_value());
      ASSERT_TRUE(p.report->failed_function.has_value()) << route << " N=" << n;
      EXPECT_EQ(*p.report->failed_function, function);
      EXPECT_EQ(p.report->failed_error, 2);
      EXPECT_EQ(p.report->armed_call, n);
      EXPECT_EQ(p.report->functions.at(function).failed, 1u);
      // The probe undid the failed step and retried: nothing is left.
      EXPECT_EQ(oi::describe_leak(p.report->outstanding), "") << route << " N=" << n;
      EXPECT_EQ(p.report->counted_calls, calls) << route << " N=" << n;
    }
  }
}

TEST(Interpose, ReleasingCallsFailWithUnknownErrorWhenSelected) {
  const scratch s;
  const probe_run p =
      under_interposer(probe("procaddress", "clean"), s,
                       {call_env(0), std::string(OKIT_INTERPOSE_ENV_KINDS) + "=release"});
  EXPECT_EQ(p.run.exit_code, 0) << p.run.output;
  EXPECT_NE(p.run.output.find("probe: cuMemUnmap failed with error 999"), std::string::npos)
      << p.run.output;
  ASSERT_TRUE(p.report && p.report->failed_function);
  EXPECT_EQ(*p.report->failed_function, "cuMemUnmap");
  EXPECT_EQ(p.report->failed_error, 999);
}

TEST(Interpose, KindsSelectFunctionsByName) {
  const scratch s;
  const probe_run p =
      under_interposer(probe("exported", "clean"), s,
                       {call_env(1), std::string(OKIT_INTERPOSE_ENV_KINDS) + "=cuMemSetAccess"});
  EXPECT_EQ(p.run.exit_code, 0) << p.run.output;
  ASSERT_TRUE(p.report && p.report->failed_function);
  EXPECT_EQ(*p.report->failed_function, "cuMemSetAccess");
  // Only cuMemSetAccess is numbered: four calls plus the retry; everything is still tallied.
  EXPECT_EQ(p.report->counted_calls, 5u);
  EXPECT_EQ(p.report->functions.at("cuMemCreate").calls, 5u);
}

TEST(Interpose, TheWindowExcludesCallsMadeWhileClosed) {
  const scratch s;
  const probe_run p = under_interposer(probe("dlsym", "clean", {"--window-after-reserve"}), s);
  EXPECT_EQ(p.run.exit_code, 0) << p.run.output;
  ASSERT_TRUE(p.report.has_value());
  EXPECT_EQ(p.report->functions.count("cuMemAddressReserve"), 0u);
  EXPECT_EQ(p.report->counted_calls, 15u);
  // The reservation made outside the window is freed inside it: a release the ledger never saw.
  EXPECT_EQ(p.report->untracked_releases, 1u);
  EXPECT_EQ(oi::describe_leak(p.report->outstanding), "");
}

TEST(Interpose, ALeakIsInTheLedger) {
  const scratch s;
  const probe_run p = under_interposer(probe("procaddress", "leak"), s, {call_env(2)});
  EXPECT_EQ(p.run.exit_code, 0) << p.run.output;
  // The stand-in driver agrees with the interposer: one physical allocation is still held.
  EXPECT_NE(p.run.output.find("probe: live 1"), std::string::npos) << p.run.output;
  ASSERT_TRUE(p.report.has_value());
  EXPECT_EQ(p.report->outstanding.physical_handles, 1);
  EXPECT_EQ(p.report->outstanding.mapped_bytes, 0);
  EXPECT_EQ(p.report->outstanding.reservations, 0);
}

TEST(Interpose, TheReportNamesTheFailedCallOfAProcessThatCrashed) {
  const scratch s;
  const probe_run p = under_interposer(probe("dlsym", "crash"), s, {call_env(2)});
  ASSERT_EQ(p.run.how, child_run::end::signaled) << p.run.output;
  ASSERT_TRUE(p.report.has_value()) << "the report is written when the fault is injected";
  EXPECT_EQ(p.report->reason, "injected");
  EXPECT_FALSE(p.report->complete());
  ASSERT_TRUE(p.report->failed_function.has_value());
  EXPECT_EQ(*p.report->failed_function, "cuMemMap");
}

TEST(Interpose, ProcessesStartedByTheCountedOneStayPassive) {
  const scratch s;
  // The probe counts from its first call on; the copy of itself it runs meanwhile inherits the
  // preload and the variables but must neither fail its call 0, nor count, nor write the report.
  const probe_run p =
      under_interposer(probe("dlsym", "clean", {"--spawn-after-reserve"}), s, {call_env(0)});
  EXPECT_EQ(p.run.exit_code, 0) << p.run.output;
  const std::string& out = p.run.output;
  const auto first_ok = out.find("probe: ok");
  ASSERT_NE(first_ok, std::string::npos) << out;
  EXPECT_NE(out.find("probe: ok", first_ok + 1), std::string::npos) << "two runs\n" << out;
  const auto failed = out.find("probe: cuMemAddressReserve failed with error 2");
  ASSERT_NE(failed, std::string::npos) << out;
  EXPECT_LT(failed, first_ok) << "the counted run fails before its copy runs\n" << out;
  EXPECT_EQ(out.find("failed with error", out.find('\n', failed)), std::string::npos) << out;
  ASSERT_TRUE(p.report.has_value());
  EXPECT_EQ(p.report->counted_calls, 17u);
}

TEST(Interpose, ALauncherThatNeverCallsCudaLeavesTheCountToItsProgram) {
  const scratch s;
  // The shell loads the interposer first but makes no counted call: the probe it forks counts.
  const std::string command = std::string(DRIVER_PROBE) + " " + FAKE_DRIVER + " dlsym clean; true";
  const probe_run p = under_interposer({"/bin/sh", "-c", command}, s, {call_env(2)});
  EXPECT_EQ(p.run.exit_code, 0) << p.run.output;
  EXPECT_NE(p.run.output.find("probe: cuMemMap failed with error 2"), std::string::npos)
      << p.run.output;
  ASSERT_TRUE(p.report.has_value());
  EXPECT_EQ(p.report->counted_calls, 18u);
}

TEST(Interpose, AClaimLeftByAProcessThatIsGoneIsTakenOver) {
  const scratch s;
  s.clear();
  {
    std::ofstream stale(s.claim());
    stale << 2147483646;  // no such process
  }
  probe_run p;
  p.run =
      run_child(probe("dlsym", "clean"), child_limit, -1, -1, std::size_t{64} * 1024,
                {"LD_PRELOAD=" INTERPOSER,
                 std::string(OKIT_INTERPOSE_ENV_REPORT) + "=" + s.report(), sanitizer_options()});
  p.report = oi::read_report(s.report());
  EXPECT_EQ(p.run.exit_code, 0) << p.run.output;
  ASSERT_TRUE(p.report.has_value());
  EXPECT_EQ(p.report->counted_calls, 16u);
}

TEST(Interpose, RtldNextStillResolvesFromTheCaller) {
  const scratch s;
  const probe_run p = under_interposer({RTLD_NEXT_PROBE}, s);
  EXPECT_EQ(p.run.exit_code, 0) << p.run.output;
}

// ---- the countdown on black boxes --------------------------------------------------------------

oi::countdown_result count_down(const std::vector<std::string>& argv, const scratch& s,
                                std::optional<std::uint64_t> only = std::nullopt) {
  auto run_case = [&](std::uint64_t n) -> std::optional<oi::case_run> {
    s.clear();
    std::vector<std::string> env = oi::countdown_case_environment(INTERPOSER, n, s.report(), false);
    env.push_back(sanitizer_options());
    const child_run run = run_child(argv, child_limit, -1, -1, std::size_t{64} * 1024, env);
    oi::case_run c;
    c.process.output = run.output;
    c.process.timeout_s = static_cast<int>(child_limit.count());
    if (run.how == child_run::end::signaled) {
      c.process.end = oi::process_end::how::signaled;
      c.process.signal = run.signal;
      c.process.signal_name = offloadkit::tools::signal_name(run.signal);
    } else if (run.how == child_run::end::timed_out) {
      c.process.end = oi::process_end::how::timed_out;
    } else {
      c.process.exit_code = run.exit_code;
    }
    c.report = oi::read_report(s.report());
    return c;
  };
  return oi::run_countdown(run_case, 100, only, {});
}

std::string table(const std::vector<oi::case_row>& rows) {
  std::ostringstream os;
  oi::print_countdown_table(os, rows);
  return os.str();
}

TEST(Countdown, ACleanProgramIsCleanAtEveryCall) {
  const scratch s;
  const oi::countdown_result r = count_down(probe("procaddress", "clean"), s);
  ASSERT_TRUE(r.complete) << r.stopped;
  EXPECT_EQ(r.calls, 16u);
  ASSERT_EQ(r.rows.size(), 17u) << "cases 0..15, then the run that reaches no call 16";
  EXPECT_TRUE(oi::all_clean(r.rows)) << table(r.rows);
  EXPECT_EQ(r.rows.back().call, "");
  EXPECT_EQ(r.rows[2].call, "cuMemMap");
}

TEST(Countdown, APlantedLeakIsReportedAtTheFailedMaps) {
  const scratch s;
  const oi::countdown_result r = count_down(probe("dlsym", "leak"), s);
  ASSERT_TRUE(r.complete) << r.stopped;
  int leaks = 0;
  for (const auto& row : r.rows) {
    if (row.call == "cuMemMap") {
      EXPECT_EQ(row.cls, oi::fault_class::leak) << table(r.rows);
      EXPECT_NE(row.detail.find("1 physical allocation handle(s) created and never released"),
                std::string::npos)
          << row.detail;
      ++leaks;
    } else {
      EXPECT_EQ(row.cls, oi::fault_class::clean) << "N=" << row.n << "\n" << table(r.rows);
    }
  }
  EXPECT_EQ(leaks, 4) << "two chunks mapped at create and at resume\n" << table(r.rows);
  const std::string printed = table(r.rows);
  EXPECT_NE(printed.find("| cuMemMap"), std::string::npos) << printed;
  EXPECT_NE(printed.find("4 leak"), std::string::npos) << printed;
}

/// Every case with a fault (all but the last, which reached no call N) ended as `cls`, its detail
/// starting with `detail`; the last ran clean.
void expect_every_fault_ends(const oi::countdown_result& r, oi::fault_class cls,
                             const std::string& detail) {
  for (std::size_t i = 0; i + 1 < r.rows.size(); ++i) {
    EXPECT_EQ(r.rows[i].cls, cls) << table(r.rows);
    EXPECT_EQ(r.rows[i].detail.rfind(detail, 0), 0u) << r.rows[i].detail;
  }
  EXPECT_EQ(r.rows.back().cls, oi::fault_class::clean);
}

TEST(Countdown, AnExitOnFailureIsReportedAsExited1) {
  const scratch s;
  const oi::countdown_result r = count_down(probe("exported", "exit"), s);
  ASSERT_TRUE(r.complete) << r.stopped;
  ASSERT_EQ(r.rows.size(), 17u);
  expect_every_fault_ends(r, oi::fault_class::exited, "exit code 1 after ");
}

TEST(Countdown, ACrashIsReportedAsCrashed) {
  const scratch s;
  const oi::countdown_result r = count_down(probe("procaddress_v1", "crash"), s);
  ASSERT_TRUE(r.complete) << r.stopped;
  expect_every_fault_ends(r, oi::fault_class::crashed, "signal 11 (SIGSEGV) after ");
}

TEST(Countdown, OneCaseAlone) {
  const scratch s;
  const oi::countdown_result r = count_down(probe("dlsym", "leak"), s, 2);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].n, 2u);
  EXPECT_EQ(r.rows[0].cls, oi::fault_class::leak);
}

TEST(Countdown, ACaseWithoutAReportStopsTheCount) {
  const scratch s;
  // No interposer at all: nothing can say whether call N was reached.
  auto run_case = [](std::uint64_t) -> std::optional<oi::case_run> {
    oi::case_run c;
    c.process.exit_code = 0;
    return c;
  };
  const oi::countdown_result r = oi::run_countdown(run_case, 100, std::nullopt, {});
  EXPECT_FALSE(r.complete);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].cls, oi::fault_class::unknown);
  EXPECT_NE(r.stopped.find("left no interposer report"), std::string::npos) << r.stopped;
}

// ---- the countdown through the region scenario -------------------------------------------------

/// The countdown over scenario_probe with `arguments` (its result on descriptor 3).
oi::countdown_result count_down_scenario(const std::string& arguments, const scratch& s) {
  auto run_case = [&](std::uint64_t n) -> std::optional<oi::case_run> {
    s.clear();
    std::remove(s.result().c_str());
    std::vector<std::string> env = oi::countdown_case_environment(INTERPOSER, n, s.report(), true);
    env.push_back(sanitizer_options());
    // The result goes to a file the shell opens as descriptor 3, as the check command hands its
    // children one.
    const std::string command =
        std::string("exec ") + SCENARIO_PROBE + " " + arguments + " 3 3>" + s.result();
    const child_run run =
        run_child({"/bin/sh", "-c", command}, child_limit, -1, -1, std::size_t{64} * 1024, env);
    oi::case_run c;
    c.process.output = run.output;
    if (run.how == child_run::end::signaled) {
      c.process.end = oi::process_end::how::signaled;
      c.process.signal = run.signal;
    }
    c.process.exit_code = run.exit_code;
    std::ifstream in(s.result());
    std::stringstream text;
    text << in.rdbuf();
    const auto result = nlohmann::json::parse(text.str(), nullptr, false);
    if (result.is_object() && result.contains("scenario")) {
      c.scenario = oi::scenario_result::from_json(result["scenario"].dump());
    }
    c.report = oi::read_report(s.report());
    return c;
  };
  return oi::run_countdown(run_case, 100, std::nullopt, {});
}

TEST(Countdown, TheRegionScenarioOfACorrectRegionIsClean) {
  const scratch s;
  const oi::countdown_result r =
      count_down_scenario(std::string("driver ") + FAKE_DRIVER + " clean", s);
  ASSERT_TRUE(r.complete) << r.stopped << "\n" << table(r.rows);
  // Create: reserve + three chunks of create, map, set access; resume and the resume after the
  // discarding pause: three more chunks each. The pauses (the last one before destruction)
  // acquire nothing.
  EXPECT_EQ(r.calls, 28u) << table(r.rows);
  EXPECT_TRUE(oi::all_clean(r.rows)) << table(r.rows);
  bool saw_resume = false;
  bool saw_resume_after_discard = false;
  for (const auto& row : r.rows) {
    if (row.detail.find(" in resume; the retry worked") != std::string::npos) saw_resume = true;
    if (row.detail.find(" in resume after discard; the retry worked") != std::string::npos) {
      saw_resume_after_discard = true;
    }
  }
  EXPECT_TRUE(saw_resume) << table(r.rows);
  EXPECT_TRUE(saw_resume_after_discard) << table(r.rows);
}

TEST(Countdown, TheRegionScenarioFindsALeakOnAFailedMap) {
  const scratch s;
  const oi::countdown_result r =
      count_down_scenario(std::string("driver ") + FAKE_DRIVER + " leak", s);
  ASSERT_TRUE(r.complete) << r.stopped << "\n" << table(r.rows);
  int leaks = 0;
  for (const auto& row : r.rows) {
    if (row.call == "cuMemMap") {
      EXPECT_EQ(row.cls, oi::fault_class::leak) << table(r.rows);
      ++leaks;
    } else {
      EXPECT_EQ(row.cls, oi::fault_class::clean) << table(r.rows);
    }
  }
  // A failed map of each of three chunks, in create, resume and the resume after discard.
  EXPECT_EQ(leaks, 9) << table(r.rows);
}

TEST(Countdown, EveryScenarioPassesOnTheDogfoodPluginsWithoutFaults) {
  // On the host executor nothing calls the driver: the first run reaches no call 0, and every
  // step of the scenario (create, transfers, verification, destruction) must pass.
  const scratch s;
  for (const char* plugin : {REFERENCE_PLUGIN, OPTIMIZED_PLUGIN}) {
    for (const char* feature : {"stash", "region", "arena", "activation"}) {
      const oi::countdown_result r =
          count_down_scenario(std::string("plugin ") + plugin + " " + feature, s);
      ASSERT_TRUE(r.complete) << plugin << " " << feature << ": " << r.stopped;
      ASSERT_EQ(r.rows.size(), 1u) << plugin << " " << feature << "\n" << table(r.rows);
      EXPECT_EQ(r.rows[0].cls, oi::fault_class::clean) << plugin << " " << feature << "\n"
                                                       << table(r.rows) << r.rows[0].output;
      EXPECT_EQ(r.rows[0].detail, "no call 0: the run made 0 counted call(s)");
    }
  }
}

TEST(Countdown, TheStashScenarioFindsAnOverflowThatWasNotReported) {
  const scratch s;
  const oi::countdown_result r = count_down_scenario("silent-overflow", s);
  ASSERT_TRUE(r.complete) << r.stopped;
  ASSERT_EQ(r.rows.size(), 1u) << table(r.rows);
  EXPECT_EQ(r.rows[0].cls, oi::fault_class::inconsistent) << table(r.rows) << r.rows[0].output;
  EXPECT_NE(r.rows[0].detail.find("with 11 pages free in both tiers was not reported"),
            std::string::npos)
      << r.rows[0].detail;
}

TEST(Countdown, EveryScenarioSeesThePlantedBugOfItsFeatureWithoutAFault) {
  const scratch s;
  const std::pair<const char*, const char*> planted[] = {{PLANTED_STASH_PLUGIN, "stash"},
                                                         {PLANTED_REGION_PLUGIN, "region"},
                                                         {PLANTED_ARENA_PLUGIN, "arena"},
                                                         {PLANTED_ACTIVATION_PLUGIN, "activation"}};
  for (const auto& [plugin, feature] : planted) {
    const oi::countdown_result r =
        count_down_scenario(std::string("plugin ") + plugin + " " + feature, s);
    ASSERT_TRUE(r.complete) << feature << ": " << r.stopped;
    ASSERT_EQ(r.rows.size(), 1u) << feature << "\n" << table(r.rows);
    EXPECT_EQ(r.rows[0].cls, oi::fault_class::data_lost) << feature << "\n" << table(r.rows);
    EXPECT_FALSE(r.rows[0].detail.empty()) << feature;
  }
}

// ---- classification ----------------------------------------------------------------------------

oi::interposer_report complete_report(bool injected) {
  oi::interposer_report r;
  r.reason = "requested";
  r.counted_calls = 5;
  if (injected) {
    r.failed_function = "cuMemCreate";
    r.failed_error = 2;
  }
  return r;
}

/// A case whose resume failed with a typed error, was retried, and left one pinned allocation.
oi::case_run retried_resume_with_a_pinned_leak() {
  oi::case_run run;
  run.report = complete_report(true);
  run.report->outstanding.pinned_allocations = 1;
  run.report->outstanding.pinned_bytes = 4096;
  oi::scenario_result s;
  s.failed_step = "resume";
  s.error = "cuda_error: x";
  s.retried = true;
  run.scenario = s;
  return run;
}

TEST(Classify, OrdersDataLossBeforeRetryBeforeStateBeforeCloseBeforeLeak) {
  oi::case_run run = retried_resume_with_a_pinned_leak();
  EXPECT_EQ(oi::classify(1, run).cls, oi::fault_class::leak);
  EXPECT_NE(oi::classify(1, run).detail.find("1 pinned host allocation(s) not freed (4096 bytes)"),
            std::string::npos);
  // A close that failed is this case's failure, named before what it may have left behind.
  run.scenario->close_error = "plugin 'p' (p.so) region: close failed (cuda error): cuMemUnmap";
  EXPECT_EQ(oi::classify(1, run).cls, oi::fault_class::close_failed);
  EXPECT_EQ(oi::classify(1, run).detail.rfind(run.scenario->close_error, 0), 0u);
  EXPECT_STREQ(oi::to_string(oi::fault_class::close_failed), "close failed");
  EXPECT_EQ(oi::scenario_result::from_json(run.scenario->to_json()).close_error,
            run.scenario->close_error);
  run.scenario->consistent = false;
  run.scenario->problems = {"after a failed resume the region is active"};
  EXPECT_EQ(oi::classify(1, run).cls, oi::fault_class::inconsistent);
  run.scenario->retry_ok = false;
  run.scenario->retry_error = "cuda_error: y";
  EXPECT_EQ(oi::classify(1, run).cls, oi::fault_class::retry_failed);
  run.scenario->data_ok = false;
  EXPECT_EQ(oi::classify(1, run).cls, oi::fault_class::data_lost);
}

TEST(Classify, EveryClassThatAppliesIsReportedAndTheLedgerIsAlwaysRead) {
  oi::case_run run = retried_resume_with_a_pinned_leak();
  run.scenario->retry_ok = false;
  run.scenario->retry_error = "cuda_error: y";
  run.scenario->close_error = "plugin 'p' (p.so) region: close failed (cuda error): cuMemUnmap";
  const oi::case_row row = oi::classify(1, run);
  EXPECT_EQ(row.cls, oi::fault_class::retry_failed);
  ASSERT_EQ(row.also.size(), 2u) << row.detail;
  EXPECT_EQ(row.also[0].cls, oi::fault_class::close_failed);
  EXPECT_EQ(row.also[1].cls, oi::fault_class::leak);
  EXPECT_NE(row.detail.find("; also leak: 1 pinned host allocation(s) not freed"),
            std::string::npos)
      << row.detail;
  // A black box (no scenario result) that exited is judged by its ledger too.
  oi::case_run box = retried_resume_with_a_pinned_leak();
  box.scenario.reset();
  box.process.exit_code = 1;
  const oi::case_row exited = oi::classify(1, box);
  EXPECT_EQ(exited.cls, oi::fault_class::exited);
  ASSERT_EQ(exited.also.size(), 1u);
  EXPECT_EQ(exited.also[0].cls, oi::fault_class::leak);
}

TEST(Classify, AnUntypedErrorIsNotClean) {
  oi::case_run run;
  run.report = complete_report(true);
  oi::scenario_result s;
  s.failed_step = "create";
  s.error = "std::exception: boom";
  s.typed_error = false;
  s.retried = true;
  run.scenario = s;
  const oi::case_row row = oi::classify(0, run);
  EXPECT_EQ(row.cls, oi::fault_class::inconsistent);
  EXPECT_NE(row.detail.find("not one of offloadkit's typed errors"), std::string::npos);
}

TEST(Classify, HungAndUnusable) {
  oi::case_run run;
  run.process.end = oi::process_end::how::timed_out;
  run.process.timeout_s = 30;
  EXPECT_EQ(oi::classify(0, run).cls, oi::fault_class::hung);
  EXPECT_EQ(oi::classify(0, run).detail, "still running after 30 s");
  oi::case_run unusable;
  unusable.report = complete_report(false);
  unusable.scenario = oi::scenario_result{};
  unusable.scenario->unusable = "the interposer is not loaded";
  EXPECT_EQ(oi::classify(0, unusable).cls, oi::fault_class::unknown);
}

TEST(Classify, WhatAFrameworkCacheGaveBackIsNotedAndNotALeak) {
  oi::outstanding_resources before;
  before.device_allocations = 1;
  before.device_bytes = 2097152;
  before.pinned_allocations = 3;
  before.pinned_bytes = 12288;
  oi::outstanding_resources after;
  after.pinned_allocations = 1;
  after.pinned_bytes = 4096;
  const std::string released = oi::describe_resources(oi::released_between(before, after));
  EXPECT_EQ(released,
            "1 device allocation(s) (2097152 bytes), 2 pinned host allocation(s) (8192 bytes)");
  EXPECT_EQ(oi::describe_resources(oi::released_between(after, before)), "");

  oi::case_run run;
  run.report = complete_report(true);
  oi::scenario_result s;
  s.failed_step = "pack tensor 0";
  s.error = "cuda_error: x";
  s.retried = true;
  s.framework_cache = released + " held at the end, released by release_cached_memory";
  run.scenario = s;
  EXPECT_EQ(oi::scenario_result::from_json(s.to_json()).framework_cache, s.framework_cache);
  const oi::case_row clean = oi::classify(0, run);
  EXPECT_EQ(clean.cls, oi::fault_class::clean);
  EXPECT_EQ(clean.detail,
            "cuda_error in pack tensor 0; the retry worked; framework cache: " + s.framework_cache);
  // What the cache did not give back is still the case's leak.
  run.report->outstanding = after;
  const oi::case_row leak = oi::classify(0, run);
  EXPECT_EQ(leak.cls, oi::fault_class::leak);
  EXPECT_NE(leak.detail.find("framework cache: 1 device allocation(s)"), std::string::npos)
      << leak.detail;
}

TEST(Classify, AnIncompleteReportCannotClearALeak) {
  oi::case_run run;
  run.report = complete_report(true);
  run.report->reason = "injected";
  EXPECT_EQ(oi::classify(0, run).cls, oi::fault_class::unknown);
}

TEST(Report, MalformedReportsAreRefusedWithAReason) {
  EXPECT_THROW(oi::interposer_report::parse("not json"), std::runtime_error);
  EXPECT_THROW(oi::interposer_report::parse("{\"format\": \"other\"}"), std::runtime_error);
  EXPECT_THROW(oi::interposer_report::parse("{\"format\": \"" OKIT_INTERPOSE_REPORT_FORMAT "\"}"),
               std::runtime_error);
}

TEST(Countdown, TheEnvironmentPreloadsTheInterposerFirst) {
  ::setenv("LD_PRELOAD", "/other.so", 1);
  const auto env =
      oi::countdown_case_environment("/x/liboffloadkit_interpose.so", 7, "/r.json", true);
  ::unsetenv("LD_PRELOAD");
  EXPECT_EQ(env.at(0), "LD_PRELOAD=/x/liboffloadkit_interpose.so:/other.so");
  EXPECT_EQ(env.at(1), "OFFLOADKIT_FAULT_CALL=7");
  EXPECT_EQ(env.at(2), "OFFLOADKIT_FAULT_REPORT=/r.json");
  EXPECT_EQ(env.at(4), "OFFLOADKIT_FAULT_WINDOW=closed");
}

TEST(Classify, EveryClassHasItsOwnName) {
  std::set<std::string> names;
  for (const auto c :
       {oi::fault_class::clean, oi::fault_class::retry_failed, oi::fault_class::data_lost,
        oi::fault_class::inconsistent, oi::fault_class::close_failed, oi::fault_class::leak,
        oi::fault_class::exited, oi::fault_class::crashed, oi::fault_class::hung,
        oi::fault_class::unknown}) {
    names.insert(oi::to_string(c));
  }
  EXPECT_EQ(names.size(), 10u);
  EXPECT_STREQ(oi::to_string(static_cast<oi::fault_class>(99)), "unknown");
}

TEST(Classify, ExitAfterTheResultAbsorbedErrorsAndAnOverflowedLedger) {
  oi::case_run run;
  run.report = complete_report(true);
  run.scenario = oi::scenario_result{};
  run.process.exit_code = 3;
  // The result is in: the case is what it says (clean); the exit is its shutdown.
  oi::case_row row = oi::classify(2, run);
  EXPECT_EQ(row.cls, oi::fault_class::clean);
  EXPECT_EQ(row.shutdown, "exited with code 3 after its result");
  EXPECT_NE(row.detail.find("; shutdown: exited with code 3 after its result"), std::string::npos)
      << row.detail;
  // A black box has no result: its exit status is its outcome.
  run.scenario.reset();
  row = oi::classify(2, run);
  EXPECT_EQ(row.cls, oi::fault_class::exited);
  EXPECT_TRUE(row.shutdown.empty());
  run.scenario = oi::scenario_result{};

  // A fault the implementation absorbed is clean, and the row says where it was absorbed.
  run.process.exit_code = 0;
  run.scenario->failed_step = "pause";
  row = oi::classify(2, run);
  EXPECT_EQ(row.cls, oi::fault_class::clean);
  EXPECT_EQ(row.detail, "absorbed: no error reached the caller in pause");

  // A leak seen through a ledger that overflowed says that some of it may not be a leak.
  run.report->outstanding.device_allocations = 1;
  run.report->outstanding.device_bytes = 512;
  run.report->table_full = 4;
  row = oi::classify(2, run);
  EXPECT_EQ(row.cls, oi::fault_class::leak);
  EXPECT_NE(row.detail.find("(512 bytes)"), std::string::npos) << row.detail;
  EXPECT_NE(row.detail.find("the ledger overflowed: 4 creation(s) untracked"), std::string::npos)
      << row.detail;
}

TEST(Classify, ACrashOrAHangAfterTheResultIsTheCasesShutdownNotItsClass) {
  oi::case_run run;
  run.report = complete_report(true);
  run.scenario = oi::scenario_result{};
  run.scenario->data_ok = false;
  run.scenario->problems = {"byte 3 differs"};
  run.process.end = oi::process_end::how::signaled;
  run.process.signal = 11;
  run.process.signal_name = "SIGSEGV";
  oi::case_row row = oi::classify(1, run);
  EXPECT_EQ(row.cls, oi::fault_class::data_lost) << row.detail;
  EXPECT_EQ(row.shutdown, "crashed: signal 11 (SIGSEGV) after its result");

  // A crash that left the ledger unfinished: the result decides, the leaks are not judged.
  run.scenario = oi::scenario_result{};
  run.report->reason = "running";
  row = oi::classify(1, run);
  EXPECT_EQ(row.cls, oi::fault_class::clean) << row.detail;
  EXPECT_NE(row.detail.find("leaks not judged: "), std::string::npos) << row.detail;

  // A hang past the grace after the result.
  run.process.end = oi::process_end::how::timed_out;
  run.process.past_grace = true;
  run.process.grace_s = 30;
  row = oi::classify(1, run);
  EXPECT_EQ(row.cls, oi::fault_class::clean) << row.detail;
  EXPECT_EQ(row.shutdown, "still running 30 s after its result (killed)");

  // Without a result the crash is the case's class, as before.
  run.scenario.reset();
  run.process.end = oi::process_end::how::signaled;
  row = oi::classify(1, run);
  EXPECT_EQ(row.cls, oi::fault_class::crashed);
  EXPECT_TRUE(row.shutdown.empty());
}

TEST(Countdown, StopsAtTheCaseLimitAndWhenInterrupted) {
  auto always_reaches_its_call = [](std::uint64_t) -> std::optional<oi::case_run> {
    oi::case_run run;
    run.report = complete_report(true);
    return run;
  };
  const oi::countdown_result capped =
      oi::run_countdown(always_reaches_its_call, 3, std::nullopt, {});
  EXPECT_FALSE(capped.complete);
  EXPECT_EQ(capped.rows.size(), 3u);
  EXPECT_EQ(capped.stopped, "stopped after 3 cases");

  auto interrupted_at_1 = [](std::uint64_t n) -> std::optional<oi::case_run> {
    if (n == 1) return std::nullopt;
    oi::case_run run;
    run.report = complete_report(true);
    return run;
  };
  const oi::countdown_result stopped = oi::run_countdown(interrupted_at_1, 10, std::nullopt, {});
  EXPECT_FALSE(stopped.complete);
  EXPECT_EQ(stopped.rows.size(), 1u);
  EXPECT_EQ(stopped.stopped, "interrupted");
}

TEST(Countdown, FindsTheFirstReadableInterposer) {
  EXPECT_EQ(
      oi::find_interposer({"", "/nonexistent/liboffloadkit_interpose.so", INTERPOSER, FAKE_DRIVER}),
      INTERPOSER);
  EXPECT_EQ(oi::find_interposer({"/nonexistent/a.so", ""}), "");
  EXPECT_EQ(oi::find_interposer({}), "");
}

TEST(Scenarios, NameWhatThePluginProvidesAndRefuseToRunWithoutTheInterposer) {
  const auto lib = offloadkit::plugin::library::open(REFERENCE_PLUGIN);
  oi::fault_subjects subjects;
  subjects.region = offloadkit::plugin::region_of(lib);
  subjects.arena = offloadkit::plugin::arena_of(lib);
  EXPECT_EQ(oi::scenario_features(),
            (std::vector<std::string>{"stash", "region", "arena", "activation"}));
  ASSERT_TRUE(oi::subject_name(subjects, "region").has_value());
  EXPECT_EQ(*oi::subject_name(subjects, "region"), subjects.region->name);
  EXPECT_FALSE(oi::subject_name(subjects, "stash").has_value()) << "not given to the subjects";
  EXPECT_FALSE(oi::subject_name(subjects, "warp").has_value());
  EXPECT_EQ(oi::subject_runs_on_cuda(subjects, "region"), subjects.region->support.cuda);
  EXPECT_EQ(oi::subject_runs_on_cuda(subjects, "arena"), subjects.arena->support.cuda);
  EXPECT_FALSE(oi::subject_runs_on_cuda(subjects, "stash"));
  EXPECT_FALSE(oi::subject_runs_on_cuda(subjects, "activation"));
  EXPECT_FALSE(oi::subject_runs_on_cuda(subjects, "warp"));

  // This test process has no interposer: the scenario says so instead of running unobserved.
  offloadkit::host_executor ex;
  const oi::scenario_result r = oi::run_scenario("region", subjects, ex);
  EXPECT_EQ(r.implementation, subjects.region->name);
  EXPECT_NE(r.unusable.find("the interposer is not loaded"), std::string::npos) << r.unusable;
}

}  // namespace
