// The conformance report (report.hpp): one model per kind of run, rendered as Markdown, JSON or
// HTML. The three formats say the same things in the same order, so that a report attached in any
// of them can be read against the others.
#include "report.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_common.hpp"
#include "markup.hpp"
#include "offloadkit/detail/text.hpp"

#ifndef OFFLOADKIT_VERSION
#define OFFLOADKIT_VERSION "unknown"
#endif

namespace offloadkit::tools {
namespace {

using json = nlohmann::ordered_json;
using ::offloadkit::detail::join;

/// Identifies the JSON document (and its layout version) for tools that read it.
constexpr const char* json_format_name = "offloadkit.report";
constexpr int json_format_version = 1;

constexpr std::array<std::pair<const char*, report_format>, 3> extensions = {{
    {".md", report_format::markdown},
    {".json", report_format::json},
    {".html", report_format::html},
}};

std::string seconds_text(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 10 ? 1 : 0) << s << " s";
  return os.str();
}

/// Seconds rounded to milliseconds, for JSON.
double rounded_seconds(double s) { return std::round(s * 1000.0) / 1000.0; }

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

struct verdict_counts {
  std::size_t holds = 0, fails = 0, not_applicable = 0, skipped = 0;
};

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

/// The header as label and value, in the order Markdown and HTML show it (JSON: header_json).
struct header_field {
  std::string label;
  std::string value;
  bool code = false;  ///< shown as code (a command, a path)
};

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

json header_json(const report_header& h) {
  json j = {{"version", h.version},   {"command_line", h.command_line},
            {"date_utc", h.date_utc}, {"host", h.host},
            {"executor", h.executor}, {"executor_reason", h.executor_why}};
  if (h.seed) {
    j["seed"] = *h.seed;
    j["seed_fresh"] = h.seed_fresh;
  }
  j["cases"] = h.cases;
  j["subject"] = {{"kind", h.subject_kind}, {"name", h.subject}};
  j["isolation"] = h.isolation;
  return j;
}

json profile_json(const profile_flags& flags) {
  json j = json::object();
  // A flag as a JSON boolean, a policy as its name.
  for (const auto& [name, value] : flags) {
    if (value == "yes" || value == "no") {
      j[name] = value == "yes";
    } else {
      j[name] = value;
    }
  }
  return j;
}

// ---- Markdown --------------------------------------------------------------------------------

void md_header(std::ostream& os, const report_header& h) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& f : header_fields(h)) {
    // GitHub's tables end a cell at a pipe even inside code: escaped there too.
    rows.push_back({f.label, f.code ? md_code(md_cell(f.value)) : md_cell(f.value)});
  }
  md_table(os, {"", ""}, rows);
}

void md_profiles(std::ostream& os, const std::vector<report_profile>& profiles) {
  os << "\n## Declared profile\n\n";
  if (profiles.empty()) os << "No implementation was checked.\n";
  for (const auto& p : profiles) {
    os << "**" << md_cell(p.feature + "/" + p.implementation) << "**";
    if (p.flags.empty()) {
      os << ": declares no profile (offloadkit's own)\n\n";
      continue;
    }
    os << "\n\n";
    std::vector<std::string> names, values;
    for (const auto& [name, value] : p.flags) {
      names.push_back(name);
      values.push_back(value);
    }
    md_table(os, names, {values});
    os << "\n";
  }
}

std::string render_markdown(const check_report& r) {
  std::ostringstream os;
  os << "# offloadkit conformance report\n\n**" << md_cell(summary_line(r)) << "**\n\n";
  md_header(os, r.header);
  md_profiles(os, r.profiles);

  os << "## Properties\n\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : r.rows) {
    const auto& o = row.outcome;
    std::string verdict = verdict_of(row);
    if (!row.abnormal_end.empty()) verdict += ", " + row.abnormal_end;
    const bool failed = !o.passed && !o.skipped;
    rows.push_back({md_cell(o.feature), md_cell(o.implementation), md_cell(o.name),
                    failed ? "**" + md_cell(verdict) + "**" : md_cell(verdict), cases_text(row),
                    o.skipped ? "-" : seconds_text(row.seconds),
                    failed ? std::to_string(o.seed) : ""});
  }
  md_table(os, {"feature", "implementation", "property", "verdict", "cases", "time", "seed"}, rows);
  os << "\n" << md_cell(summary_line(r)) << "\n";
  if (!r.notes.empty()) {
    os << "\n";
    for (const auto& n : r.notes) os << "- not checked: " << md_cell(n) << "\n";
  }
  if (r.shutdown_observed) {
    os << "\n## Shutdown\n\n";
    const auto shutdown = shutdown_findings_of(r.rows);
    if (shutdown.empty()) os << "Every property's process exited cleanly after its result.\n";
    for (const auto& f : shutdown) {
      os << "### " << md_cell(shutdown_text(f)) << "\n\n"
         << "Each property's own verdict stands: its cases ran to the result it reported; the "
            "process went wrong on its way out.\n\n"
         << "- properties: " << md_cell(join(f.properties, ", ")) << "\n"
         << "- reproduce: " << md_code(f.reproduce) << "\n";
      if (!f.output.empty()) os << "\nlast lines of its output:\n\n" << md_block(f.output);
      os << "\n";
    }
  }

  const verdict_counts c = count_verdicts(r.rows);
  if (c.fails > 0) {
    os << "\n## Failures\n";
    for (const auto& row : r.rows) {
      const auto& o = row.outcome;
      if (o.passed || o.skipped) continue;
      os << "\n### " << md_cell(o.feature + "/" + o.implementation + " " + o.name) << ": fails\n\n"
         << "- seed: " << o.seed << "\n";
      os << "- cases: " << failure_cases_text(row) << "\n";
      if (!row.abnormal_end.empty()) os << "- process: " << md_cell(row.abnormal_end) << "\n";
      os << "- reproduce: " << md_code(row.reproduce) << "\n";
      if (!row.debug.empty()) os << "- in a debugger: " << md_code(row.debug) << "\n";
      os << "\n" << md_block(o.message);
      if (!row.output.empty()) os << "\nlast lines of its output:\n\n" << md_block(row.output);
    }
  }
  if (c.not_applicable > 0) {
    os << "\n## Not applicable\n\n";
    for (const auto& row : r.rows) {
      const auto& o = row.outcome;
      if (!o.not_applicable) continue;
      os << "- **" << md_cell(o.feature + "/" + o.implementation + " " + o.name)
         << "**: " << md_cell(o.message) << "\n";
    }
  }
  if (c.skipped > 0) {
    os << "\n## Skipped\n\n";
    for (const auto& row : r.rows) {
      const auto& o = row.outcome;
      if (!o.skipped || o.not_applicable) continue;
      os << "- **" << md_cell(o.feature + "/" + o.implementation + " " + o.name)
         << "**: " << md_cell(o.message) << "\n";
    }
  }
  return os.str();
}

std::string render_markdown(const fault_report& r) {
  std::ostringstream os;
  os << "# offloadkit driver-fault report\n\n**" << md_cell(summary_line(r)) << "**\n\n";
  md_header(os, r.header);
  os << "\ninterposer: " << md_code(r.interposer) << "\n";
  std::vector<report_profile> profiles;
  for (const auto& f : r.features) profiles.push_back({f.feature, f.implementation, f.profile});
  md_profiles(os, profiles);
  for (const auto& f : r.features) {
    os << "## " << md_cell(f.feature + " (" + f.implementation + ")") << "\n\n"
       << md_cell(f.scenario) << "; case N fails the N-th acquiring call.\n\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& row : f.rows) {
      const bool clean = row.cls == interpose::fault_class::clean;
      const std::string cls = interpose::to_string(row.cls);
      rows.push_back({std::to_string(row.n), row.call.empty() ? "(no call N)" : md_cell(row.call),
                      clean ? cls : "**" + cls + "**", md_cell(row.detail),
                      seconds_text(row.seconds)});
    }
    md_table(os, {"N", "failed call", "class", "detail", "time"}, rows);
    os << "\n" << class_counts_text(f.rows) << "\n";
    for (const auto& finding : fault_shutdown_findings(f.rows)) {
      const auto& row = f.rows.at(finding.first);
      os << "\n### " << md_cell(f.feature) << " shutdown\n\n"
         << md_cell(fault_shutdown_text(finding)) << ". Each case keeps the class its result "
         << "gives.\n\n- reproduce: " << md_code(f.reproduce.at(finding.first)) << "\n";
      if (!row.output.empty()) os << "\nlast lines of its output:\n\n" << md_block(row.output);
    }
    if (!f.complete && !f.stopped.empty()) {
      os << "\nthe count did not finish: " << md_cell(f.stopped) << "\n";
    }
    for (std::size_t i = 0; i < f.rows.size(); ++i) {
      const auto& row = f.rows[i];
      if (row.cls == interpose::fault_class::clean) continue;
      os << "\n### " << md_cell(f.feature) << " N=" << row.n << " "
         << md_cell(row.call.empty() ? "(no call N)" : row.call) << ": "
         << interpose::to_string(row.cls) << "\n\n"
         << md_cell(row.detail) << "\n\n"
         << "- reproduce: " << md_code(f.reproduce.at(i)) << "\n";
      if (!row.output.empty()) os << "\nlast lines of its output:\n\n" << md_block(row.output);
    }
    os << "\n";
  }
  os << md_cell(summary_line(r)) << "\n";
  for (const auto& n : r.notes) os << "\n- not checked: " << md_cell(n);
  if (!r.notes.empty()) os << "\n";
  return os.str();
}

// ---- JSON ------------------------------------------------------------------------------------

json row_json(const report_row& row) {
  const auto& o = row.outcome;
  std::string verdict = verdict_of(row);
  std::replace(verdict.begin(), verdict.end(), ' ', '_');
  json j = {{"feature", o.feature}, {"implementation", o.implementation},
            {"property", o.name},   {"executor", o.executor_name},
            {"verdict", verdict},   {"seed", o.seed}};
  // A property that did not run has no cases and no time.
  if (!o.skipped) {
    j["cases_run"] = row.has_result ? json(o.cases_run) : json(nullptr);
    j["cases_planned"] = o.cases_planned;
    j["seconds"] = rounded_seconds(row.seconds);
  }
  if (o.not_applicable) {
    constexpr const char* prefix = "not applicable: ";
    j["reason"] =
        o.message.rfind(prefix, 0) == 0 ? o.message.substr(std::strlen(prefix)) : o.message;
  } else if (o.skipped) {
    j["reason"] = o.message;
  } else if (!o.passed) {
    j["message"] = o.message;
    j["process_end"] = row.abnormal_end.empty() ? json(nullptr) : json(row.abnormal_end);
    j["reported_result"] = row.has_result;
    j["reproduce"] = row.reproduce;
    if (!row.debug.empty()) j["debug"] = row.debug;
    j["output"] = row.output;
  }
  // How its process ended after its result, when not cleanly (its verdict stands): the run's
  // "shutdown" section gathers these.
  j["shutdown"] = row.shutdown.empty() ? json(nullptr) : json(row.shutdown);
  if (!row.shutdown.empty() && o.passed) {
    j["reproduce"] = row.reproduce;
    j["output"] = row.output;
  }
  return j;
}

std::string dump(const json& j) {
  // Output tails may hold bytes that are not UTF-8: replaced, never a reason to lose the report.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string render_json(const check_report& r) {
  json profiles = json::array();
  for (const auto& p : r.profiles) {
    profiles.push_back({{"feature", p.feature},
                        {"implementation", p.implementation},
                        {"declared", p.flags.empty() ? json(nullptr) : profile_json(p.flags)}});
  }
  json rows = json::array();
  for (const auto& row : r.rows) rows.push_back(row_json(row));
  const verdict_counts c = count_verdicts(r.rows);
  const auto found = shutdown_findings_of(r.rows);
  json findings = json::array();
  for (const auto& f : found) {
    findings.push_back({{"feature", f.feature},
                        {"end", f.end},
                        {"properties", f.properties},
                        {"of", f.of},
                        {"reproduce", f.reproduce},
                        {"output", f.output}});
  }
  // null: not seen (--in-process); otherwise whether every property's process exited cleanly.
  const json shutdown = r.shutdown_observed
                            ? json{{"clean", found.empty()}, {"findings", std::move(findings)}}
                            : json(nullptr);
  const json j = {{"format", json_format_name},
                  {"format_version", json_format_version},
                  {"kind", "properties"},
                  {"header", header_json(r.header)},
                  {"profiles", profiles},
                  {"properties", rows},
                  {"shutdown", shutdown},
                  {"not_checked", r.notes},
                  {"summary",
                   {{"holds", c.holds},
                    {"fails", c.fails},
                    {"shutdown_findings", found.size()},
                    {"not_applicable", c.not_applicable},
                    {"skipped", c.skipped},
                    {"properties", r.rows.size()},
                    {"selected", r.selected},
                    {"seconds", rounded_seconds(r.seconds)},
                    {"complete", r.stopped.empty()},
                    {"stopped", r.stopped},
                    {"text", summary_line(r)}}}};
  return dump(j);
}

std::string render_json(const fault_report& r) {
  json features = json::array();
  std::size_t cases = 0;
  for (const auto& f : r.features) {
    json rows = json::array();
    for (std::size_t i = 0; i < f.rows.size(); ++i) {
      const auto& row = f.rows[i];
      json jr = {{"n", row.n},
                 {"call", row.call.empty() ? json(nullptr) : json(row.call)},
                 {"class", interpose::to_string(row.cls)},
                 {"detail", row.detail},
                 {"seconds", rounded_seconds(row.seconds)},
                 {"reproduce", f.reproduce.at(i)}};
      if (row.cls != interpose::fault_class::clean) jr["output"] = row.output;
      // Every other class that applies to the case, each with what shows it.
      json also = json::array();
      for (const auto& f : row.also) {
        also.push_back({{"class", interpose::to_string(f.cls)}, {"detail", f.detail}});
      }
      jr["also"] = std::move(also);
      jr["shutdown"] = row.shutdown.empty() ? json(nullptr) : json(row.shutdown);
      if (!row.shutdown.empty()) jr["output"] = row.output;
      rows.push_back(std::move(jr));
    }
    json findings = json::array();
    for (const auto& finding : fault_shutdown_findings(f.rows)) {
      findings.push_back({{"end", finding.end},
                          {"cases", finding.cases},
                          {"of", finding.of},
                          {"without_fault", finding.without_fault},
                          {"text", fault_shutdown_text(finding)},
                          {"reproduce", f.reproduce.at(finding.first)},
                          {"output", f.rows.at(finding.first).output}});
    }
    const bool shutdown_clean = findings.empty();
    json counts = json::object();
    for (const auto& [name, n] : class_counts(f.rows)) counts[name] = n;
    cases += f.rows.size();
    features.push_back({{"feature", f.feature},
                        {"implementation", f.implementation},
                        {"scenario", f.scenario},
                        {"declared", profile_json(f.profile)},
                        {"cases", rows},
                        {"counts", counts},
                        {"shutdown", {{"clean", shutdown_clean}, {"findings", findings}}},
                        {"complete", f.complete},
                        {"stopped", f.stopped}});
  }
  const json j = {{"format", json_format_name},
                  {"format_version", json_format_version},
                  {"kind", "driver_faults"},
                  {"header", header_json(r.header)},
                  {"interposer", r.interposer},
                  {"features", features},
                  {"not_checked", r.notes},
                  {"summary",
                   {{"cases", cases},
                    {"every_case_clean", all_rows_clean(r)},
                    {"seconds", rounded_seconds(r.seconds)},
                    {"complete", r.stopped.empty()},
                    {"stopped", r.stopped},
                    {"text", summary_line(r)}}}};
  return dump(j);
}

// ---- HTML ------------------------------------------------------------------------------------

void html_header(std::ostream& os, const report_header& h) {
  os << "<table>\n";
  for (const auto& f : header_fields(h)) {
    os << "<tr><th>" << html(f.label) << "</th><td>"
       << (f.code ? "<code>" + html(f.value) + "</code>" : html(f.value)) << "</td></tr>\n";
  }
  os << "</table>\n";
}

void html_profiles(std::ostream& os, const std::vector<report_profile>& profiles) {
  os << "<h2>Declared profile</h2>\n";
  if (profiles.empty()) os << "<p>No implementation was checked.</p>\n";
  for (const auto& p : profiles) {
    os << "<p><b>" << html(p.feature + "/" + p.implementation) << "</b>";
    if (p.flags.empty()) {
      os << ": declares no profile (offloadkit's own)</p>\n";
      continue;
    }
    os << "</p>\n<table>\n<tr>";
    for (const auto& flag : p.flags) os << "<th>" << html(flag.first) << "</th>";
    os << "</tr>\n<tr>";
    for (const auto& flag : p.flags) {
      const bool is_flag = flag.second == "yes" || flag.second == "no";
      os << "<td class=\"" << (is_flag ? flag.second : std::string("policy")) << "\">"
         << html(flag.second) << "</td>";
    }
    os << "</tr>\n</table>\n";
  }
}

std::string render_html(const check_report& r) {
  std::ostringstream os;
  const verdict_counts c = count_verdicts(r.rows);
  const auto shutdown = shutdown_findings_of(r.rows);
  html_begin(os, "offloadkit conformance report", summary_line(r),
             c.fails > 0 || !r.stopped.empty() || !shutdown.empty());
  html_header(os, r.header);
  html_profiles(os, r.profiles);
  os << "<h2>Properties</h2>\n<table>\n<tr><th>feature</th><th>implementation</th><th>property</th>"
        "<th>verdict</th><th>cases</th><th>time</th><th>seed</th></tr>\n";
  for (const auto& row : r.rows) {
    const auto& o = row.outcome;
    std::string verdict = verdict_of(row);
    std::string css = verdict;
    std::replace(css.begin(), css.end(), ' ', '_');
    if (!row.abnormal_end.empty()) verdict += ", " + row.abnormal_end;
    const bool failed = !o.passed && !o.skipped;
    os << "<tr><td>" << html(o.feature) << "</td><td>" << html(o.implementation) << "</td><td>"
       << html(o.name) << "</td><td class=\"" << css << "\" title=\"" << html(o.message) << "\">"
       << html(verdict) << "</td><td class=\"num\">" << cases_text(row) << "</td><td class=\"num\">"
       << (o.skipped ? "-" : seconds_text(row.seconds)) << "</td><td>"
       << (failed ? std::to_string(o.seed) : "") << "</td></tr>\n";
  }
  os << "</table>\n<p>" << html(summary_line(r)) << "</p>\n";
  if (!r.notes.empty()) {
    os << "<ul>\n";
    for (const auto& n : r.notes) os << "<li>not checked: " << html(n) << "</li>\n";
    os << "</ul>\n";
  }
  if (r.shutdown_observed) {
    os << "<h2>Shutdown</h2>\n";
    if (shutdown.empty()) {
      os << "<p>Every property's process exited cleanly after its result.</p>\n";
    }
    for (const auto& f : shutdown) {
      os << "<h3 class=\"fails\">" << html(shutdown_text(f)) << "</h3>\n"
         << "<p>Each property's own verdict stands: its cases ran to the result it reported; the "
            "process went wrong on its way out.</p>\n<ul>\n<li>properties: "
         << html(join(f.properties, ", ")) << "</li>\n<li>reproduce: <code>" << html(f.reproduce)
         << "</code></li>\n</ul>\n";
      if (!f.output.empty()) {
        os << "<p>last lines of its output:</p>\n<pre>" << html(f.output) << "</pre>\n";
      }
    }
  }
  if (c.fails > 0) {
    os << "<h2>Failures</h2>\n";
    for (const auto& row : r.rows) {
      const auto& o = row.outcome;
      if (o.passed || o.skipped) continue;
      os << "<h3 class=\"fails\">" << html(o.feature + "/" + o.implementation + " " + o.name)
         << ": fails</h3>\n<ul>\n<li>seed: " << o.seed
         << "</li>\n<li>cases: " << html(failure_cases_text(row)) << "</li>\n";
      if (!row.abnormal_end.empty()) os << "<li>process: " << html(row.abnormal_end) << "</li>\n";
      os << "<li>reproduce: <code>" << html(row.reproduce) << "</code></li>\n";
      if (!row.debug.empty()) {
        os << "<li>in a debugger: <code>" << html(row.debug) << "</code></li>\n";
      }
      os << "</ul>\n<pre>" << html(o.message) << "</pre>\n";
      if (!row.output.empty()) {
        os << "<p>last lines of its output:</p>\n<pre>" << html(row.output) << "</pre>\n";
      }
    }
  }
  for (const bool not_applicable : {true, false}) {
    if ((not_applicable ? c.not_applicable : c.skipped) == 0) continue;
    os << "<h2>" << (not_applicable ? "Not applicable" : "Skipped") << "</h2>\n<ul>\n";
    for (const auto& row : r.rows) {
      const auto& o = row.outcome;
      if (!o.skipped || o.not_applicable != not_applicable) continue;
      os << "<li><b>" << html(o.feature + "/" + o.implementation + " " + o.name)
         << "</b>: " << html(o.message) << "</li>\n";
    }
    os << "</ul>\n";
  }
  os << "</body>\n</html>\n";
  return os.str();
}

std::string class_css(interpose::fault_class cls) {
  if (cls == interpose::fault_class::clean) return "clean";
  if (cls == interpose::fault_class::unknown) return "unknown";
  return "bad";
}

std::string render_html(const fault_report& r) {
  std::ostringstream os;
  bool shutdown = false;
  for (const auto& f : r.features) shutdown = shutdown || !fault_shutdown_findings(f.rows).empty();
  html_begin(os, "offloadkit driver-fault report", summary_line(r), !all_rows_clean(r) || shutdown);
  html_header(os, r.header);
  os << "<p>interposer: <code>" << html(r.interposer) << "</code></p>\n";
  std::vector<report_profile> profiles;
  for (const auto& f : r.features) profiles.push_back({f.feature, f.implementation, f.profile});
  html_profiles(os, profiles);
  for (const auto& f : r.features) {
    os << "<h2>" << html(f.feature + " (" + f.implementation + ")") << "</h2>\n<p>"
       << html(f.scenario) << "; case N fails the N-th acquiring call.</p>\n"
       << "<table>\n<tr><th>N</th><th>failed call</th><th>class</th><th>detail</th><th>time</th>"
          "</tr>\n";
    for (const auto& row : f.rows) {
      os << "<tr><td class=\"num\">" << row.n << "</td><td>"
         << html(row.call.empty() ? "(no call N)" : row.call) << "</td><td class=\""
         << class_css(row.cls) << "\">" << html(interpose::to_string(row.cls)) << "</td><td>"
         << html(row.detail) << "</td><td class=\"num\">" << seconds_text(row.seconds)
         << "</td></tr>\n";
    }
    os << "</table>\n<p>" << html(class_counts_text(f.rows)) << "</p>\n";
    for (const auto& finding : fault_shutdown_findings(f.rows)) {
      os << "<h3 class=\"bad\">" << html(f.feature) << " shutdown</h3>\n<p>"
         << html(fault_shutdown_text(finding))
         << ". Each case keeps the class its result gives.</p>\n<p>reproduce: <code>"
         << html(f.reproduce.at(finding.first)) << "</code></p>\n";
      const auto& row = f.rows.at(finding.first);
      if (!row.output.empty()) {
        os << "<p>last lines of its output:</p>\n<pre>" << html(row.output) << "</pre>\n";
      }
    }
    if (!f.complete && !f.stopped.empty()) {
      os << "<p>the count did not finish: " << html(f.stopped) << "</p>\n";
    }
    for (std::size_t i = 0; i < f.rows.size(); ++i) {
      const auto& row = f.rows[i];
      if (row.cls == interpose::fault_class::clean) continue;
      os << "<h3 class=\"" << class_css(row.cls) << "\">" << html(f.feature) << " N=" << row.n
         << " " << html(row.call.empty() ? "(no call N)" : row.call) << ": "
         << html(interpose::to_string(row.cls)) << "</h3>\n<p>" << html(row.detail)
         << "</p>\n<p>reproduce: <code>" << html(f.reproduce.at(i)) << "</code></p>\n";
      if (!row.output.empty()) {
        os << "<p>last lines of its output:</p>\n<pre>" << html(row.output) << "</pre>\n";
      }
    }
  }
  os << "<p>" << html(summary_line(r)) << "</p>\n";
  if (!r.notes.empty()) {
    os << "<ul>\n";
    for (const auto& n : r.notes) os << "<li>not checked: " << html(n) << "</li>\n";
    os << "</ul>\n";
  }
  os << "</body>\n</html>\n";
  return os.str();
}

}  // namespace

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

std::string render_report(const check_report& report, report_format format) {
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

std::string render_report(const fault_report& report, report_format format) {
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

}  // namespace offloadkit::tools
