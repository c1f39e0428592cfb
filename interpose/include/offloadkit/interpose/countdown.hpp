// The countdown: run a piece of code under the interposer with call N armed to fail, for N = 0, 1,
// 2, ... each in a fresh process, until a run reaches no call N, and classify how each case
// ended. The caller starts the processes (countdown_case_environment() is what each needs); this
// file reads what they leave behind (the interposer's report, the scenario's result) and decides.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace offloadkit::interpose {

/// What the code under test holds according to the interposer's ledger (negative: released more
/// than the window saw created).
struct outstanding_resources {
  std::int64_t physical_handles = 0;
  std::int64_t reservations = 0;
  std::int64_t mapped_bytes = 0;
  std::int64_t device_allocations = 0;
  std::int64_t device_bytes = 0;
  std::int64_t pinned_allocations = 0;
  std::int64_t pinned_bytes = 0;
};

struct function_counts {
  std::uint64_t calls = 0;
  std::uint64_t failed = 0;  ///< injected failures
  std::uint64_t errors = 0;  ///< failures the driver itself returned
};

/// The interposer's report (offloadkit/interpose/control.h), parsed.
struct interposer_report {
  /// "injected" (written at the failure: the process may have died right after), "requested"
  /// or "exit" (written at the end: the ledger is complete).
  std::string reason;
  std::optional<std::uint64_t> armed_call;
  std::uint64_t counted_calls = 0;
  /// The injected failure, if call N was reached: its function and the error it returned.
  std::optional<std::string> failed_function;
  int failed_error = 0;
  std::map<std::string, function_counts> functions;
  outstanding_resources outstanding;
  std::uint64_t untracked_releases = 0;
  std::uint64_t table_full = 0;

  /// Written at the end of the run (on request or at exit), so the ledger is complete.
  [[nodiscard]] bool complete() const { return reason == "requested" || reason == "exit"; }
  /// Throws std::runtime_error naming what is wrong with the JSON `text`.
  static interposer_report parse(const std::string& text);
};

/// Reads the report at `path`; nullopt when there is none; throws std::runtime_error when it
/// cannot be parsed.
std::optional<interposer_report> read_report(const std::string& path);

/// One sentence naming what is still held ("1 physical allocation handle(s) created and never
/// released, 2097152 mapped byte(s) not unmapped"), or an empty string when nothing is.
std::string describe_leak(const outstanding_resources& o);

/// What `before` held and `after` no longer holds, field by field (negative differences count as
/// nothing released).
outstanding_resources released_between(const outstanding_resources& before,
                                       const outstanding_resources& after);

/// One phrase naming what `o` counts ("1 device allocation(s) (2097152 bytes), 3 pinned host
/// allocation(s) (12288 bytes)"), or an empty string when it counts nothing.
std::string describe_resources(const outstanding_resources& o);

/// What a scenario says about its own run (offloadkit's own scenarios write it; a black box writes
/// nothing and is judged by its exit status).
struct scenario_result {
  std::string feature;
  std::string implementation;
  /// The step during which the injected failure happened, and the error the caller saw (empty
  /// when the implementation absorbed it).
  std::string failed_step;
  std::string error;        ///< "cuda_error: ..." as the caller caught it
  bool typed_error = true;  ///< the error was one of offloadkit's typed exceptions
  bool retried = false;
  bool retry_ok = true;
  std::string retry_error;
  bool data_ok = true;
  bool consistent = true;
  /// Sentences for people: what differed, what state was wrong.
  std::vector<std::string> problems;
  /// The teardown failures of the implementation's objects (a close that returned an error, ABI
  /// 1.2), one per line; empty when every object went cleanly.
  std::string close_error;
  /// What a framework's caches held at the end of the scenario and gave back when asked (the
  /// plugin's release_cached_memory, ABI 1.3), before the ledger was read: not a leak. Empty
  /// when nothing was asked or nothing was held.
  std::string framework_cache;
  /// Why the scenario could not run at all (the interposer is not loaded, ...); empty otherwise.
  std::string unusable;

  [[nodiscard]] std::string to_json() const;
  static scenario_result from_json(const std::string& text);
};

/// How a case's process ended.
struct process_end {
  enum class how { exited, signaled, timed_out };
  how end = how::exited;
  int exit_code = 0;
  int signal = 0;
  std::string signal_name;  ///< "SIGSEGV"
  int timeout_s = 0;        ///< the limit a timed-out process ran past
  /// timed_out only: it was stopped `grace_s` after it wrote its result (a hang on its way out),
  /// not at the time limit.
  bool past_grace = false;
  int grace_s = 0;
  std::string output;  ///< the tail of its stdout and stderr
  double seconds = 0;
};

/// What a case left behind.
struct case_run {
  process_end process;
  std::optional<scenario_result> scenario;
  std::optional<interposer_report> report;
  /// The report could not be read: why.
  std::string report_error;
};

enum class fault_class {
  clean,         ///< a typed error (or none), the retry worked, the data is intact, nothing leaked
  retry_failed,  ///< the error was clean but the retry failed too
  data_lost,     ///< bytes differ from what was handed over
  inconsistent,  ///< the object was left in a state its contract rules out
  close_failed,  ///< destroying an object failed: its close returned an error
  leak,          ///< the ledger holds what was created and never released
  exited,        ///< the process exited on its own (exit(1) on an out-of-memory)
  crashed,       ///< the process died by a signal
  hung,          ///< the process ran past the time limit
  unknown,       ///< the run cannot be judged (no report, an unusable scenario)
};

const char* to_string(fault_class c) noexcept;

/// One class that applies to a case, with what shows it.
struct fault_finding {
  fault_class cls = fault_class::unknown;
  std::string detail;
};

struct case_row {
  std::uint64_t n = 0;
  /// The failed call ("cuMemMap"), or empty for the last run, which reached no call N.
  std::string call;
  /// The first class that applies (an early exit, then data lost, a failed retry, an
  /// inconsistent state, a failed close, then the ledger's leak), and what shows it; `detail`
  /// ends with every other class that applies ("; also leak: ...").
  fault_class cls = fault_class::unknown;
  std::string detail;
  /// Every other class that applies to the case, in the same order: a case can fail its retry
  /// and leak. The ledger is read for every case whose process ended on its own.
  std::vector<fault_finding> also;
  /// How the process ended after its scenario wrote its result, when not with exit status 0
  /// ("crashed: signal 11 (SIGSEGV) after its result"): a shutdown finding, apart from the class,
  /// which the result decides. Empty otherwise.
  std::string shutdown;
  std::string output;  ///< the tail of the process's output, shown for rows that are not clean
  double seconds = 0;
};

/// Judges case `n` by how its process ended, what its scenario said (when it wrote a result: a
/// black box is judged by its exit status) and the interposer's ledger, and reports every class
/// that applies (cls, then also). The run that reached no call N is judged the same way: a leak
/// or a failed check there needs no fault at all. A case whose scenario wrote its result is
/// classified by that result even when its process then crashed, hung or exited non-zero: that
/// end is the row's `shutdown`, a finding of its own (its ledger, when the crash left it
/// unfinished, is not judged, and the detail says so).
case_row classify(std::uint64_t n, const case_run& run);

struct countdown_result {
  std::vector<case_row> rows;
  /// The count ended at a run that reached no call N (false: stopped early, `stopped` says why).
  bool complete = false;
  std::string stopped;
  /// Calls numbered in the last run: how many cases a complete count has (plus the last run).
  std::uint64_t calls = 0;
};

/// Runs case n = 0, 1, 2, ... through `run_case` until one reaches no call n, one leaves no report
/// (whether it reached call n cannot be told), `max_cases` have run, or `run_case` returns
/// nullopt (interrupted). With `only` set, runs that case alone. `on_row` sees each row as it is
/// decided.
countdown_result run_countdown(
    const std::function<std::optional<case_run>(std::uint64_t n)>& run_case,
    std::uint64_t max_cases, std::optional<std::uint64_t> only,
    const std::function<void(const case_row&)>& on_row);

/// The variables a case's process needs (NAME=VALUE): the interposer preloaded ahead of any
/// LD_PRELOAD of this process, call `n` armed, the report at `report_path` (remove it and its
/// claim, `report_path` + OKIT_INTERPOSE_CLAIM_SUFFIX, before each case), the window closed until
/// the scenario opens it when `window_closed`.
std::vector<std::string> countdown_case_environment(const std::string& interposer, std::uint64_t n,
                                                    const std::string& report_path,
                                                    bool window_closed,
                                                    const std::string& kinds = "acquire");

/// The first of `candidates` that is a readable file, or an empty string.
std::string find_interposer(const std::vector<std::string>& candidates);

/// A table of the rows (N, failed call, class, detail) and a line of counts per class.
void print_countdown_table(std::ostream& os, const std::vector<case_row>& rows);

/// Whether every row is clean.
bool all_clean(const std::vector<case_row>& rows);

}  // namespace offloadkit::interpose
