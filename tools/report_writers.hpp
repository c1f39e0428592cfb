// What the conformance report's writers share (report.cpp) and the writers themselves, one file
// per format: Markdown (report_markdown.cpp), JSON (report_json.cpp), HTML (report_html.cpp).
// Internal to the check command's library; render_report (report.hpp) picks the writer.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/interpose/countdown.hpp"
#include "report.hpp"

namespace offloadkit::tools::detail {

/// Seconds as the report shows them: "1.5 s", "12 s".
std::string seconds_text(double s);
/// The cases column: run of planned, "-" where none ran or none was reported.
std::string cases_text(const report_row& row);
/// How far a failing property got: "failed at case 2 of 3", "5 of 5 run", "3 planned, none
/// reported".
std::string failure_cases_text(const report_row& row);

struct verdict_counts {
  std::size_t holds = 0, fails = 0, not_applicable = 0, skipped = 0;
};
verdict_counts count_verdicts(const std::vector<report_row>& rows);

/// "region: 9 of 9 properties' processes crashed: signal 11 (SIGSEGV) after its result".
std::string shutdown_text(const report_shutdown_finding& f);
/// The counts of a run in one line, with its shutdown findings and why it stopped early.
std::string summary_line(const check_report& r);
std::string summary_line(const fault_report& r);

/// Cases per class, in the order the classes are declared.
std::vector<std::pair<std::string, std::size_t>> class_counts(
    const std::vector<interpose::case_row>& rows);
/// "3 clean, 1 leak"; "no case" for none.
std::string class_counts_text(const std::vector<interpose::case_row>& rows);
/// Every case of every feature clean, and no count that ended early but for an interrupt.
bool all_rows_clean(const fault_report& r);

/// The header as label and value, in the order Markdown and HTML show it (JSON: header_json).
struct header_field {
  std::string label;
  std::string value;
  bool code = false;  ///< shown as code (a command, a path)
};
std::vector<header_field> header_fields(const report_header& h);

/// The writers: the whole report in one format.
std::string render_markdown(const check_report& r);
std::string render_markdown(const fault_report& r);
std::string render_json(const check_report& r);
std::string render_json(const fault_report& r);
std::string render_html(const check_report& r);
std::string render_html(const fault_report& r);

}  // namespace offloadkit::tools::detail
