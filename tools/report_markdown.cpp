// The conformance report as Markdown (report_writers.hpp): the header as a table, the declared
// profiles, every property's verdict (or every --driver-faults case) and the evidence under it.
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "markup.hpp"
#include "offloadkit/detail/text.hpp"
#include "report_writers.hpp"

namespace offloadkit::tools::detail {
namespace {

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

}  // namespace

using ::offloadkit::detail::join;

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

}  // namespace offloadkit::tools::detail
