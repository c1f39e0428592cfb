// The check command. By default every property runs in a child process: this same binary,
// re-executed with the hidden option --run-one, which runs exactly one property in-process and
// writes its check_outcome as JSON into a file descriptor the parent reads. The parent turns a
// child that crashed, exited without a result or ran past the time limit into one failure row and
// goes on. --in-process runs the properties one after another in this process (for a debugger).
// The options and how they are parsed are check_options.cpp.
#include "check_cli.hpp"

#include <dlfcn.h>
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "check_options.hpp"
#include "driver_faults.hpp"
#include "isolation.hpp"
#include "offloadkit/detail/text.hpp"
#include "offloadkit/executor_choice.hpp"
#include "offloadkit/interpose/control.h"
#include "offloadkit/interpose/countdown.hpp"
#include "offloadkit/plugin.h"
#include "python_command.hpp"
#include "report.hpp"

namespace offloadkit::tools {
namespace {

using detail::check_options;
using detail::parse_check_options;
using ::offloadkit::detail::indent;
using ::offloadkit::detail::join;

/// The descriptor a child finds its result file on.
constexpr int child_result_fd = 3;
/// Lines of a failed child's output shown under its row.
constexpr std::size_t output_lines_shown = 20;

/// The plugin library that --python loads in this process: the program's own Python bridge (the
/// Python package's extension module). A program without one runs --python in a Python
/// interpreter instead (check_main), and never gets here.
std::string python_bridge_path(const check_program& program) {
  if (program.python_bridge.empty()) {
    throw std::logic_error(
        "check_main: --python reached the batteries of a program without a "
        "Python bridge");
  }
  return program.python_bridge;
}

/// Throws a usage_error unless `value` is one of the values the registered cases have in `field`.
template <class Field>
void expect_known(const std::string& option, const std::string& plural, const std::string& value,
                  const std::vector<check_case>& cases, Field field) {
  if (value.empty()) return;
  std::vector<std::string> known;
  for (const auto& c : cases) {
    const std::string& v = field(c);
    if (std::find(known.begin(), known.end(), v) == known.end()) known.push_back(v);
  }
  if (std::find(known.begin(), known.end(), value) == known.end()) {
    throw usage_error("unknown " + option + " '" + value + "': valid " + plural + " are " +
                      join(known));
  }
}

/// The registered cases that --feature, --implementation and --property select. With --plugin,
/// `notes` gets a line per feature of the plugin that yields no case, and why.
std::vector<check_case> select_cases(const check_program& program, const std::string& executor_name,
                                     const check_options& opt, std::vector<std::string>& notes) {
  if (!program.cases) throw std::logic_error("check_main: the program has no case source");
  std::vector<check_case> cases;
  if (opt.plugin.empty() && opt.python.empty()) {
    cases = program.cases(executor_name);
  } else {
    const char* option = opt.python.empty() ? "--plugin" : "--python";
    if (!program.plugin_cases) {
      throw usage_error(std::string(option) + " is not supported by " + program.name);
    }
    std::string library = opt.plugin;
    if (!opt.python.empty()) {
      // The bridge reads its factory from the environment, which the children inherit (and
      // set again from their own --python).
      ::setenv("OFFLOADKIT_PYTHON_FACTORY", opt.python.c_str(), 1);
      library = python_bridge_path(program);
    }
    try {
      cases = program.plugin_cases(library, executor_name, notes);
    } catch (const std::exception& e) {
      throw plugin_unusable(e.what());
    }
    if (cases.empty()) {
      for (const auto& n : notes) std::cerr << "  " << n << "\n";
      throw plugin_unusable(
          (opt.python.empty() ? "plugin " + opt.plugin : "Python plugin " + opt.python) +
          " has no property to run on the " + executor_name + " executor");
    }
  }
  expect_known("feature", "features", opt.feature, cases,
               [](const auto& c) -> const std::string& { return c.feature; });
  expect_known("implementation", "implementations", opt.implementation, cases,
               [](const auto& c) -> const std::string& { return c.implementation; });
  expect_known("property", "properties", opt.property, cases,
               [](const auto& c) -> const std::string& { return c.name; });
  cases.erase(std::remove_if(cases.begin(), cases.end(),
                             [&opt](const check_case& c) {
                               return (!opt.feature.empty() && c.feature != opt.feature) ||
                                      (!opt.implementation.empty() &&
                                       c.implementation != opt.implementation) ||
                                      (!opt.property.empty() && c.name != opt.property);
                             }),
              cases.end());
  if (cases.empty()) {
    throw usage_error("no registered property matches --feature '" + opt.feature +
                      "', --implementation '" + opt.implementation + "' and --property '" +
                      opt.property + "' together");
  }
  // An implementation may well have no property on one side of --free-memory: the caller gets
  // none, and a note, rather than an error.
  if (!opt.free_memory.empty()) {
    const bool only = opt.free_memory == "only";
    cases.erase(std::remove_if(cases.begin(), cases.end(),
                               [only](const check_case& c) { return c.reads_free_memory != only; }),
                cases.end());
    if (cases.empty()) {
      notes.push_back(std::string("--free-memory ") + opt.free_memory + ": none of the selected " +
                      "properties " + (only ? "reads" : "leaves alone") +
                      " the device's free memory; nothing to run");
    }
  }
  return cases;
}

std::string seconds(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 10 ? 1 : 0) << s << " s";
  return os.str();
}

/// One property's result as the report shows it.
struct property_row {
  check_outcome outcome;
  /// Empty for a property that ran to its own result; otherwise how its process ended
  /// ("crashed: signal 11 (SIGSEGV)", "timed out after 600 s", ...).
  std::string abnormal_end;
  bool has_result = true;  ///< false: the process ended before it reported an outcome
  /// How its process ended after it reported an outcome, when that was not as a process that
  /// reported it ends ("crashed: signal 11 (SIGSEGV) after its result"): a shutdown finding, not
  /// the property's verdict. Empty otherwise.
  std::string shutdown;
  bool in_child = false;  ///< it ran in a process of its own (a shutdown could be seen)
  std::string output;     ///< the tail of the child's stdout and stderr (isolated runs)
  double seconds = 0;
};

/// The commands that replay a row: the isolated replay, and for a process that ended abnormally
/// the same under a debugger with --in-process.
struct replay_commands {
  std::string replay;
  std::string debug;  ///< empty for a failure that is the property's own
};

replay_commands replay_for(const property_row& row, const check_program& program,
                           const check_options& opt) {
  std::string base = reproduce_command(row.outcome, program.name);
  for (const auto& word : opt.forwarded) base += " " + shell_quote(word);
  replay_commands r;
  r.replay = base;
  if (opt.timeout_given) r.replay += " --timeout " + std::to_string(opt.timeout_s);
  if (!row.abnormal_end.empty()) r.debug = "gdb --args " + base + " --in-process";
  return r;
}

/// A row as the report shows it: a failure with the commands that replay it and the last lines
/// of its output.
report_row report_row_of(const property_row& row, const check_program& program,
                         const check_options& opt) {
  report_row r;
  r.outcome = row.outcome;
  r.seconds = row.seconds;
  r.abnormal_end = row.abnormal_end;
  r.has_result = row.has_result;
  r.shutdown = row.shutdown;
  if ((!row.outcome.passed && !row.outcome.skipped) || !row.shutdown.empty()) {
    r.output = last_lines(row.output, output_lines_shown);
    const auto commands = replay_for(row, program, opt);
    r.reproduce = commands.replay;
    r.debug = commands.debug;
  }
  return r;
}

void print_row_result(const property_row& row, const check_program& program,
                      const check_options& opt) {
  const auto& o = row.outcome;
  // The way out is said where it happened; the finding itself is listed once, after the table.
  const std::string shutdown = row.shutdown.empty() ? "" : "; shutdown: " + row.shutdown;
  if (o.passed) {
    std::cout << "ok (" << o.cases_run << " cases, " << seconds(row.seconds) << shutdown << ")\n";
    return;
  }
  if (o.skipped) {
    std::cout << o.message << (shutdown.empty() ? "" : " (" + shutdown.substr(2) + ")") << "\n";
    return;
  }
  if (!row.has_result) {
    std::cout << "FAILED (" << row.abnormal_end << ", " << o.cases_planned << " cases planned, "
              << seconds(row.seconds) << ")\n";
  } else if (!row.abnormal_end.empty()) {
    std::cout << "FAILED (" << row.abnormal_end << ", " << o.cases_run << " of " << o.cases_planned
              << " cases run, " << seconds(row.seconds) << ")\n"
              << indent(o.message, "      ") << "\n";
  } else {
    std::cout << "FAILED (case " << o.cases_run << " of " << o.cases_planned << ", "
              << seconds(row.seconds) << shutdown << ")\n"
              << indent(o.message, "      ") << "\n";
  }
  const std::string tail = last_lines(row.output, output_lines_shown);
  if (!tail.empty()) {
    std::cout << "      last lines of its output:\n" << indent(tail, "      | ") << "\n";
  }
  const auto commands = replay_for(row, program, opt);
  std::cout << "      reproduce: " << commands.replay << "\n";
  if (!commands.debug.empty()) std::cout << "      in a debugger: " << commands.debug << "\n";
}

void print_table(const std::vector<property_row>& rows_in) {
  const std::vector<std::string> header = {
      "feature", "implementation", "property", "executor", "cases", "result", "seed-to-reproduce"};
  constexpr std::size_t cases_column = 4;
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : rows_in) {
    const auto& o = row.outcome;
    // Why a property does not apply is on its progress line: the column stays narrow.
    std::string result = o.passed           ? "ok"
                         : o.not_applicable ? "n/a"
                         : o.skipped        ? o.message
                                            : "FAILED";
    if (!row.abnormal_end.empty()) result += ", " + row.abnormal_end;
    rows.push_back({o.feature, o.implementation, o.name, o.executor_name,
                    row.has_result && !o.not_applicable ? std::to_string(o.cases_run) : "-", result,
                    o.passed || o.skipped ? "" : std::to_string(o.seed)});
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  auto print = [&width](const std::vector<std::string>& r) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (i > 0) line += " | ";
      // The case count is a number: right-aligned.
      const std::string pad(width[i] - r[i].size(), ' ');
      line += i == cases_column ? pad + r[i] : r[i] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  };
  print(header);
  std::string rule;
  for (std::size_t i = 0; i < width.size(); ++i) {
    if (i > 0) rule += "-+-";
    rule += std::string(width[i], '-');
  }
  std::cout << rule << "\n";
  for (const auto& r : rows) print(r);
}

/// The table, the counts and the replay commands; returns the exit status they amount to.
int print_summary(const std::vector<property_row>& rows, double total_s,
                  const check_program& program, const check_options& opt,
                  const std::vector<std::string>& notes) {
  std::cout << "\n";
  print_table(rows);
  const auto failed =
      static_cast<std::size_t>(std::count_if(rows.begin(), rows.end(), [](const property_row& r) {
        return !r.outcome.passed && !r.outcome.skipped;
      }));
  const auto not_applicable = static_cast<std::size_t>(std::count_if(
      rows.begin(), rows.end(), [](const property_row& r) { return r.outcome.not_applicable; }));
  const auto skipped =
      static_cast<std::size_t>(std::count_if(
          rows.begin(), rows.end(), [](const property_row& r) { return r.outcome.skipped; })) -
      not_applicable;
  std::cout << "\n"
            << rows.size() - failed - skipped - not_applicable << " passed, " << failed
            << " failed, " << (skipped > 0 ? std::to_string(skipped) + " skipped, " : "")
            << (not_applicable > 0 ? std::to_string(not_applicable) + " not applicable, " : "")
            << seconds(total_s) << "\n";
  // What the plugin did not give to check is said next to the counts, never counted as passed.
  for (const auto& n : notes) std::cout << "not checked: " << n << "\n";
  std::vector<report_row> reported;
  reported.reserve(rows.size());
  for (const auto& row : rows) reported.push_back(report_row_of(row, program, opt));
  const std::vector<report_shutdown_finding> shutdown = shutdown_findings_of(reported);
  for (const auto& f : shutdown) {
    std::cout << "shutdown: " << f.feature << ": " << f.properties.size() << " of " << f.of
              << " properties' processes " << f.end
              << " (their verdicts stand): " << join(f.properties, ", ") << "\n";
    if (!f.output.empty()) {
      std::cout << "      last lines of " << f.properties.front() << "'s output:\n"
                << indent(f.output, "      | ") << "\n";
    }
    std::cout << "      reproduce: " << f.reproduce << "\n";
  }
  if (failed > 0) {
    std::cout << "replay a failure with:\n";
    for (const auto& row : rows) {
      if (row.outcome.passed || row.outcome.skipped) continue;
      const auto commands = replay_for(row, program, opt);
      std::cout << "  " << commands.replay << "\n";
      if (!commands.debug.empty()) std::cout << "    in a debugger: " << commands.debug << "\n";
    }
  }
  return failed == 0 && shutdown.empty() ? exit_status::ok : exit_status::check_failed;
}

// ---- the child's result ------------------------------------------------------------------------

nlohmann::json to_json(const check_outcome& o) {
  return {{"feature", o.feature},
          {"implementation", o.implementation},
          {"name", o.name},
          {"executor", o.executor_name},
          {"cases_run", o.cases_run},
          {"cases_planned", o.cases_planned},
          {"passed", o.passed},
          {"skipped", o.skipped},
          {"seed", o.seed},
          {"message", o.message},
          {"not_applicable", o.not_applicable}};
}

check_outcome outcome_from_json(const nlohmann::json& j) {
  check_outcome o;
  o.feature = j.at("feature").get<std::string>();
  o.implementation = j.at("implementation").get<std::string>();
  o.name = j.at("name").get<std::string>();
  o.executor_name = j.at("executor").get<std::string>();
  o.cases_run = j.at("cases_run").get<int>();
  o.cases_planned = j.at("cases_planned").get<int>();
  o.passed = j.at("passed").get<bool>();
  o.skipped = j.value("skipped", false);
  o.not_applicable = j.value("not_applicable", false);
  o.seed = j.at("seed").get<std::uint64_t>();
  o.message = j.at("message").get<std::string>();
  return o;
}

/// --run-one: the child side. Runs the one selected property in this process and writes
/// {"outcome": ...} (or {"unavailable": reason} when the executor cannot be created) to the
/// result descriptor. The executor is destroyed after the result is written, so that a crash in
/// its teardown is still reported, as a crash after the result.
int run_one(const check_program& program, const check_options& opt) {
  if (opt.timeout_given || opt.list || opt.in_process || !opt.report.empty()) {
    throw usage_error(
        "--run-one runs a single property for a parent check: it takes no "
        "--timeout, --list, --in-process or --report");
  }
  if (opt.feature.empty() || opt.implementation.empty() || opt.property.empty() || opt.seed == 0) {
    throw usage_error("--run-one needs --feature, --implementation, --property and --seed");
  }
  // Processes the code under test starts must not inherit the result descriptor.
  if (::fcntl(opt.result_fd, F_SETFD, FD_CLOEXEC) != 0) {
    throw usage_error("--result-fd " + std::to_string(opt.result_fd) + " is not an open file");
  }
  executor_choice chosen;
  try {
    chosen = choose_executor(opt.executor);
  } catch (const unavailable_error& e) {
    write_result(opt.result_fd, nlohmann::json{{"unavailable", e.what()}}.dump());
    return exit_status::unavailable;
  }
  const std::string& executor_name = chosen.name;
  std::vector<std::string> notes;  // the parent reports them
  const std::vector<check_case> cases = select_cases(program, executor_name, opt, notes);
  if (cases.size() != 1) {
    throw usage_error("--run-one selects " + std::to_string(cases.size()) +
                      " properties; it runs exactly one");
  }
  std::unique_ptr<executor> ex;
  try {
    ex = make_executor(executor_name);
  } catch (const std::exception& e) {
    write_result(opt.result_fd, nlohmann::json{{"unavailable", "the " + executor_name +
                                                                   " executor could not be "
                                                                   "created: " +
                                                                   e.what()}}
                                    .dump());
    return exit_status::unavailable;
  }
  check_config cfg;
  cfg.seed = opt.seed;
  cfg.cases = opt.cases;
  cfg.shrink = opt.shrink;
  const check_outcome o = run_check(cases.front(), *ex, cfg);
  write_result(opt.result_fd, nlohmann::json{{"outcome", to_json(o)}}.dump());
  ex.reset();
  return o.passed || o.skipped ? exit_status::ok : exit_status::check_failed;
}

/// The row for one child run: its own outcome when it reported one and ended as a child that
/// reported it does; one failure row naming how it ended otherwise.
property_row row_from_child(const check_case& c, const check_config& cfg,
                            const std::string& executor_name, const child_run& run,
                            const std::string& result_text, std::chrono::milliseconds timeout) {
  property_row row;
  row.output = run.output;
  row.seconds = run.seconds;
  row.in_child = true;

  std::string unreadable;
  if (!result_text.empty()) {
    try {
      row.outcome = outcome_from_json(nlohmann::json::parse(result_text).at("outcome"));
    } catch (const std::exception& e) {
      unreadable = e.what();
      row.has_result = false;
    }
  } else {
    row.has_result = false;
  }

  const std::string ended = describe_end(run, timeout);
  if (row.has_result) {
    const int expected =
        row.outcome.passed || row.outcome.skipped ? exit_status::ok : exit_status::check_failed;
    if (run.how == child_run::end::exited && run.exit_code == expected) return row;
    // It reported, then went wrong on the way out (executor teardown, interpreter exit, static
    // destructors, a thread the code under test left running): a defect of the code under test,
    // but of its shutdown, not of the property, whose cases all ran to the result it reported.
    // The property keeps its verdict; the run lists the way out once, as a shutdown finding.
    row.shutdown = run.past_grace ? ended : ended + " after its result";
    return row;
  }

  row.outcome = outcome_before_run(c, executor_name, cfg);
  row.abnormal_end = run.how == child_run::end::exited ? ended + " without a result" : ended;
  row.outcome.message = "the property's process " + row.abnormal_end;
  if (!unreadable.empty()) {
    row.outcome.message += " (its result was unreadable: " + unreadable + ")";
  }
  return row;
}

// A sanitizer's runtime must come first in a process, which a preloaded interposer prevents.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool sanitized_build = true;
#else
constexpr bool sanitized_build = false;
#endif
#else
constexpr bool sanitized_build = false;
#endif

/// The black-box instruments: the interposer the property children run under, counting only (no
/// fault armed, no report, every child counting for itself, delays off until a race property arms
/// them), so that the driver counts and the delays reach code that calls CUDA itself.
struct black_box_instruments {
  std::string library;  ///< empty: off
  std::string state;    ///< for the header: "on (...)" or "off (...)"
  /// NAME=VALUE entries for the children.
  [[nodiscard]] std::vector<std::string> environment() const {
    if (library.empty()) return {};
    const char* preload = std::getenv("LD_PRELOAD");
    return {"LD_PRELOAD=" + library +
                (preload != nullptr && *preload ? ":" + std::string(preload) : ""),
            std::string(OKIT_INTERPOSE_ENV_CALL) + "=",
            std::string(OKIT_INTERPOSE_ENV_REPORT) + "=",
            std::string(OKIT_INTERPOSE_ENV_WINDOW) + "=open",
            std::string(OKIT_INTERPOSE_ENV_DELAY_MAX_US) + "=0"};
  }
};

black_box_instruments find_black_box_instruments(bool in_process) {
  black_box_instruments b;
  if (in_process) {
    const bool here = dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_COUNTS_SYMBOL) != nullptr;
    b.state = here ? "on (this process runs under the interposer)"
                   : "off (--in-process: the properties run in this process, which is not "
                     "interposed)";
    return b;
  }
  if (sanitized_build) {
    b.state = "off (a sanitizer build: the interposer cannot be preloaded before its runtime)";
    return b;
  }
  if (interposer_switched_off()) {
    b.state = "off (OFFLOADKIT_INTERPOSE_LIBRARY=" +
              std::string(std::getenv("OFFLOADKIT_INTERPOSE_LIBRARY")) + ")";
    return b;
  }
  const std::vector<std::string> candidates = interposer_candidates();
  b.library = interpose::find_interposer(candidates);
  b.state = b.library.empty() ? "off (" + std::string(OKIT_INTERPOSE_LIBRARY_NAME) +
                                    " not found: looked for " + join(candidates, ", ") + ")"
                              : "on (driver counts and delays through " + b.library + ")";
  return b;
}

std::vector<std::string> child_arguments(const check_program& program, const check_options& opt,
                                         const std::string& executor_name, const check_case& c,
                                         std::uint64_t seed) {
  std::vector<std::string> argv = {child_executable(program)};
  argv.insert(argv.end(), program.command.begin(), program.command.end());
  argv.insert(argv.end(), {"--run-one", "--result-fd", std::to_string(child_result_fd),
                           "--executor", executor_name, "--feature", c.feature, "--implementation",
                           c.implementation, "--property", c.name, "--seed", std::to_string(seed)});
  // Without --cases the child uses the property's default, exactly as the parent planned.
  if (opt.cases > 0) argv.insert(argv.end(), {"--cases", std::to_string(opt.cases)});
  argv.insert(argv.end(), opt.forwarded.begin(), opt.forwarded.end());
  return argv;
}

void print_progress(std::size_t i, std::size_t n, const check_case& c) {
  const std::size_t digits = std::to_string(n).size();
  std::cout << "[" << std::setw(static_cast<int>(digits)) << i + 1 << "/" << n << "] " << c.feature
            << "/" << c.implementation << " " << c.name << " ... " << std::flush;
}

}  // namespace

namespace {

/// What --driver-faults needs of the options; the plugin library is resolved as for the batteries.
driver_fault_request driver_fault_request_of(const check_program& program,
                                             const check_options& opt) {
  driver_fault_request r;
  r.library = opt.plugin;
  r.subject = "plugin " + opt.plugin;
  if (!opt.python.empty()) {
    ::setenv("OFFLOADKIT_PYTHON_FACTORY", opt.python.c_str(), 1);
    r.library = python_bridge_path(program);
    r.subject = "Python plugin " + opt.python;
  }
  r.feature = opt.feature;
  r.executor = opt.executor;
  if (opt.fault_call >= 0) r.only_call = static_cast<std::uint64_t>(opt.fault_call);
  r.timeout_s = opt.timeout_s;
  r.shutdown_grace_s = opt.shutdown_grace_s;
  r.run_one = opt.run_one;
  r.result_fd = opt.result_fd;
  r.forwarded = opt.forwarded;
  r.report = opt.report;
  return r;
}

/// The header of --report as far as the options tell it; the run adds the executor, the seed and
/// how the properties ran.
report_header report_header_of(const check_program& program, const std::vector<std::string>& args,
                               const check_options& opt) {
  // As the reproduce lines name it: program.command is what a child gets after the executable.
  report_header h = common_report_header(program.name, {"check"}, args);
  if (!opt.python.empty()) {
    h.subject_kind = "python";
    h.subject = opt.python;
  } else if (!opt.plugin.empty()) {
    h.subject_kind = "plugin";
    h.subject = opt.plugin;
  } else {
    h.subject_kind = "built-in";
    h.subject = "offloadkit's own implementations";
  }
  h.cases = opt.cases > 0 ? std::to_string(opt.cases) + " per property (--cases)"
                          : "each property's own count";
  return h;
}

}  // namespace

std::string child_executable(const check_program& program) {
  return program.executable.empty() ? self_executable() : program.executable;
}

int check_main(const std::vector<std::string>& args, const check_program& program) {
  check_options opt;
  if (!parse_check_options(args, program.name, std::cout, opt)) return exit_status::ok;
  if (!opt.python.empty() && program.python_bridge.empty()) {
    // One path for Python implementations: the interpreter that has the user's packages runs the
    // check (python -m offloadkit check), with these same options.
    const python_interpreter python = find_python_interpreter();
    expect_offloadkit_package(python, OFFLOADKIT_VERSION, OKIT_ABI_VERSION);
    exec_python_command(python, "check", args);
  }
  if (opt.driver_faults) {
    driver_fault_request request = driver_fault_request_of(program, opt);
    request.header = report_header_of(program, args, opt);
    return driver_faults_main(program, request);
  }
  if (opt.run_one) return run_one(program, opt);

  // Choose the executor first: the registered cases are labelled with its name. (Named copies,
  // not a structured binding: the report's lambda below captures them.)
  executor_choice chosen;
  try {
    chosen = choose_executor(opt.executor);
  } catch (const unavailable_error& e) {
    std::cerr << program.name << " check: --executor cuda was asked for, but " << e.what()
              << "\n(use --executor host or auto)\n";
    return exit_status::unavailable;
  }
  const std::string& executor_name = chosen.name;
  const std::string& why = chosen.why;
  std::vector<std::string> notes;
  const std::vector<check_case> cases = select_cases(program, executor_name, opt, notes);
  // Opened before anything runs, so that a path that cannot be written ends the command here.
  std::unique_ptr<report_file> report;
  if (!opt.report.empty()) report = std::make_unique<report_file>(opt.report);

  const black_box_instruments black_box = find_black_box_instruments(opt.in_process);
  std::cout << program.name << " check: " << executor_name << " executor (" << why << ")\n";
  std::cout << "black-box instruments: " << black_box.state << "\n";
  if (!opt.plugin.empty()) std::cout << "plugin: " << opt.plugin << "\n";
  if (!opt.python.empty()) std::cout << "python: " << opt.python << "\n";
  for (const auto& n : notes) std::cout << "  " << n << "\n";
  if (opt.list) {
    for (const auto& c : cases) {
      std::cout << "  " << c.feature << "/" << c.implementation << " " << c.name << " ("
                << (c.not_applicable.empty() ? std::to_string(c.default_cases) + " cases by default"
                                             : "not applicable: " + c.not_applicable)
                << ")\n";
    }
    return exit_status::ok;
  }

  check_config cfg;
  cfg.seed = opt.seed;
  if (cfg.seed == 0) {
    std::random_device rd;
    while (cfg.seed == 0) cfg.seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  cfg.cases = opt.cases;
  cfg.shrink = opt.shrink;
  const std::string isolation =
      opt.in_process
          ? std::string("in this process") +
                (opt.timeout_given ? " (where --timeout does not apply)" : "")
          : "each in a child process (time limit " + std::to_string(opt.timeout_s) + " s)";

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<property_row> rows;
  // Every way the run ends goes through here: the report, when asked for, holds the rows that
  // finished and why the run stopped early, if it did.
  auto finish = [&](int status, const std::string& stopped) {
    if (!report) return status;
    check_report r;
    r.header = report_header_of(program, args, opt);
    r.header.executor = executor_name;
    r.header.executor_why = why;
    r.header.seed = cfg.seed;
    r.header.seed_fresh = opt.seed == 0;
    r.header.isolation = isolation;
    r.shutdown_observed = !opt.in_process;
    r.profiles = profiles_of(cases);
    for (const auto& row : rows) r.rows.push_back(report_row_of(row, program, opt));
    r.selected = cases.size();
    r.notes = notes;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.stopped = stopped;
    return finish_report(*report, render_report(r, report->format()), status,
                         program.name + " check: ", std::cout, std::cerr);
  };

  // In-process runs share one executor, created up front as before; isolated runs create one in
  // each child and never touch the device here.
  std::unique_ptr<executor> ex;
  if (opt.in_process) {
    try {
      ex = make_executor(executor_name);
    } catch (const std::exception& e) {
      const std::string what =
          "the " + executor_name + " executor could not be created: " + e.what();
      std::cerr << program.name << " check: " << what << "\n";
      return finish(exit_status::unavailable, what);
    }
  }

  std::cout << "seed " << cfg.seed << (opt.seed == 0 ? " (fresh; --seed replays it)" : "") << ", "
            << cases.size() << " properties, " << isolation << "\n"
            << std::flush;

  const std::chrono::milliseconds timeout = std::chrono::seconds(opt.timeout_s);
  std::unique_ptr<result_file> result;
  if (!opt.in_process) result = std::make_unique<result_file>();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    print_progress(i, cases.size(), c);
    property_row row;
    if (!c.not_applicable.empty()) {
      // Nothing to run: the profile rules it out.
      row.outcome = outcome_before_run(c, executor_name, cfg);
    } else if (opt.in_process) {
      const auto start = std::chrono::steady_clock::now();
      try {
        row.outcome = run_check(c, *ex, cfg);
      } catch (const std::exception& e) {
        // run_check reports failures as outcomes; this is only a last line of defence.
        row.outcome = outcome_before_run(c, executor_name, cfg);
        row.outcome.message = std::string("run_check threw: ") + e.what();
      }
      row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } else {
      result->clear();
      const child_run run =
          run_child(child_arguments(program, opt, executor_name, c, cfg.seed), timeout,
                    result->fd(), child_result_fd, std::size_t{64} * 1024, black_box.environment(),
                    std::chrono::seconds(opt.shutdown_grace_s));
      if (run.how == child_run::end::interrupted) {
        std::cout << "interrupted by " << signal_name(run.signal) << "\n";
        const double total =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!rows.empty()) print_summary(rows, total, program, opt, notes);
        return finish(128 + run.signal, "interrupted by " + signal_name(run.signal) + " after " +
                                            std::to_string(rows.size()) + " of " +
                                            std::to_string(cases.size()) + " properties");
      }
      const std::string text = result->read_all();
      const auto reported = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (reported.is_object() && reported.contains("unavailable")) {
        // The same holds for every later property: stop, as an in-process run does up front.
        std::cout << "not run\n";
        const auto& why_not = reported["unavailable"];
        const std::string what = why_not.is_string() ? why_not.get<std::string>() : why_not.dump();
        std::cerr << program.name << " check: " << what << "\n";
        return finish(exit_status::unavailable, what);
      }
      row = row_from_child(c, cfg, executor_name, run, text, timeout);
    }
    print_row_result(row, program, opt);
    std::cout << std::flush;
    rows.push_back(std::move(row));
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return finish(print_summary(rows, total, program, opt, notes), "");
}

}  // namespace offloadkit::tools
