// What every subcommand of the offloadkit command shares: the exit statuses, the exceptions that
// map onto them, and the CLI11 set-up (help layout, numbers checked strictly against their valid
// range, errors on stderr as `offloadkit <command>: <option>: <value> ... valid ...`).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"

namespace offloadkit::tools {

/// Exit statuses of every subcommand (`offloadkit help` and the README list them).
namespace exit_status {
constexpr int ok = 0;
constexpr int check_failed = 1;  ///< a property failed, restored bytes differ, analysis below limit
constexpr int usage = 2;         ///< unknown option, bad or out-of-range value
constexpr int unavailable = 3;   ///< the executor, the GPU or CUPTI cannot run here
constexpr int plugin = 4;        ///< a plugin or Python implementation cannot be used
constexpr int input = 5;         ///< an input file cannot be read or is invalid
constexpr int overflow = 6;      ///< replay: a pool overflows
constexpr int signal_base = 128;  ///< + N: interrupted by signal N, as a shell reports it
}  // namespace exit_status

/// The exit statuses as `offloadkit help` prints them, one per line.
std::string exit_status_text();

/// A command line the program cannot act on; the message names the bad value and the valid ones.
/// Exit status exit_status::usage.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The failures every command maps onto an exit status (run_guarded) are the
// library's own, from offloadkit/error.hpp: unavailable_error (exit_status::unavailable),
// plugin_unusable (exit_status::plugin), input_error (exit_status::input).
using ::offloadkit::input_error;
using ::offloadkit::plugin_unusable;
using ::offloadkit::unavailable_error;

// ---- CLI11 --------------------------------------------------------------------------------------

/// An App for `<program> <command>` (`<program>` alone for an empty command) with the project's
/// help layout: lower-case headings, each option with the name of its value and no CLI11 type
/// decorations, -h/--help, `footer` (notes, exit statuses) after the options.
std::unique_ptr<CLI::App> make_app(const std::string& command, const std::string& description,
                                   const std::string& footer = "",
                                   const std::string& program = "offloadkit");

/// Parses `args` (the arguments after the command's name). Returns false when --help was given:
/// the help text was written to `help_out` and nothing else is to be done. Throws usage_error with
/// the project's wording for every error CLI11 reports and for arguments the app does not know.
bool parse_arguments(CLI::App& app, const std::vector<std::string>& args, std::ostream& help_out);

/// For a program without subcommands (`make_app("", description, footer, program)`, as the
/// benchmarks use): parses argv[1..]. Returns -1 when the program is to go on; exit_status::ok
/// when --help was given (the help went to `out`); exit_status::usage when the command line is
/// bad, after `<program>: <what is wrong>` and where the usage is shown went to `err`.
int parse_program_arguments(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                            std::ostream& err);

/// The options every benchmark takes: `--executor cuda|host` (into `executor`, cuda unless given)
/// and `--json FILE` (into `path`: the figures as JSON too).
CLI::Option* add_executor_option(CLI::App& app, std::string& executor);
CLI::Option* add_json_option(CLI::App& app, std::string& path);

/// The executor a benchmark's `--executor` names: a host_executor for "host", a cuda_executor for
/// "cuda". Where no GPU is usable (cuda_unavailable_reason()), returns null with the reason in
/// `skipped`: the benchmark then says "skipped: <reason>" and exits 0, as every offloadkit binary
/// starts (and its GPU parts skip) without a driver. A GPU that is there but fails is an error:
/// what the cuda executor throws goes to the caller. Any other name throws usage_error.
std::unique_ptr<executor> benchmark_executor(const std::string& name, std::string& skipped);

/// `text` as a JSON string, quotes included and every character that needs it escaped (for a
/// command line or an error message written into a benchmark's JSON); bytes that are not UTF-8
/// become U+FFFD.
std::string json_string(const std::string& text);

/// Validators that check a value against its valid range and rewrite it in the one form CLI11
/// then converts exactly (decimal digits: CLI11 alone would wrap "-5" into an unsigned option,
/// read "010" as octal and "1e3" nowhere consistently). Messages:
/// "'1e3' is not an integer: valid range 1..1000000", "2 is out of range: valid range 0..1".
CLI::Validator integer_range(std::int64_t lo, std::int64_t hi);
CLI::Validator unsigned_range(std::uint64_t lo, std::uint64_t hi);
/// A finite decimal number in [lo, hi] (in (lo, hi] with `lo_open`), `unit` after the range.
CLI::Validator real_range(double lo, double hi, bool lo_open = false, const std::string& unit = "");
/// One of `values`: "'bogus' is not one of the valid values auto, host, cuda".
CLI::Validator one_of(const std::vector<std::string>& values);

/// Parses `text` as a decimal unsigned integer in [lo, hi] (digits only, as unsigned_range
/// accepts): returns an empty string and sets `out`, or unsigned_range's message saying why not.
std::string parse_unsigned(const std::string& text, std::uint64_t lo, std::uint64_t hi,
                           std::uint64_t& out);

/// `what` without the source location " (path/file.cpp:123)" that library errors end with for
/// developers: users of the command get the message alone.
std::string without_location(std::string what);

/// The names of the options `app` shows in its help ("--executor, --seed, ..."), for messages.
std::string option_names(const CLI::App& app);

/// Runs `body` and turns what it throws into the exit status and a line on stderr
/// (`offloadkit <command>: <what>`, usage errors followed by where the usage is shown):
/// usage_error 2, unavailable_error 3, plugin_unusable 4, input_error 5, std::bad_alloc 3 ("out of
/// memory: ..."), any other exception 1. The one place where errors become exit statuses.
int run_guarded(const std::string& command, const std::function<int()>& body);

}  // namespace offloadkit::tools
