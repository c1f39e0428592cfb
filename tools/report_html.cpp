// The conformance report as one self-contained HTML page (report_writers.hpp): the same sections
// as the Markdown, with verdicts and fault classes marked by their CSS class.
#include <algorithm>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "markup.hpp"
#include "offloadkit/detail/text.hpp"
#include "report_writers.hpp"

namespace offloadkit::tools::detail {
namespace {

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

std::string class_css(interpose::fault_class cls) {
  if (cls == interpose::fault_class::clean) return "clean";
  if (cls == interpose::fault_class::unknown) return "unknown";
  return "bad";
}

}  // namespace

using ::offloadkit::detail::join;

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

}  // namespace offloadkit::tools::detail
