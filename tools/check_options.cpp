// The check command's options: their definitions and help text (CLI11), and how they are checked
// once parsed, alone and together (check_options.hpp); check_cli.cpp acts on them.
#include "check_options.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

#include "check_cli.hpp"
#include "cli_common.hpp"
#include "report.hpp"

namespace offloadkit::tools {
namespace detail {
namespace {

constexpr long max_timeout_s = 86400;
constexpr long max_cases = 1000000;

/// Options passed to every child unchanged and added to every reproduce command: any option that
/// shapes the case list or a property's run and is not chosen per property by the parent
/// (--executor, --seed, --cases, --feature, --implementation, --property) belongs here. The others
/// act in the parent only (--timeout, --list, ...) or only in the child (--run-one, --result-fd).
constexpr const char* forwarded_options[] = {"--no-shrink", "--plugin", "--python",
                                             "--driver-faults"};

/// The value of --python checked to be MODULE:FACTORY; a module given as a file path (with a '/' or
/// ending in .py) is made absolute, so that reproduce commands and children find it from anywhere.
std::string python_factory(const std::string& value, const std::string& option) {
  const auto colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size()) {
    throw usage_error(option + ": '" + value +
                      "' is not MODULE:FACTORY: expected a module name or a .py file, a colon "
                      "and the factory to call (e.g. my_offload:make or ./my_offload.py:make)");
  }
  std::string module = value.substr(0, colon);
  const bool is_path = module.find('/') != std::string::npos ||
                       (module.size() > 3 && module.compare(module.size() - 3, 3, ".py") == 0);
  if (is_path) {
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(module, ec);
    if (!ec) module = absolute.lexically_normal().string();
  }
  return module + value.substr(colon);
}

/// The notes and exit statuses under the options in `check --help`.
std::string check_footer() {
  return "Each property runs in a child process of its own, so that a crash, an exit() or a\n"
         "hang in the code under test ends only that property. A child that dies by a signal,\n"
         "exits without a result or runs past --timeout is one FAILED row (\"crashed: signal\n"
         "11 (SIGSEGV)\", \"exited with code 1 without a result\", \"timed out after 600 s\")\n"
         "with the last lines of its output, and the run goes on. Every failure prints the\n"
         "command that replays it (same seed and case count); a crash or a time-out also\n"
         "prints it with --in-process under gdb, which stops at the crash or lets you\n"
         "interrupt the hang.\n"
         "\n"
         "Shutdown: a process that crashes, exits with an unexpected status or hangs after it\n"
         "wrote its property's result (interpreter exit, CUDA teardown, a static destructor)\n"
         "keeps the property's own verdict; the way it ended is a shutdown finding, listed once\n"
         "per feature and way of ending after the table (which properties, the output's last\n"
         "lines, a command that replays one), in the --report's \"shutdown\" section, and it\n"
         "makes the exit status 1. A process still running --shutdown-grace seconds after its\n"
         "result is killed and recorded as hung at exit.\n"
         "\n"
         "Black-box instruments: the children run under offloadkit's driver-call interposer\n"
         "(liboffloadkit_interpose.so, looked for beside the command, in <prefix>/lib, and in\n"
         "the build tree; OFFLOADKIT_INTERPOSE_LIBRARY=PATH names it, =none turns it off),\n"
         "counting only, so that code calling CUDA itself is reached: the steady-state\n"
         "properties also count what it allocates from the driver (arena steady_state: device\n"
         "and pinned allocations, physical handles, reservations; region many_cycles: pinned\n"
         "allocations and reservations), and the race properties delay its own asynchronous\n"
         "copies and launches on its own streams by seeded amounts. The header says whether\n"
         "they are on (not with --in-process, nor in a sanitizer build).\n"
         "\n"
         "--python MODULE:FACTORY: the check runs as `python3 -m offloadkit check` with the\n"
         "same options, in the interpreter OFFLOADKIT_PYTHON names (else python3 on PATH), so\n"
         "that MODULE is imported with that interpreter's packages; its output and exit status\n"
         "are the command's, and its reproduce lines name that interpreter. It must import the\n"
         "offloadkit package of this version (`pip install --no-build-isolation .` from the\n"
         "checkout), else exit status 3.\n"
         "\n"
         "exit status of check: 0 all passed; 1 a property failed, crashed, exited early or timed\n"
         "out, or a process crashed or hung at exit after its result (a shutdown finding), or\n"
         "(--driver-faults) a case is not clean; 2 bad usage; 3 the executor cannot run here,\n"
         "or (--python) no interpreter with this offloadkit package can be started; 4 the\n"
         "plugin or Python implementation cannot be loaded or has nothing to run on this\n"
         "executor; 5 the --report file cannot be written (it is opened before anything runs);\n"
         "128+N interrupted by signal N (130 for Ctrl-C, after a table, and the report, of\n"
         "the properties that finished)\n";
}

/// The check command's options, read into `o` when the app parses.
std::unique_ptr<CLI::App> check_app(const std::string& program_name, check_options& o) {
  auto app = make_app("check",
                      "Runs every registered property battery and prints a table of the "
                      "results.",
                      check_footer(), program_name);
  app->add_option("--executor", o.executor,
                  "where to run (default auto: cuda when a GPU is usable)")
      ->type_name("auto|host|cuda")
      ->transform(one_of({"auto", "host", "cuda"}));
  app->add_option("--seed", o.seed, "seed for every property (default: a fresh one, printed)")
      ->type_name("N")
      ->transform(unsigned_range(1, UINT64_MAX));
  app->add_option("--cases", o.cases,
                  "run exactly N cases per property, fewer or more than its\nown count (N in 1.." +
                      std::to_string(max_cases) + "; default: each property's own)")
      ->type_name("N")
      ->transform(integer_range(1, max_cases));
  app->add_option("--feature", o.feature, "only this feature's properties (executor, stash, ...)")
      ->type_name("NAME");
  app->add_option("--implementation", o.implementation, "only this implementation's properties")
      ->type_name("NAME");
  app->add_option("--property", o.property, "only the properties with this name")
      ->type_name("NAME");
  app->add_option("--free-memory", o.free_memory,
                  "only the properties that read the device's free memory\n"
                  "(only), which fail when another process allocates on the\n"
                  "same GPU and so need it to themselves, or only the others\n"
                  "(without), which can run beside other work there")
      ->type_name("only|without")
      ->transform(one_of({"only", "without"}));
  app->add_flag("--no-shrink", "report a failing case as found, without shrinking it");
  app->add_option("--plugin", o.plugin,
                  "check the plugin library at PATH (offloadkit/plugin.h)\n"
                  "instead of offloadkit's own implementations: every\n"
                  "feature it provides, by the capabilities it declares")
      ->type_name("PATH");
  app->add_option("--python", o.python,
                  "check an implementation written in Python: the plugin\n"
                  "that MODULE.FACTORY() returns (MODULE: a module the\n"
                  "interpreter imports, or a .py file). Runs\n"
                  "`python3 -m offloadkit check` with these options in the\n"
                  "interpreter OFFLOADKIT_PYTHON names, else python3 on\n"
                  "PATH, which must have the offloadkit package of this\n"
                  "version (pip install --no-build-isolation .) (not with\n"
                  "--plugin)")
      ->type_name("MODULE:FACTORY");
  app->add_option("factory", o.factory_argument,
                  "the same as --python MODULE:FACTORY (the form `python -m\n"
                  "offloadkit check` takes)")
      ->type_name("MODULE:FACTORY");
  app->add_flag("--driver-faults", o.driver_faults,
                "with --plugin or --python, instead of the batteries: run\n"
                "each feature's scenario with the implementation's own\n"
                "N-th allocation or mapping call failed (CUDA runtime or\n"
                "driver, seen by a preloaded interposer), N = 0, 1, 2, ...\n"
                "each case in a child process, and classify every case:\n"
                "clean, retry failed, data lost, inconsistent, close\n"
                "failed, leak, exited, crashed, hung (cuda executor only)");
  app->add_option("--fault-call", o.fault_call, "with --driver-faults: run case N alone")
      ->type_name("N")
      ->transform(integer_range(0, max_cases));
  app->add_option("--timeout", o.timeout_s,
                  "stop a property still running after SECONDS, in 1.." +
                      std::to_string(max_timeout_s) + "\n(default " +
                      std::to_string(default_timeout_s) + ")")
      ->type_name("SECONDS")
      ->transform(integer_range(1, max_timeout_s));
  app->add_option("--shutdown-grace", o.shutdown_grace_s,
                  "how long a property's (or a fault case's) process may\n"
                  "take to exit after writing its result, in 1.." +
                      std::to_string(max_timeout_s) +
                      "; past it,\n"
                      "it is killed and recorded as hung at exit (default " +
                      std::to_string(default_shutdown_grace_s) + ")")
      ->type_name("SECONDS")
      ->transform(integer_range(1, max_timeout_s));
  app->add_flag("--in-process", o.in_process,
                "run the properties in this process, one after another:\n"
                "no isolation and no time limit, --timeout is ignored\n"
                "(for a debugger)");
  app->add_flag("--list", o.list, "list the selected properties instead of running them");
  app->add_option("--report", o.report,
                  "also write a conformance report into FILE, the format by\n"
                  "its extension: .md (Markdown), .json, .html (one page):\n"
                  "header, declared profiles, every property's verdict\n"
                  "and its evidence (or every --driver-faults case);\n"
                  "written when properties fail and when interrupted")
      ->type_name("FILE");
  // Only for the child a parent starts: no group, so not in the help.
  app->add_flag("--run-one", o.run_one)->group("");
  app->add_option("--result-fd", o.result_fd)->group("")->transform(integer_range(0, 1 << 20));
  return app;
}

}  // namespace

/// Parses the check command's arguments into `o` and checks how they combine. Returns false for
/// --help (the help text went to `help_out`); throws usage_error for anything it cannot act on.
bool parse_check_options(const std::vector<std::string>& args, const std::string& program_name,
                         std::ostream& help_out, check_options& o) {
  auto app = check_app(program_name, o);
  if (!parse_arguments(*app, args, help_out)) return false;
  if (app->count("--plugin") > 0) {
    if (o.plugin.empty()) throw usage_error("--plugin: needs the path of a plugin library");
    // Absolute, so that the reproduce commands and the children find it from anywhere.
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(o.plugin, ec);
    if (!ec) o.plugin = absolute.lexically_normal().string();
  }
  if (app->count("factory") > 0) {
    if (app->count("--python") > 0) {
      throw usage_error("MODULE:FACTORY: '" + o.factory_argument + "' and --python '" + o.python +
                        "' both name a factory: give one of them");
    }
    o.python = python_factory(o.factory_argument, "MODULE:FACTORY");
  }
  if (app->count("--python") > 0) o.python = python_factory(o.python, "--python");
  o.shrink = app->count("--no-shrink") == 0;
  o.timeout_given = app->count("--timeout") > 0;
  if (app->count("--report") > 0) {
    (void)report_format_of(o.report);  // a bad extension is bad usage, found here
    if (o.list) {
      throw usage_error(
          "--report writes the results of a run: --list runs nothing, give one of them");
    }
  }
  for (const char* name : forwarded_options) {
    const bool given =
        app->count(name) > 0 || (std::string(name) == "--python" && !o.python.empty());
    if (!given) continue;
    o.forwarded.emplace_back(name);
    if (std::string(name) == "--plugin") o.forwarded.push_back(o.plugin);
    if (std::string(name) == "--python") o.forwarded.push_back(o.python);
  }

  if (o.fault_call >= 0 && !o.driver_faults) {
    throw usage_error(
        "--fault-call N runs case N of --driver-faults alone: give --driver-faults too");
  }
  if (o.driver_faults) {
    if (o.plugin.empty() && o.python.empty()) {
      throw usage_error(
          "--driver-faults fails the CUDA calls that a plugin makes itself: give --plugin LIB or "
          "--python MODULE:FACTORY (offloadkit's own implementations allocate through the "
          "executor, whose faults the batteries already inject)");
    }
    if (o.seed != 0 || o.cases != 0 || !o.implementation.empty() || !o.property.empty() ||
        !o.free_memory.empty() || !o.shrink || o.in_process || o.list) {
      throw usage_error(
          "--driver-faults runs one fixed scenario per feature, each case in a child process: "
          "--seed, --cases, --implementation, --property, --free-memory, --no-shrink, "
          "--in-process and --list do not apply to it");
    }
  }
  if (!o.plugin.empty() && !o.python.empty()) {
    throw usage_error(
        "--plugin and --python cannot be used together: --python runs its factory through "
        "offloadkit's Python bridge, which is itself the plugin; give one of them");
  }
  if (o.run_one != (o.result_fd >= 0)) {
    throw usage_error(
        "--run-one and --result-fd go together: they are how a parent check runs one "
        "property in a child process");
  }
  return true;
}

}  // namespace detail

bool parse_check_arguments(const std::vector<std::string>& args, std::ostream& help_out) {
  detail::check_options opt;
  return detail::parse_check_options(args, "offloadkit", help_out, opt);
}

}  // namespace offloadkit::tools
