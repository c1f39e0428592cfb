// The conformance report as JSON (report_writers.hpp): one document, "offloadkit.report" of a
// layout version, for tools that read it; the same things as the other formats, in the same order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "report_writers.hpp"

namespace offloadkit::tools::detail {
namespace {

using json = nlohmann::ordered_json;

/// Identifies the JSON document (and its layout version) for tools that read it.
constexpr const char* json_format_name = "offloadkit.report";
constexpr int json_format_version = 1;

/// Seconds rounded to milliseconds, for JSON.
double rounded_seconds(double s) { return std::round(s * 1000.0) / 1000.0; }

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

}  // namespace

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

}  // namespace offloadkit::tools::detail
