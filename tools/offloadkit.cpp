// offloadkit: the command line. `offloadkit check` runs every registered property battery on the
// best executor available (cuda where a GPU is usable, host otherwise) or the one asked for, shows
// one line per property while it runs, and ends with a table and the commands that replay any
// failure. Exit codes: 0 all passed, 1 a property failed, 2 bad usage, 3 the executor asked for
// cannot run here.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "batteries.hpp"
#include "offloadkit/check.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/traces/cli.hpp"

#ifndef OFFLOADKIT_VERSION
#define OFFLOADKIT_VERSION "unknown"
#endif

namespace {

constexpr int exit_passed = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_unavailable = 3;

/// A command line the program cannot act on; the message names the bad value and the valid ones.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

const char* const usage_text =
    "usage: offloadkit <command> [options]\n"
    "\n"
    "commands:\n"
    "  check         run every registered property battery and print a table of the results\n"
    "  capture       run a CUDA program under the CUPTI recorder and report its timeline\n"
    "  analyze       report on a captured timeline (overlap, pageable copies, pinned allocations)\n"
    "  replay        validate a schedule file and replay it through a stash implementation\n"
    "  schedule-gen  write a generated 1F1B or interleaved schedule file\n"
    "  version       print the version and whether the cuda back end is usable here\n"
    "  help          print this text\n"
    "\n"
    "capture, analyze, replay and schedule-gen print their own options with --help.\n"
    "\n"
    "check options:\n"
    "  --executor auto|host|cuda   where to run (default auto: cuda when a GPU is usable)\n"
    "  --seed N                    seed for every property (default: a fresh one, printed)\n"
    "  --cases N                   run at most N cases per property (default: each property's "
    "own)\n"
    "  --feature NAME              only this feature's properties (executor, stash, ...)\n"
    "  --implementation NAME       only this implementation's properties\n"
    "  --property NAME             only the properties with this name\n"
    "  --no-shrink                 report a failing case as found, without shrinking it\n"
    "  --list                      list the selected properties instead of running them\n"
    "\n"
    "exit status of check: 0 all passed, 1 a property failed, 2 bad usage, 3 the executor cannot "
    "run here\n";

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

struct check_options {
  std::string executor = "auto";
  std::uint64_t seed = 0;
  int cases = 0;
  std::string feature;
  std::string implementation;
  std::string property;
  bool shrink = true;
  bool list = false;
};

std::uint64_t parse_seed(const std::string& v) {
  std::size_t used = 0;
  unsigned long long n = 0;
  try {
    if (v.empty() || v[0] == '-' || v[0] == '+') throw std::invalid_argument(v);
    n = std::stoull(v, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || used == 0 || n == 0) {
    throw usage_error("--seed '" + v + "' is not a valid seed: expected an integer in [1, " +
                      std::to_string(UINT64_MAX) + "]");
  }
  return n;
}

int parse_cases(const std::string& v) {
  std::size_t used = 0;
  long n = 0;
  try {
    n = std::stol(v, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  constexpr long max_cases = 1000000;
  if (used != v.size() || used == 0 || n < 1 || n > max_cases) {
    throw usage_error("--cases '" + v + "' is not a valid case count: expected an integer in [1, " +
                      std::to_string(max_cases) + "]");
  }
  return static_cast<int>(n);
}

check_options parse_check_options(const std::vector<std::string>& args) {
  const std::vector<std::string> valid = {
      "--executor",       "--seed",     "--cases",     "--feature",
      "--implementation", "--property", "--no-shrink", "--list"};
  check_options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    const auto eq = name.find('=');
    if (name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (std::find(valid.begin(), valid.end(), name) == valid.end()) {
      throw usage_error("unknown option '" + args[i] + "' for check: valid options are " +
                        join(valid));
    }
    if (name == "--list" || name == "--no-shrink") {
      if (has_value) throw usage_error("option " + name + " takes no value, got '" + value + "'");
      if (name == "--list") {
        o.list = true;
      } else {
        o.shrink = false;
      }
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) throw usage_error("option " + name + " needs a value");
      value = args[++i];
    }
    if (name == "--executor") {
      if (value != "auto" && value != "host" && value != "cuda") {
        throw usage_error("unknown executor '" + value + "': valid executors are auto, host, cuda");
      }
      o.executor = value;
    } else if (name == "--seed") {
      o.seed = parse_seed(value);
    } else if (name == "--cases") {
      o.cases = parse_cases(value);
    } else if (name == "--feature") {
      o.feature = value;
    } else if (name == "--implementation") {
      o.implementation = value;
    } else if (name == "--property") {
      o.property = value;
    }
  }
  return o;
}

/// Throws a usage_error unless `value` is one of the values the registered cases have in `field`.
template <class Field>
void expect_known(const std::string& option, const std::string& plural, const std::string& value,
                  const std::vector<offloadkit::check_case>& cases, Field field) {
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

std::string seconds(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 10 ? 1 : 0) << s << " s";
  return os.str();
}

std::string indent(const std::string& text, const std::string& prefix) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!out.empty()) out += '\n';
    if (!line.empty()) out += prefix + line;
  }
  return out;
}

void print_table(const std::vector<offloadkit::check_outcome>& outcomes) {
  const std::vector<std::string> header = {
      "feature", "implementation", "property", "executor", "cases", "result", "seed-to-reproduce"};
  constexpr std::size_t cases_column = 4;
  std::vector<std::vector<std::string>> rows;
  for (const auto& o : outcomes) {
    rows.push_back({o.feature, o.implementation, o.name, o.executor_name,
                    std::to_string(o.cases_run), o.passed ? "ok" : "FAILED",
                    o.passed ? "" : std::to_string(o.seed)});
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  auto print_row = [&width, cases_column](const std::vector<std::string>& r) {
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
  print_row(header);
  std::string rule;
  for (std::size_t i = 0; i < width.size(); ++i) {
    if (i > 0) rule += "-+-";
    rule += std::string(width[i], '-');
  }
  std::cout << rule << "\n";
  for (const auto& r : rows) print_row(r);
}

int run_check_command(const std::vector<std::string>& args) {
  const check_options opt = parse_check_options(args);

  // Choose the executor first: the registered cases are labelled with its name.
  std::string executor_name = opt.executor;
  std::string why;
  if (opt.executor == "auto" || opt.executor == "cuda") {
    const std::string reason = offloadkit::cuda_unavailable_reason();
    if (reason.empty()) {
      executor_name = "cuda";
      why = opt.executor == "auto" ? "a GPU is usable" : "asked for with --executor cuda";
    } else if (opt.executor == "cuda") {
      std::cerr << "offloadkit check: --executor cuda was asked for, but the cuda back end cannot "
                   "run here: "
                << reason << "\n(use --executor host or auto)\n";
      return exit_unavailable;
    } else {
      executor_name = "host";
      why = "the cuda back end is unavailable: " + reason;
    }
  } else {
    why = "asked for with --executor host";
  }

  std::vector<offloadkit::check_case> cases = offloadkit::tools::all_check_cases(executor_name);
  expect_known("feature", "features", opt.feature, cases,
               [](const auto& c) -> const std::string& { return c.feature; });
  expect_known("implementation", "implementations", opt.implementation, cases,
               [](const auto& c) -> const std::string& { return c.implementation; });
  expect_known("property", "properties", opt.property, cases,
               [](const auto& c) -> const std::string& { return c.name; });
  cases.erase(std::remove_if(cases.begin(), cases.end(),
                             [&opt](const offloadkit::check_case& c) {
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

  std::cout << "offloadkit check: " << executor_name << " executor (" << why << ")\n";
  if (opt.list) {
    for (const auto& c : cases) {
      std::cout << "  " << c.feature << "/" << c.implementation << " " << c.name << " ("
                << c.default_cases << " cases by default)\n";
    }
    return exit_passed;
  }

  std::unique_ptr<offloadkit::executor> ex;
  try {
    if (executor_name == "cuda") {
      ex = std::make_unique<offloadkit::cuda_executor>();
    } else {
      ex = std::make_unique<offloadkit::host_executor>();
    }
  } catch (const std::exception& e) {
    std::cerr << "offloadkit check: the " << executor_name
              << " executor could not be created: " << e.what() << "\n";
    return exit_unavailable;
  }

  offloadkit::check_config cfg;
  cfg.seed = opt.seed;
  if (cfg.seed == 0) {
    std::random_device rd;
    while (cfg.seed == 0) cfg.seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  cfg.cases = opt.cases;
  cfg.shrink = opt.shrink;
  std::cout << "seed " << cfg.seed << (opt.seed == 0 ? " (fresh; --seed replays it)" : "") << ", "
            << cases.size() << " properties\n"
            << std::flush;

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<offloadkit::check_outcome> outcomes;
  const std::size_t digits = std::to_string(cases.size()).size();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    std::cout << "[" << std::setw(static_cast<int>(digits)) << i + 1 << "/" << cases.size() << "] "
              << c.feature << "/" << c.implementation << " " << c.name << " ... " << std::flush;
    const auto start = std::chrono::steady_clock::now();
    offloadkit::check_outcome o;
    try {
      o = offloadkit::run_check(c, *ex, cfg);
    } catch (const std::exception& e) {
      // run_check reports failures as outcomes; this is only a last line of defence.
      o.feature = c.feature;
      o.implementation = c.implementation;
      o.name = c.name;
      o.executor_name = executor_name;
      o.seed = cfg.seed;
      o.message = std::string("run_check threw: ") + e.what();
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.passed) {
      std::cout << "ok (" << o.cases_run << " cases, " << seconds(secs) << ")\n";
    } else {
      std::cout << "FAILED (case " << o.cases_run << " of " << o.cases_planned << ", "
                << seconds(secs) << ")\n"
                << indent(o.message, "      ") << "\n"
                << "      reproduce: " << offloadkit::reproduce_command(o) << "\n";
    }
    std::cout << std::flush;
    outcomes.push_back(std::move(o));
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::cout << "\n";
  print_table(outcomes);
  const auto failed = static_cast<std::size_t>(
      std::count_if(outcomes.begin(), outcomes.end(), [](const auto& o) { return !o.passed; }));
  std::cout << "\n"
            << outcomes.size() - failed << " passed, " << failed << " failed, " << seconds(total)
            << "\n";
  if (failed > 0) {
    std::cout << "replay a failure with:\n";
    for (const auto& o : outcomes) {
      if (!o.passed) std::cout << "  " << offloadkit::reproduce_command(o) << "\n";
    }
  }
  return failed == 0 ? exit_passed : exit_failed;
}

int run_version() {
  std::cout << "offloadkit " << OFFLOADKIT_VERSION << "\n";
  const std::string reason = offloadkit::cuda_unavailable_reason();
  std::cout << "cuda back end: "
            << (reason.empty() ? std::string("usable") : "unavailable (" + reason + ")") << "\n";
  return exit_passed;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty())
      throw usage_error(
          "no command given: valid commands are check, capture, analyze, replay, schedule-gen, "
          "version, help");
    const std::string& command = args[0];
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (command == "check") return run_check_command(rest);
    // The trace subcommands parse their own arguments; argv[0] becomes the subcommand's name.
    namespace ot = offloadkit::traces;
    if (command == "capture") return ot::capture_main(argc - 1, argv + 1);
    if (command == "analyze") return ot::analyze_main(argc - 1, argv + 1);
    if (command == "replay") return ot::replay_main(argc - 1, argv + 1);
    if (command == "schedule-gen") return ot::schedule_gen_main(argc - 1, argv + 1);
    if (command == "version" || command == "--version") {
      if (!rest.empty()) throw usage_error("version takes no arguments, got '" + rest[0] + "'");
      return run_version();
    }
    if (command == "help" || command == "--help" || command == "-h") {
      std::cout << usage_text;
      return exit_passed;
    }
    throw usage_error(
        "unknown command '" + command +
        "': valid commands are check, capture, analyze, replay, schedule-gen, version, help");
  } catch (const usage_error& e) {
    std::cerr << "offloadkit: " << e.what() << "\n(offloadkit help shows the usage)\n";
    return exit_usage;
  } catch (const std::exception& e) {
    std::cerr << "offloadkit: " << e.what() << "\n";
    return exit_failed;
  }
}
