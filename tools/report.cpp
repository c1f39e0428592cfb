// The conformance report (report.hpp): one model per kind of run, rendered as Markdown, JSON or
// HTML. The three formats say the same things in the same order, so that a report attached in any
// of them can be read against the others.
// The writers of the formats are report_markdown.cpp, report_json.cpp and report_html.cpp
// (report_writers.hpp); here are the model, what they share, and the file.
#include "report.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_common.hpp"
#include "offloadkit/detail/text.hpp"
#include "report_writers.hpp"

#ifndef OFFLOADKIT_VERSION
#define OFFLOADKIT_VERSION "unknown"
#endif

namespace offloadkit::tools {
namespace {

using ::offloadkit::detail::join;

constexpr std::array<std::pair<const char*, report_format>, 3> extensions = {{
    {".md", report_format::markdown},
    {".json", report_format::json},
    {".html", report_format::html},
}};

}  // namespace

namespace detail {

std::string seconds_text(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 10 ? 1 : 0) << s << " s";
  return os.str();
}

/// The cases column: run of planned, "-" where none ran or none was reported.
std::string cases_text(const report_row& row) {
  const auto& o = row.outcome;
  if (o.skipped) return "-";
  const std::string planned = std::to_string(o.cases_planned);
  return row.has_result ? std::to_string(o.cases_run) + " of " + planned : "- of " + planned;
}

/// How far a failing property got: "failed at case 2 of 3", "5 of 5 run", "3 planned, none
/// reported".
std::string failure_cases_text(const report_row& row) {
  const auto& o = row.outcome;
  const std::string planned = std::to_string(o.cases_planned);
  if (!row.has_result) return planned + " planned, none reported";
  if (row.abnormal_end.empty())
    return "failed at case " + std::to_string(o.cases_run) + " of " + planned;
  return std::to_string(o.cases_run) + " of " + planned + " run";
}

// ---- counts ----------------------------------------------------------------------------------

verdict_counts count_verdicts(const std::vector<report_row>& rows) {
  verdict_counts c;
  for (const auto& row : rows) {
    const auto& o = row.outcome;
    if (o.passed) {
      ++c.holds;
    } else if (o.not_applicable) {
      ++c.not_applicable;
    } else if (o.skipped) {
      ++c.skipped;
    } else {
      ++c.fails;
    }
  }
  return c;
}

/// "region: 9 of 9 properties' processes crashed: signal 11 (SIGSEGV) after its result".
std::string shutdown_text(const report_shutdown_finding& f) {
  return f.feature + ": " + std::to_string(f.properties.size()) + " of " + std::to_string(f.of) +
         " properties' processes " + f.end;
}

std::string summary_line(const check_report& r) {
  const verdict_counts c = count_verdicts(r.rows);
  const auto shutdown = shutdown_findings_of(r.rows);
  std::string s = std::to_string(c.holds) + " hold, " + std::to_string(c.fails) + " fail, " +
                  std::to_string(c.not_applicable) + " not applicable, " +
                  std::to_string(c.skipped) + " skipped (" + std::to_string(r.rows.size()) +
                  " properties";
  if (r.rows.size() != r.selected) s += " of " + std::to_string(r.selected) + " selected";
  s += ", " + seconds_text(r.seconds) + ")";
  for (const auto& f : shutdown) s += "; shutdown: " + shutdown_text(f);
  if (!r.stopped.empty()) s += "; the run stopped early: " + r.stopped;
  return s;
}

/// Cases per class, in the order the classes are declared.
std::vector<std::pair<std::string, std::size_t>> class_counts(
    const std::vector<interpose::case_row>& rows) {
  std::map<int, std::size_t> by_class;
  for (const auto& row : rows) ++by_class[static_cast<int>(row.cls)];
  std::vector<std::pair<std::string, std::size_t>> out;
  out.reserve(by_class.size());
  for (const auto& [cls, n] : by_class) {
    out.emplace_back(interpose::to_string(static_cast<interpose::fault_class>(cls)), n);
  }
  return out;
}

std::string class_counts_text(const std::vector<interpose::case_row>& rows) {
  std::vector<std::string> parts;
  for (const auto& [name, n] : class_counts(rows)) parts.push_back(std::to_string(n) + " " + name);
  return parts.empty() ? "no case" : join(parts, ", ");
}

bool all_rows_clean(const fault_report& r) {
  for (const auto& f : r.features) {
    if (!interpose::all_clean(f.rows)) return false;
    if (!f.complete && !f.stopped.empty() && f.stopped != "interrupted") return false;
  }
  return true;
}

std::string summary_line(const fault_report& r) {
  std::size_t cases = 0;
  std::vector<interpose::case_row> all;
  for (const auto& f : r.features) {
    cases += f.rows.size();
    all.insert(all.end(), f.rows.begin(), f.rows.end());
  }
  std::string s = std::to_string(cases) + " case(s) in " + std::to_string(r.features.size()) +
                  " feature(s), " + seconds_text(r.seconds) + ": " +
                  (all_rows_clean(r) ? "every case clean" : "NOT every case clean") + " (" +
                  class_counts_text(all) + ")";
  for (const auto& f : r.features) {
    for (const auto& finding : fault_shutdown_findings(f.rows)) {
      s += "; shutdown: " + f.feature + ": " + fault_shutdown_text(finding);
    }
  }
  if (!r.stopped.empty()) s += "; the run stopped early: " + r.stopped;
  return s;
}

// ---- the header ------------------------------------------------------------------------------

std::vector<header_field> header_fields(const report_header& h) {
  std::vector<header_field> f = {
      {"offloadkit", h.version},
      {"command", h.command_line, true},
      {"date", h.date_utc},
      {"host", h.host},
      {"executor", h.executor + " (" + h.executor_why + ")"},
  };
  if (h.seed) {
    f.push_back({"seed", std::to_string(*h.seed) +
                             (h.seed_fresh ? " (fresh: --seed " + std::to_string(*h.seed) +
                                                 " replays the run)"
                                           : " (given with --seed)")});
  }
  f.push_back({"cases", h.cases});
  f.push_back({"subject", h.subject_kind + ": " + h.subject});
  f.push_back({"isolation", h.isolation});
  return f;
}

}  // namespace detail

using detail::render_html;
using detail::render_json;
using detail::render_markdown;

std::vector<report_shutdown_finding> shutdown_findings_of(const std::vector<report_row>& rows) {
  std::vector<report_shutdown_finding> out;
  for (const auto& row : rows) {
    if (row.shutdown.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(), [&row](const report_shutdown_finding& f) {
      return f.feature == row.outcome.feature && f.end == row.shutdown;
    });
    if (it == out.end()) {
      report_shutdown_finding f;
      f.feature = row.outcome.feature;
      f.end = row.shutdown;
      f.output = row.output;
      f.reproduce = row.reproduce;
      it = out.insert(out.end(), std::move(f));
    }
    it->properties.push_back(row.outcome.name);
  }
  for (auto& f : out) {
    // The properties of the feature that ran to a result in a process of their own.
    f.of = static_cast<std::size_t>(std::count_if(rows.begin(), rows.end(), [&f](const auto& r) {
      return r.outcome.feature == f.feature && r.has_result && !r.outcome.not_applicable;
    }));
  }
  return out;
}

std::vector<fault_shutdown_finding> fault_shutdown_findings(
    const std::vector<interpose::case_row>& rows) {
  std::vector<fault_shutdown_finding> out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    if (row.shutdown.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(), [&row](const fault_shutdown_finding& f) {
      return f.end == row.shutdown;
    });
    if (it == out.end()) {
      fault_shutdown_finding f;
      f.end = row.shutdown;
      f.first = i;
      f.of = rows.size();
      it = out.insert(out.end(), std::move(f));
    }
    it->cases.push_back(row.n);
    if (row.call.empty()) it->without_fault = true;
  }
  return out;
}

std::string fault_shutdown_text(const fault_shutdown_finding& f) {
  std::vector<std::string> n;
  n.reserve(f.cases.size());
  for (const auto c : f.cases) n.push_back(std::to_string(c));
  return std::to_string(f.cases.size()) + " of " + std::to_string(f.of) +
         " cases' processes (N=" + join(n, ", ") + ") " + f.end +
         (f.without_fault ? ", including the case with no failure injected (the implementation's "
                            "shutdown, whatever the fault)"
                          : ", only cases with a failure injected (the fault may be its cause)");
}

// ---- the file --------------------------------------------------------------------------------

report_format report_format_of(const std::string& path) {
  for (const auto& [extension, format] : extensions) {
    const std::string e = extension;
    if (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0) {
      return format;
    }
  }
  std::vector<std::string> valid;
  valid.reserve(extensions.size());
  for (const auto& entry : extensions) valid.emplace_back(entry.first);
  throw usage_error("--report: '" + path +
                    "' does not end in a report format's extension: valid extensions are " +
                    join(valid) + " (Markdown, JSON, one HTML page)");
}

report_file::report_file(std::string path) : path_(std::move(path)) {
  format_ = report_format_of(path_);
  // Close-on-exec: the properties' children must not hold it.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    throw input_error("--report: cannot open '" + path_ + "' for writing: " + std::strerror(errno));
  }
}

report_file::~report_file() {
  if (fd_ >= 0) ::close(fd_);
}

void report_file::write(const std::string& text) {
  auto fail = [this](const char* step) {
    throw input_error("--report: cannot write '" + path_ + "' (" + step +
                      "): " + std::strerror(errno));
  };
  if (::ftruncate(fd_, 0) != 0) fail("truncate");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n =
        ::pwrite(fd_, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    done += static_cast<std::size_t>(n);
  }
}

int finish_report(report_file& file, const std::string& text, int status, const std::string& prefix,
                  std::ostream& out, std::ostream& err) {
  try {
    file.write(text);
  } catch (const input_error& e) {
    err << prefix << e.what() << "\n";
    return status == exit_status::ok ? exit_status::input : status;
  }
  out << "report: " << file.path() << "\n";
  return status;
}

// ---- the model -------------------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) ||
           std::string("-_./=:,+@%").find(ch) != std::string::npos;
  });
  if (plain) return s;
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

report_header common_report_header(const std::string& program,
                                   const std::vector<std::string>& command,
                                   const std::vector<std::string>& args) {
  report_header h;
  h.version = OFFLOADKIT_VERSION;
  std::vector<std::string> words = {program};
  for (const auto& w : command) words.push_back(shell_quote(w));
  for (const auto& w : args) words.push_back(shell_quote(w));
  h.command_line = join(words, " ");
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  std::array<char, 64> date{};
  if (::gmtime_r(&now, &utc) != nullptr &&
      std::strftime(date.data(), date.size(), "%Y-%m-%d %H:%M:%S UTC", &utc) > 0) {
    h.date_utc = date.data();
  } else {
    h.date_utc = "unknown";
  }
  std::array<char, 256> host{};
  h.host = ::gethostname(host.data(), host.size() - 1) == 0 ? host.data() : "unknown";
  return h;
}

std::vector<report_profile> profiles_of(const std::vector<check_case>& cases) {
  std::vector<report_profile> out;
  for (const auto& c : cases) {
    const bool seen = std::any_of(out.begin(), out.end(), [&c](const report_profile& p) {
      return p.feature == c.feature && p.implementation == c.implementation;
    });
    if (!seen) out.push_back({c.feature, c.implementation, c.profile});
  }
  return out;
}

std::string verdict_of(const report_row& row) {
  const auto& o = row.outcome;
  if (o.passed) return "holds";
  if (o.not_applicable) return "not applicable";
  if (o.skipped) return "skipped";
  return "fails";
}

namespace {

/// A check report or a fault report in `format`, by the writer of that format.
template <class Report>
std::string render_in(const Report& report, report_format format) {
  switch (format) {
    case report_format::markdown:
      return render_markdown(report);
    case report_format::json:
      return render_json(report);
    case report_format::html:
      return render_html(report);
  }
  return render_json(report);
}

}  // namespace

std::string render_report(const check_report& report, report_format format) {
  return render_in(report, format);
}

std::string render_report(const fault_report& report, report_format format) {
  return render_in(report, format);
}

}  // namespace offloadkit::tools
