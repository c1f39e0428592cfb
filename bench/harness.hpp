// What every benchmark shares: its command line (the project's CLI11 wrapper with --executor,
// cuda unless given, and --json FILE), "skipped: <reason>" and exit 0 where no GPU is usable, the
// limits it measures in the same run (the best of N plain pinned copies), the statistic and ratio
// its figures report, the JSON file of its figures, and its exit statuses: 0 ok or skipped, 1 a
// result was wrong or the run failed (or --json could not be written), 2 bad usage.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "offloadkit/executor.hpp"

namespace offloadkit::bench {

/// A benchmark's JSON document; keys keep the order they were added in.
using json = nlohmann::ordered_json;

/// A benchmark's command line: `--help`, `--executor cuda|host` (cuda unless given: a host figure
/// is no GPU figure), the benchmark's own options (added to app()), then `--json FILE`.
class command_line {
 public:
  /// `program` names the binary in the usage and in messages; `footer` gives the exit statuses.
  command_line(std::string program, const std::string& description, const std::string& footer);
  // The options hold references to the members.
  command_line(const command_line&) = delete;
  command_line& operator=(const command_line&) = delete;

  /// Where the benchmark adds its own options.
  CLI::App& app() { return *app_; }
  /// `--executor`, for a benchmark that says more about it in its help.
  CLI::Option& executor_option() { return *executor_option_; }

  /// Parses argv[1..] (adding --json after the benchmark's own options), then runs `body`. Returns
  /// exit_status::ok after --help (the help on stdout) and exit_status::usage after a bad command
  /// line (`<program>: <what is wrong>` and where the usage is shown, on stderr), without running
  /// `body`; otherwise `body`'s status, or for what it throws a line `<program>: <what>` on stderr
  /// and exit_status::usage (tools::usage_error, followed by where the usage is shown) or
  /// exit_status::check_failed (any other exception).
  int run(int argc, const char* const* argv, const std::function<int()>& body);

  /// The executor --executor names: null where it is cuda and no GPU is usable, with the reason
  /// in `skipped` (the benchmark then says so with skip()). A GPU that is there but fails throws.
  std::unique_ptr<executor> make_executor(std::string& skipped) const;

  /// "cuda" or "host".
  const std::string& executor_name() const { return executor_; }
  /// The file --json names; empty without --json.
  const std::string& json_path() const { return json_; }
  /// argv joined by spaces, recorded with the figures.
  const std::string& command() const { return command_; }

  /// Says `skipped: <why>` on stdout and returns exit_status::ok: a benchmark that cannot run here
  /// (no usable GPU) succeeds, as every offloadkit binary starts without a driver. With --json it
  /// writes `doc` (by default the program's name) with "command" and "skipped" added, so that a
  /// script reading the file learns why there are no figures; a file that cannot be written throws
  /// (write_json), as it would after a run.
  int skip(const std::string& why, json doc = json::object()) const;

 private:
  std::string program_;
  std::string executor_ = "cuda";
  std::string json_;
  std::string command_;
  std::unique_ptr<CLI::App> app_;
  CLI::Option* executor_option_ = nullptr;
};

/// For a benchmark of the GPU itself (its own kernels, cuBLAS calls): why it cannot run with the
/// executor `executor_name` names (`host_reason` for host, "no usable GPU: <reason>" for cuda
/// where no GPU is usable), or an empty string where it can.
std::string gpu_only_skip_reason(const std::string& executor_name, const std::string& host_reason);

/// Writes `doc` to `path`, indented, bytes that are not UTF-8 as U+FFFD and numbers that are not
/// finite as null. Throws input_error `--json <path>: cannot write the file: <why>`.
void write_json(const std::string& path, const json& doc);

/// The median of `x` (not empty); of an even count, the upper of the two middle values.
inline double median(std::vector<double> x) {
  const auto mid = x.begin() + static_cast<std::ptrdiff_t>(x.size() / 2);
  std::nth_element(x.begin(), mid, x.end());
  return *mid;
}

/// `figure / limit`, or 0 where `limit` is not positive (not measured).
inline double ratio(double figure, double limit) { return limit > 0 ? figure / limit : 0; }

/// Seconds of the fastest of `reps` runs of `run`, each timed from its start to its return (`run`
/// waits for what it issues).
template <class Run>
double best_of(int reps, Run&& run) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

/// The one-way pinned limit, measured in the same run as the figures it bounds: bytes per second
/// of the best of `reps` plain copies of `bytes` between a new device buffer (filled first) and a
/// new pinned buffer on a new stream, each timed from its issue to the stream's synchronization.
double pinned_copy_bandwidth(executor& ex, std::size_t bytes, bool to_host, int reps);

}  // namespace offloadkit::bench
