// `offloadkit check --driver-faults` (driver_faults.hpp). The parent never touches the device: it
// loads the plugin only to see what it provides, then starts one child per case, each this same
// binary with --run-one, the interposer preloaded and call N armed through the environment. A
// child runs the feature's scenario, writes its result into the descriptor it inherits and asks
// the interposer for its report, which the parent reads from a scratch folder.
#include "driver_faults.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "isolation.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/detail/text.hpp"
#include "offloadkit/interpose/control.h"
#include "offloadkit/interpose/countdown.hpp"
#include "offloadkit/interpose/scenarios.hpp"

namespace offloadkit::tools {
namespace {

using ::offloadkit::detail::indent;
using ::offloadkit::detail::join;

namespace fs = std::filesystem;
namespace oi = offloadkit::interpose;

/// The descriptor a child finds its result file on (as for the property children).
constexpr int child_result_fd = 3;
/// More cases than any scenario makes calls: a count that gets here is not converging.
constexpr std::uint64_t max_cases = 5000;
/// Lines of a case's output shown under a row that is not clean.
constexpr std::size_t output_lines_shown = 12;

/// A scratch folder for the cases' reports, removed with its contents.
class scratch_folder {
 public:
  scratch_folder() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/offloadkit-driver-faults-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    path_ = pattern;
  }
  ~scratch_folder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  scratch_folder(const scratch_folder&) = delete;
  scratch_folder& operator=(const scratch_folder&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

oi::process_end to_process_end(const child_run& run, int timeout_s) {
  oi::process_end p;
  p.output = run.output;
  p.seconds = run.seconds;
  p.timeout_s = timeout_s;
  switch (run.how) {
    case child_run::end::exited:
      p.end = oi::process_end::how::exited;
      p.exit_code = run.exit_code;
      break;
    case child_run::end::signaled:
      p.end = oi::process_end::how::signaled;
      p.signal = run.signal;
      p.signal_name = signal_name(run.signal);
      break;
    case child_run::end::timed_out:
    case child_run::end::interrupted:
      p.end = oi::process_end::how::timed_out;
      p.past_grace = run.past_grace;
      p.grace_s =
          static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(run.grace).count());
      break;
  }
  return p;
}

std::string what_the_scenario_does(const std::string& feature) {
  if (feature == "stash") {
    return "create, stash two keys, stash one that overflows (reported), clear_status, restore "
           "and verify, stash_batch and restore_batch two keys, verify, destroy with a key held "
           "(each call's check() a step of its own, retried alone)";
  }
  if (feature == "region") {
    return "create, write, pause, resume, verify, pause(discard) and resume (where both modes are "
           "offered), pause, destroy while paused";
  }
  if (feature == "arena") {
    return "create, offload three tensors, reload, verify, the same again, release, destroy; a "
           "second: create, offload, destroy while it holds the copy";
  }
  return "create, pack three tensors, unpack two in backward order, verify, destroy with one "
         "still packed";
}

// ---- the child ---------------------------------------------------------------------------------

/// The interposer's write-report control function; null where the interposer is not loaded.
okit_interpose_write_report_fn interposer_write_report() {
  return reinterpret_cast<okit_interpose_write_report_fn>(
      dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_WRITE_REPORT_SYMBOL));
}

/// Asks the interposer to write its report now and reads it back; nullopt where it is not loaded,
/// has no report path, or the report cannot be read (the parent then judges the final one).
std::optional<oi::interposer_report> ledger_now() {
  const auto write = interposer_write_report();
  const char* path = std::getenv(OKIT_INTERPOSE_ENV_REPORT);
  if (write == nullptr || path == nullptr || *path == '\0' || write() != 0) return std::nullopt;
  return oi::read_report(path);
}

/// Gives back what a framework's caches hold once the scenario's objects are gone (the plugin's
/// release_cached_memory), with the interposer's window open so that the releases reach its
/// ledger, and records in `result` what was released: the leak the parent reads afterwards is the
/// implementation's own.
void release_framework_caches(const oi::fault_subjects& subjects, oi::scenario_result& result) {
  if (!subjects.release_cached_memory || !result.unusable.empty()) return;
  auto set_window = reinterpret_cast<okit_interpose_set_window_fn>(
      dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_SET_WINDOW_SYMBOL));
  if (set_window == nullptr) return;
  const std::optional<oi::interposer_report> before = ledger_now();
  const int was_open = set_window(1);
  bool provided = false;
  try {
    provided = subjects.release_cached_memory();
  } catch (const std::exception& e) {
    result.consistent = false;
    result.problems.push_back(std::string("release_cached_memory failed: ") + e.what());
  }
  set_window(was_open);
  if (!provided || !before) return;
  const std::optional<oi::interposer_report> after = ledger_now();
  if (!after) return;
  const std::string released =
      oi::describe_resources(oi::released_between(before->outstanding, after->outstanding));
  if (!released.empty()) {
    result.framework_cache = released + " held at the end, released by release_cached_memory";
  }
}

int run_one_case(const check_program& program, const driver_fault_request& r) {
  if (r.feature.empty()) throw usage_error("--run-one with --driver-faults needs --feature");
  if (::fcntl(r.result_fd, F_SETFD, FD_CLOEXEC) != 0) {
    throw usage_error("--result-fd " + std::to_string(r.result_fd) + " is not an open file");
  }
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) {
    write_result(
        r.result_fd,
        nlohmann::json{{"unavailable", "the cuda back end cannot run here: " + why}}.dump());
    return exit_status::unavailable;
  }
  // The window is closed (OFFLOADKIT_FAULT_WINDOW=closed): loading the plugin and creating the
  // executor are not the implementation's calls.
  const oi::fault_subjects subjects = program.fault_subjects(r.library);
  std::unique_ptr<executor> ex;
  try {
    ex = std::make_unique<cuda_executor>();
  } catch (const std::exception& e) {
    write_result(r.result_fd,
                 nlohmann::json{{"unavailable", std::string("the cuda executor could not be "
                                                            "created: ") +
                                                    e.what()}}
                     .dump());
    return exit_status::unavailable;
  }
  oi::scenario_result result = oi::run_scenario(r.feature, subjects, *ex);
  release_framework_caches(subjects, result);
  write_result(r.result_fd,
               nlohmann::json{{"scenario", nlohmann::json::parse(result.to_json())}}.dump());
  // The ledger as the scenario (and the framework's cache release) left it, before the
  // executor's own teardown.
  if (const auto write = interposer_write_report()) (void)write();
  ex.reset();
  return exit_status::ok;
}

// ---- the parent --------------------------------------------------------------------------------

struct feature_run {
  std::string feature;
  std::string implementation;
  oi::countdown_result result;
};

std::string reproduce_command(const check_program& program, const driver_fault_request& r,
                              const std::string& feature, std::uint64_t n) {
  // program.name already holds what starts the program ("python -m offloadkit"); program.command
  // is what a child gets after the executable.
  std::vector<std::string> words = {program.name, "check"};
  words.insert(words.end(), r.forwarded.begin(), r.forwarded.end());
  words.insert(words.end(), {"--feature", feature, "--fault-call", std::to_string(n)});
  return join(words, " ");
}

/// The declared profile of `feature`'s implementation in `subjects` (empty when not provided).
profile_flags profile_of_subject(const oi::fault_subjects& subjects, const std::string& feature) {
  if (feature == "stash" && subjects.stash) return testing::profile_of(*subjects.stash);
  if (feature == "region" && subjects.region) return testing::profile_of(*subjects.region);
  if (feature == "arena" && subjects.arena) return testing::profile_of(*subjects.arena);
  if (feature == "activation" && subjects.activation) {
    return testing::profile_of(*subjects.activation);
  }
  return {};
}

}  // namespace

bool interposer_switched_off() {
  const char* env = std::getenv("OFFLOADKIT_INTERPOSE_LIBRARY");
  return env != nullptr && (std::string(env) == "none" || std::string(env) == "off");
}

std::vector<std::string> interposer_candidates() {
  std::vector<std::string> c;
  if (const char* env = std::getenv("OFFLOADKIT_INTERPOSE_LIBRARY");
      env != nullptr && *env && !interposer_switched_off()) {
    c.emplace_back(env);
  }
  std::error_code ec;
  const fs::path installed =
      fs::path(self_executable()).parent_path() / ".." / "lib" / OKIT_INTERPOSE_LIBRARY_NAME;
  c.push_back(installed.lexically_normal().string());
#ifdef OFFLOADKIT_INTERPOSE_BUILD_PATH
  c.emplace_back(OFFLOADKIT_INTERPOSE_BUILD_PATH);
#endif
  return c;
}

int driver_faults_main(const check_program& program, const driver_fault_request& r) {
  if (!program.fault_subjects) {
    throw usage_error("--driver-faults is not supported by " + program.name);
  }
  if (r.executor == "host") {
    throw usage_error(
        "--driver-faults runs on the cuda executor only: the calls it fails are the CUDA "
        "runtime's and driver's, which the host executor never makes (use --executor cuda or "
        "auto)");
  }
  if (r.run_one) return run_one_case(program, r);

  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) {
    std::cerr << program.name
              << " check --driver-faults: needs the cuda executor (the calls it fails exist only "
                 "there), but the cuda back end cannot run here: "
              << why << "\n";
    return exit_status::unavailable;
  }
  const std::vector<std::string> candidates = interposer_candidates();
  const std::string interposer = oi::find_interposer(candidates);
  if (interposer.empty()) {
    std::cerr << program.name << " check --driver-faults: the interposer "
              << OKIT_INTERPOSE_LIBRARY_NAME << " is not there (looked for "
              << join(candidates, ", ") << "); set OFFLOADKIT_INTERPOSE_LIBRARY to its path\n";
    return exit_status::unavailable;
  }

  oi::fault_subjects subjects;
  try {
    subjects = program.fault_subjects(r.library);
  } catch (const std::exception& e) {
    throw plugin_unusable(e.what());
  }
  const std::vector<std::string> all = oi::scenario_features();
  if (!r.feature.empty() && std::find(all.begin(), all.end(), r.feature) == all.end()) {
    throw usage_error("unknown feature '" + r.feature +
                      "' for --driver-faults: valid features are " + join(all, ", "));
  }
  std::vector<std::string> features;
  std::vector<std::string> notes;
  for (const auto& f : all) {
    if (!r.feature.empty() && f != r.feature) continue;
    if (!oi::subject_name(subjects, f)) {
      notes.push_back(f + ": not provided by the plugin");
    } else if (!oi::subject_runs_on_cuda(subjects, f)) {
      notes.push_back(f +
                      ": not run: the plugin declares no support for the cuda executor "
                      "(capability OKIT_CAP_CUDA_EXECUTOR)");
    } else {
      features.push_back(f);
    }
  }
  if (features.empty()) {
    for (const auto& n : notes) std::cerr << "  " << n << "\n";
    throw plugin_unusable(r.subject + " has nothing to run under --driver-faults" +
                          (r.feature.empty() ? "" : " for feature " + r.feature));
  }

  // Opened before anything runs, so that a path that cannot be written ends the command here.
  std::unique_ptr<report_file> report;
  if (!r.report.empty()) report = std::make_unique<report_file>(r.report);

  std::cout << program.name << " check --driver-faults: " << r.subject << "\n"
            << "interposer: " << interposer << "\n";
  for (const auto& n : notes) std::cout << "  " << n << "\n";
  std::cout << std::flush;

  const scratch_folder scratch;
  result_file result;
  const std::chrono::milliseconds timeout = std::chrono::seconds(r.timeout_s);
  const auto t0 = std::chrono::steady_clock::now();
  int interrupted_by = 0;
  bool unavailable = false;
  std::string unavailable_why;
  std::vector<feature_run> runs;

  for (const auto& feature : features) {
    feature_run fr;
    fr.feature = feature;
    fr.implementation = *oi::subject_name(subjects, feature);
    std::cout << "\n"
              << feature << " (" << fr.implementation << "): " << what_the_scenario_does(feature)
              << "; case N fails the N-th acquiring call "
              << "(each case a child process, time limit " << r.timeout_s << " s)\n"
              << std::flush;
    const std::string report_path = scratch.path() + "/report-" + feature + ".json";

    auto run_case = [&](std::uint64_t n) -> std::optional<oi::case_run> {
      std::vector<std::string> argv = {child_executable(program)};
      argv.insert(argv.end(), program.command.begin(), program.command.end());
      argv.insert(argv.end(), {"--run-one", "--result-fd", std::to_string(child_result_fd),
                               "--executor", "cuda", "--feature", feature});
      argv.insert(argv.end(), r.forwarded.begin(), r.forwarded.end());
      // A new case claims the count afresh (control.h).
      std::error_code ec;
      fs::remove(report_path, ec);
      fs::remove(report_path + OKIT_INTERPOSE_CLAIM_SUFFIX, ec);
      result.clear();
      std::cout << "  N=" << n << " ... " << std::flush;
      const child_run run =
          run_child(argv, timeout, result.fd(), child_result_fd, std::size_t{64} * 1024,
                    oi::countdown_case_environment(interposer, n, report_path, true),
                    std::chrono::seconds(r.shutdown_grace_s));
      if (run.how == child_run::end::interrupted) {
        std::cout << "interrupted by " << signal_name(run.signal) << "\n";
        interrupted_by = run.signal;
        return std::nullopt;
      }
      oi::case_run c;
      c.process = to_process_end(run, r.timeout_s);
      const auto reported = nlohmann::json::parse(result.read_all(), nullptr, false);
      if (reported.is_object() && reported.contains("unavailable")) {
        std::cout << "not run\n";
        unavailable = true;
        unavailable_why = reported["unavailable"].is_string()
                              ? reported["unavailable"].get<std::string>()
                              : reported["unavailable"].dump();
        return std::nullopt;
      }
      if (reported.is_object() && reported.contains("scenario")) {
        try {
          c.scenario = oi::scenario_result::from_json(reported["scenario"].dump());
        } catch (const std::exception&) {
          // An unreadable result is judged as no result: by how the process ended.
        }
      }
      try {
        c.report = oi::read_report(report_path);
      } catch (const std::exception& e) {
        c.report_error = e.what();
      }
      return c;
    };
    auto on_row = [](const oi::case_row& row) {
      std::cout << (row.call.empty() ? "(no call N)" : row.call) << ": " << to_string(row.cls);
      if (row.cls != oi::fault_class::clean) std::cout << " (" << row.detail << ")";
      std::cout << "\n" << std::flush;
    };
    fr.result = oi::run_countdown(run_case, max_cases, r.only_call, on_row);
    runs.push_back(std::move(fr));
    if (interrupted_by != 0 || unavailable) break;
  }

  // Every way the run ends goes through here: the report, when asked for, holds the cases that
  // finished and why the run stopped early, if it did.
  auto finish = [&](int status, const std::string& stopped) {
    if (!report) return status;
    fault_report fr;
    fr.header = r.header;
    fr.header.executor = "cuda";
    fr.header.executor_why = "--driver-faults fails CUDA runtime and driver calls, made only there";
    fr.header.cases = r.only_call ? "case " + std::to_string(*r.only_call) + " alone (--fault-call)"
                                  : "N = 0, 1, 2, ... until a run reaches no call N";
    fr.header.isolation =
        "each case in a child process (time limit " + std::to_string(r.timeout_s) + " s)";
    fr.interposer = interposer;
    for (const auto& run : runs) {
      fault_report_feature f;
      f.feature = run.feature;
      f.implementation = run.implementation;
      f.scenario = what_the_scenario_does(run.feature);
      f.profile = profile_of_subject(subjects, run.feature);
      f.rows = run.result.rows;
      for (const auto& row : f.rows) {
        f.reproduce.push_back(reproduce_command(program, r, run.feature, row.n));
      }
      f.complete = run.result.complete;
      f.stopped = run.result.stopped;
      fr.features.push_back(std::move(f));
    }
    fr.notes = notes;
    fr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fr.stopped = stopped;
    return finish_report(*report, render_report(fr, report->format()), status,
                         program.name + " check --driver-faults: ", std::cout, std::cerr);
  };

  if (unavailable) {
    std::cerr << program.name << " check --driver-faults: " << unavailable_why << "\n";
    return finish(exit_status::unavailable, unavailable_why);
  }

  bool clean = true;
  for (const auto& fr : runs) {
    std::cout << "\n" << fr.feature << " (" << fr.implementation << "):\n";
    oi::print_countdown_table(std::cout, fr.result.rows);
    if (!fr.result.complete && !fr.result.stopped.empty()) {
      std::cout << "the count did not finish: " << fr.result.stopped << "\n";
      if (fr.result.stopped != "interrupted") clean = false;
    }
    for (const auto& f : fault_shutdown_findings(fr.result.rows)) {
      clean = false;
      std::cout << "shutdown: " << fault_shutdown_text(f) << "\n";
    }
    for (const auto& row : fr.result.rows) {
      if (row.cls == oi::fault_class::clean && row.shutdown.empty()) continue;
      clean = false;
      std::cout << "  N=" << row.n << " " << (row.call.empty() ? "(no call N)" : row.call) << ": "
                << to_string(row.cls) << ": " << row.detail << "\n";
      const std::string tail = last_lines(row.output, output_lines_shown);
      if (!tail.empty())
        std::cout << "    last lines of its output:\n" << indent(tail, "    | ") << "\n";
      std::cout << "    reproduce: " << reproduce_command(program, r, fr.feature, row.n) << "\n";
    }
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::size_t cases = 0;
  for (const auto& fr : runs) cases += fr.result.rows.size();
  std::cout << "\n"
            << cases << " case(s) in " << runs.size() << " feature(s), " << std::llround(total)
            << " s: " << (clean ? "every case clean" : "NOT every case clean") << "\n";
  for (const auto& n : notes) std::cout << "not checked: " << n << "\n";
  if (interrupted_by != 0) {
    return finish(128 + interrupted_by, "interrupted by " + signal_name(interrupted_by));
  }
  return finish(clean ? exit_status::ok : exit_status::check_failed, "");
}

}  // namespace offloadkit::tools
