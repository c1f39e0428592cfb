// `offloadkit check --report FILE`: the conformance report a maintainer attaches to a bug report.
// The parent of a check run writes it (never a child), from what the run printed: a header
// (version, command line, time, host, executor, seed, subject), the declared profile of every
// implementation checked, every property's verdict with its evidence, and the counts; for
// --driver-faults, every case of the countdown per feature. The file's extension picks the format:
// Markdown (.md), JSON
// (.json) or one self-contained HTML page (.html).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "offloadkit/interpose/countdown.hpp"
#include "offloadkit/testing/check.hpp"

namespace offloadkit::tools {

enum class report_format { markdown, json, html };

/// The format the extension of `path` names. Throws usage_error naming --report, the value and the
/// valid extensions for any other.
report_format report_format_of(const std::string& path);

/// The --report file, opened (created, or emptied) when constructed, so that a path that cannot be
/// written is found before anything runs, and written once the run ends.
class report_file {
 public:
  /// Throws usage_error for an extension that names no format and input_error (exit status 5) for
  /// a file that cannot be opened for writing, both naming --report and the path.
  explicit report_file(std::string path);
  ~report_file();
  report_file(const report_file&) = delete;
  report_file& operator=(const report_file&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] report_format format() const { return format_; }
  /// Replaces the file's contents with `text`. Throws input_error naming the path when it fails.
  void write(const std::string& text);

 private:
  std::string path_;
  report_format format_;
  int fd_ = -1;
};

/// Writes `text` into `file` at the end of a run whose exit status is `status` and says where on
/// `out`; returns the status the command ends with: `status`, or exit_status::input where the
/// file cannot be written and the run was otherwise clean (the reason goes to `err`, after
/// `prefix`, either way: a failed property is not hidden behind a report that failed too).
int finish_report(report_file& file, const std::string& text, int status, const std::string& prefix,
                  std::ostream& out, std::ostream& err);

/// What every report starts with.
struct report_header {
  std::string version;                ///< offloadkit's version
  std::string command_line;           ///< the command as given, each argument one shell word
  std::string date_utc;               ///< when the run started, "2026-01-31 12:00:00 UTC"
  std::string host;                   ///< the host name
  std::string executor;               ///< "host" or "cuda"
  std::string executor_why;           ///< why it was chosen ("asked for with --executor host")
  std::optional<std::uint64_t> seed;  ///< the properties' seed (none for --driver-faults)
  bool seed_fresh = false;            ///< drawn for this run, not given with --seed
  std::string cases;                  ///< the case count: "3 per property", "each property's own"
  std::string subject_kind;           ///< "built-in", "plugin" or "python"
  std::string subject;    ///< "offloadkit's own implementations", the plugin path, MODULE:FACTORY
  std::string isolation;  ///< how the properties or cases ran ("each in a child process, ...")
};

/// The header's fields every command knows: version, command line, date and host name. The
/// command line is `program command... args...` with every word quoted for a shell where needed.
report_header common_report_header(const std::string& program,
                                   const std::vector<std::string>& command,
                                   const std::vector<std::string>& args);

/// `s` as one shell word (quoted where it needs to be).
std::string shell_quote(const std::string& s);

/// One implementation's declared profile.
struct report_profile {
  std::string feature;
  std::string implementation;
  profile_flags flags;  ///< empty: it declares none (offloadkit's own executor and traces)
};

/// The profiles of the implementations `cases` check, one per feature and implementation, in the
/// order they first appear.
std::vector<report_profile> profiles_of(const std::vector<check_case>& cases);

/// One property's verdict and its evidence.
struct report_row {
  check_outcome outcome;
  double seconds = 0;
  /// How its process ended when that was not by reporting a result ("crashed: signal 11
  /// (SIGSEGV)"); empty otherwise.
  std::string abnormal_end;
  bool has_result = true;  ///< false: the process ended before it reported an outcome
  /// How its process ended after it reported its outcome, when not as it should ("crashed:
  /// signal 11 (SIGSEGV) after its result"): a shutdown finding, never the row's verdict.
  std::string shutdown;
  std::string output;     ///< the last lines of its output (failures and shutdown findings only)
  std::string reproduce;  ///< the command that replays it (failures and shutdown findings only)
  std::string debug;      ///< the same under a debugger, for an abnormal end
};

/// The verdict of a row as the report words it: "holds", "fails", "not applicable", "skipped".
std::string verdict_of(const report_row& row);

struct check_report {
  report_header header;
  std::vector<report_profile> profiles;
  std::vector<report_row> rows;
  std::size_t selected = 0;        ///< properties selected to run (rows may be fewer: `stopped`)
  std::vector<std::string> notes;  ///< "stash: not provided by the plugin", ...
  double seconds = 0;
  std::string stopped;  ///< why the run ended early ("interrupted by SIGINT"); empty otherwise
  /// The properties ran in processes of their own, so that how each exited was seen (not with
  /// --in-process): the report's "shutdown" section says whether every one exited cleanly.
  bool shutdown_observed = false;
};

/// The shutdown findings of a run: per feature and way of ending, the rows whose processes ended
/// that way after their results, of how many rows of the feature ran in a process.
struct report_shutdown_finding {
  std::string feature;
  std::string end;  ///< "crashed: signal 11 (SIGSEGV) after its result"
  std::vector<std::string> properties;
  std::size_t of = 0;
  std::string output;     ///< the first one's last lines
  std::string reproduce;  ///< the first one's replay command
};
std::vector<report_shutdown_finding> shutdown_findings_of(const std::vector<report_row>& rows);

/// The shutdown findings of one feature's countdown: per way of ending after the result, the
/// cases (N) whose processes ended that way, of how many cases ran.
struct fault_shutdown_finding {
  std::string end;  ///< "crashed: signal 11 (SIGSEGV) after its result"
  std::vector<std::uint64_t> cases;
  std::size_t of = 0;
  /// The case that reached no call N (no failure injected) is one of them: the implementation's
  /// shutdown fails on its own, not because of a fault.
  bool without_fault = false;
  std::size_t first = 0;  ///< the index of the first such row
};
std::vector<fault_shutdown_finding> fault_shutdown_findings(
    const std::vector<interpose::case_row>& rows);
/// "2 of 3 cases (N=0, 2) crashed: ... after its result, including the case with no failure
/// injected (the implementation's shutdown, whatever the fault)".
std::string fault_shutdown_text(const fault_shutdown_finding& f);

/// One feature's countdown under --driver-faults.
struct fault_report_feature {
  std::string feature;
  std::string implementation;
  std::string scenario;  ///< what the scenario does
  profile_flags profile;
  std::vector<interpose::case_row> rows;
  std::vector<std::string> reproduce;  ///< one per row: the command that reruns that case
  bool complete = false;
  std::string stopped;  ///< why the count ended early, when it did
};

struct fault_report {
  report_header header;
  std::string interposer;  ///< the interposer library preloaded into every case
  std::vector<fault_report_feature> features;
  std::vector<std::string> notes;
  double seconds = 0;
  std::string stopped;
};

/// The report in `format`.
std::string render_report(const check_report& report, report_format format);
std::string render_report(const fault_report& report, report_format format);

}  // namespace offloadkit::tools
