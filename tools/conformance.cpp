#include "conformance.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "cli_common.hpp"
#include "markup.hpp"
#include "report.hpp"

namespace offloadkit::tools {
namespace {

using nlohmann::json;

constexpr const char* description_format = "offloadkit.conformance";
constexpr int description_version = 1;

json read_json(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw input_error(path + ": is a directory, not " + what + " (a JSON file)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(path + ": cannot open " + what + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw input_error(path + ": not valid JSON: " + e.what());
  }
}

/// Reads the object at `pointer` strictly: every key must be one of `known`, and the string
/// fields are read with `field`.
class object_reader {
 public:
  object_reader(const json& j, std::string path, std::string pointer,
                std::initializer_list<const char*> known)
      : j_(j), path_(std::move(path)), pointer_(std::move(pointer)) {
    if (!j_.is_object()) fail("", "must be an object");
    for (const auto& item : j_.items()) {
      const std::string& key = item.key();
      if (std::none_of(known.begin(), known.end(), [&key](const char* k) { return key == k; })) {
        std::string valid;
        for (const char* k : known) {
          if (!valid.empty()) valid += ", ";
          valid += k;
        }
        fail("/" + key, "is not a known key: valid keys are " + valid);
      }
    }
  }
  [[noreturn]] void fail(const std::string& at, const std::string& why) const {
    const std::string where = pointer_ + at;
    throw input_error(path_ + ": at " + (where.empty() ? "/" : where) + ": " + why);
  }
  std::string text(const char* key, bool required) const {
    if (!j_.contains(key)) {
      if (required) fail("", std::string("needs the key \"") + key + "\"");
      return {};
    }
    const json& v = j_.at(key);
    if (!v.is_string()) fail(std::string("/") + key, "must be a string");
    std::string s = v.get<std::string>();
    if (required && s.empty()) fail(std::string("/") + key, "must not be empty");
    return s;
  }
  bool flag(const char* key) const {
    if (!j_.contains(key)) return false;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail(std::string("/") + key, "must be true or false");
    return v.get<bool>();
  }
  const json& array(const char* key, bool required) const {
    static const json empty = json::array();
    if (!j_.contains(key)) {
      if (required) fail("", std::string("needs the key \"") + key + "\"");
      return empty;
    }
    const json& v = j_.at(key);
    if (!v.is_array()) fail(std::string("/") + key, "must be an array");
    return v;
  }

 private:
  const json& j_;
  std::string path_;
  std::string pointer_;
};

// ---- the reports ----------------------------------------------------------------------------

/// One cell: a property's verdict for one library, with its evidence.
struct cell {
  std::string verdict;  ///< holds, fails, not_applicable, skipped
  std::string detail;   ///< the failure's message, the reason it does not apply or was skipped
  std::string seed;
  std::string reproduce;
  std::string report;  ///< the report it comes from
  std::string executor;
};

struct library_cells {
  std::map<std::string, cell> cells;  ///< by "feature/property"
  std::set<std::string> executors, dates, versions;
};

std::string text_of(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return {};
  const json& v = j.at(key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

void put(library_cells& lib, const std::string& library, const std::string& property, cell c,
         std::vector<std::string>& order, std::set<std::string>& seen) {
  const auto it = lib.cells.find(property);
  if (it != lib.cells.end()) {
    throw input_error(c.report + ": " + library + " has " + property + " already, from " +
                      it->second.report + ": give each property of a library once");
  }
  if (seen.insert(property).second) order.push_back(property);
  lib.cells.emplace(property, std::move(c));
}

/// A library's shutdown finding of one feature, `feature/shutdown`: one cell, whichever of its
/// reports saw it (the properties' processes, the driver-fault cases'). A report that saw a clean
/// shutdown gives "holds"; one that saw a finding makes the cell fail, its details added up.
void put_shutdown(library_cells& lib, const std::string& property, cell c,
                  std::vector<std::string>& order, std::set<std::string>& seen) {
  const auto it = lib.cells.find(property);
  if (it == lib.cells.end()) {
    if (seen.insert(property).second) order.push_back(property);
    lib.cells.emplace(property, std::move(c));
    return;
  }
  cell& had = it->second;
  if (c.verdict != "fails") return;
  if (had.verdict != "fails") {
    had = std::move(c);
    return;
  }
  had.detail += "\n" + c.detail;
  had.report += ", " + c.report;
}

/// "region: 9 of 9 properties' processes crashed: signal 11 (SIGSEGV) after its result
/// (a, b, ...)" and the output's last lines, for one finding of a properties report.
std::string shutdown_detail(const json& finding) {
  std::string properties;
  for (const json& p : finding.value("properties", json::array())) {
    properties += (properties.empty() ? "" : ", ") + (p.is_string() ? p.get<std::string>() : "?");
  }
  std::string d = std::to_string(finding.value("properties", json::array()).size()) + " of " +
                  text_of(finding, "of") + " properties' processes " + text_of(finding, "end") +
                  " (" + properties + "); each property's verdict stands";
  const std::string output = text_of(finding, "output");
  if (!output.empty()) d += "\nlast lines of its output:\n" + output;
  return d;
}

void read_report(const std::string& path, const std::string& library, library_cells& lib,
                 std::vector<std::string>& order, std::set<std::string>& seen) {
  const json j = read_json(path, "the report");
  if (!j.is_object() || text_of(j, "format") != "offloadkit.report") {
    throw input_error(path +
                      ": not an offloadkit report (offloadkit check --report FILE.json "
                      "writes one; its \"format\" is \"offloadkit.report\")");
  }
  const json& header = j.value("header", json::object());
  lib.dates.insert(text_of(header, "date_utc"));
  lib.versions.insert(text_of(header, "version"));
  const std::string executor = text_of(header, "executor");
  lib.executors.insert(executor);
  const std::string kind = text_of(j, "kind");
  if (kind == "properties") {
    for (const json& row : j.value("properties", json::array())) {
      cell c;
      c.verdict = text_of(row, "verdict");
      c.report = path;
      c.executor = executor;
      c.seed = text_of(row, "seed");
      if (c.verdict == "fails") {
        c.detail = text_of(row, "message");
        c.reproduce = text_of(row, "reproduce");
      } else if (c.verdict != "holds") {
        c.detail = text_of(row, "reason");
      }
      put(lib, library, text_of(row, "feature") + "/" + text_of(row, "property"), std::move(c),
          order, seen);
    }
    // The shutdown, where the report saw it (properties in processes of their own; a report of
    // an older offloadkit has no "shutdown" and gives no such row): one row per feature that ran.
    const json shutdown = j.value("shutdown", json());
    if (shutdown.is_object()) {
      std::vector<std::string> features;
      for (const json& row : j.value("properties", json::array())) {
        const std::string verdict = text_of(row, "verdict");
        const std::string feature = text_of(row, "feature");
        if ((verdict == "holds" || verdict == "fails") &&
            std::find(features.begin(), features.end(), feature) == features.end()) {
          features.push_back(feature);
        }
      }
      for (const auto& feature : features) {
        cell c;
        c.verdict = "holds";
        c.report = path;
        c.executor = executor;
        for (const json& f : shutdown.value("findings", json::array())) {
          if (text_of(f, "feature") != feature) continue;
          c.detail += (c.detail.empty() ? "" : "\n") + shutdown_detail(f);
          if (c.reproduce.empty()) c.reproduce = text_of(f, "reproduce");
          c.verdict = "fails";
        }
        put_shutdown(lib, feature + "/shutdown", std::move(c), order, seen);
      }
    }
  } else if (kind == "driver_faults") {
    for (const json& f : j.value("features", json::array())) {
      cell c;
      c.report = path;
      c.executor = executor;
      std::size_t total = 0, bad = 0;
      std::string first_reproduce;
      std::map<std::string, int> classes;
      for (const json& row : f.value("cases", json::array())) {
        ++total;
        const std::string cls = text_of(row, "class");
        if (cls == "clean") continue;
        ++bad;
        ++classes[cls];
        if (first_reproduce.empty()) first_reproduce = text_of(row, "reproduce");
      }
      c.verdict = bad == 0 ? "holds" : "fails";
      std::string what = std::to_string(total) + " cases";
      if (bad != 0) {
        what.insert(0, std::to_string(bad) + " of ");
        what += " not clean:";
        for (const auto& [cls, n] : classes) {
          what += " ";
          what += cls;
          what += " ";
          what += std::to_string(n);
        }
      } else {
        what += ", every one clean";
      }
      if (!f.value("complete", true)) what += " (stopped: " + text_of(f, "stopped") + ")";
      c.detail = what;
      c.reproduce = first_reproduce;
      put(lib, library, text_of(f, "feature") + "/driver_faults", std::move(c), order, seen);
      const json shutdown = f.value("shutdown", json());
      if (shutdown.is_object()) {
        cell s;
        s.verdict = "holds";
        s.report = path;
        s.executor = executor;
        for (const json& finding : shutdown.value("findings", json::array())) {
          s.verdict = "fails";
          s.detail += (s.detail.empty() ? "" : "\n") + std::string("driver-fault cases: ") +
                      text_of(finding, "text");
          const std::string output = text_of(finding, "output");
          if (!output.empty()) s.detail += "\nlast lines of its output:\n" + output;
          if (s.reproduce.empty()) s.reproduce = text_of(finding, "reproduce");
        }
        put_shutdown(lib, text_of(f, "feature") + "/shutdown", std::move(s), order, seen);
      }
    }
  } else {
    throw input_error(path + ": report kind '" + kind +
                      "' is not one of the valid kinds properties, driver_faults");
  }
}

std::string joined(const std::set<std::string>& values) {
  std::string out;
  for (const auto& v : values) {
    if (!v.empty()) out += (out.empty() ? "" : ", ") + v;
  }
  return out.empty() ? "-" : out;
}

/// When a library was checked: its reports' one date, or the first and the last of them (a
/// library checked one property at a time has a report, and a date, per property).
std::string checked_span(const std::set<std::string>& dates) {
  std::set<std::string> known;
  for (const auto& d : dates) {
    if (!d.empty()) known.insert(d);
  }
  if (known.size() < 2) return joined(known);
  return *known.begin() + " to " + *known.rbegin();
}

/// An anchor for a failure's section: letters, digits and '-'.
std::string anchor(const std::string& library, const std::string& property) {
  std::string text = library;
  text += "-";
  text += property;
  std::string a;
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    a += std::isalnum(u) != 0 ? static_cast<char>(std::tolower(u)) : '-';
  }
  return a;
}

const conformance_classification* classification_of(const conformance_library& lib,
                                                    const std::string& property) {
  for (const auto& c : lib.classified) {
    if (c.property == property) return &c;
  }
  return nullptr;
}

/// Whether the cell holds in this run while an intermittent defect of it is classified.
bool unseen_intermittent(const cell* c, const conformance_classification* cls) {
  return c != nullptr && c->verdict == "holds" && cls != nullptr && cls->intermittent;
}

/// The words of a cell.
std::string cell_text(const cell* c, const conformance_classification* cls) {
  if (c == nullptr) return "not checked";
  if (c->verdict == "fails") {
    return cls == nullptr ? "FAILS, unclassified"
                          : "fails: " + cls->cls + (cls->intermittent ? " (intermittent)" : "");
  }
  if (unseen_intermittent(c, cls)) return "holds this run; intermittent defect";
  if (c->verdict == "not_applicable") return "n/a";
  return c->verdict;
}

/// The words of a failure's or an unseen intermittent defect's heading.
std::string entry_class(const cell* c, const conformance_classification* cls) {
  if (cls == nullptr) return "UNCLASSIFIED";
  if (unseen_intermittent(c, cls)) return "defect, intermittent: holds in this run";
  return cls->cls + (cls->intermittent ? ", intermittent" : "");
}

std::string css_class(const cell* c) {
  if (c == nullptr) return "unknown";
  if (c->verdict == "fails" || c->verdict == "holds" || c->verdict == "not_applicable" ||
      c->verdict == "skipped") {
    return c->verdict;
  }
  return "unknown";
}

}  // namespace

conformance_description read_conformance_description(const std::string& path) {
  const json j = read_json(path, "the description");
  const object_reader top(j, path, "", {"format", "format_version", "title", "libraries"});
  if (top.text("format", true) != description_format) {
    top.fail("/format", std::string("must be \"") + description_format + "\"");
  }
  if (!j.contains("format_version") || j.at("format_version") != description_version) {
    top.fail("/format_version", "must be " + std::to_string(description_version));
  }
  conformance_description d;
  d.title = top.text("title", false);
  const json& libraries = top.array("libraries", true);
  std::set<std::string> names;
  for (std::size_t i = 0; i < libraries.size(); ++i) {
    const std::string at = "/libraries/" + std::to_string(i);
    const object_reader r(
        libraries[i], path, at,
        {"name", "version", "adapter", "notes", "reports", "classified", "not_run"});
    conformance_library lib;
    lib.name = r.text("name", true);
    if (!names.insert(lib.name).second) r.fail("/name", "'" + lib.name + "' is named twice");
    const bool not_run = libraries[i].contains("not_run");
    lib.not_run = r.text("not_run", not_run);
    lib.version = r.text("version", !not_run);
    lib.adapter = r.text("adapter", false);
    lib.notes = r.text("notes", false);
    const json& reports = r.array("reports", !not_run);
    if (not_run) {
      // Nothing was checked: a report or a classification would be read as a result.
      if (!reports.empty()) r.fail("/reports", "a library not run here has no reports");
      if (!r.array("classified", false).empty()) {
        r.fail("/classified", "a library not run here has no failures to classify");
      }
    } else if (reports.empty()) {
      r.fail("/reports", "must name at least one report");
    }
    for (std::size_t k = 0; k < reports.size(); ++k) {
      if (!reports[k].is_string() || reports[k].get<std::string>().empty()) {
        r.fail("/reports/" + std::to_string(k), "must be the path of a JSON report");
      }
      lib.reports.push_back(reports[k].get<std::string>());
    }
    const json& classified = r.array("classified", false);
    for (std::size_t k = 0; k < classified.size(); ++k) {
      const object_reader c(
          classified[k], path, at + "/classified/" + std::to_string(k),
          {"property", "class", "evidence", "upstream", "reproducer", "intermittent"});
      conformance_classification cls;
      cls.property = c.text("property", true);
      if (cls.property.find('/') == std::string::npos) {
        c.fail("/property", "'" + cls.property + "' is not feature/property");
      }
      cls.cls = c.text("class", true);
      if (cls.cls != "defect" && cls.cls != "limitation") {
        c.fail("/class", "'" + cls.cls +
                             "' is not one of the valid classes defect, limitation: a failure "
                             "that comes from offloadkit is fixed in offloadkit, and one that "
                             "comes from the adapter in the adapter, not classified");
      }
      cls.evidence = c.text("evidence", true);
      cls.upstream = c.text("upstream", false);
      cls.reproducer = c.text("reproducer", false);
      cls.intermittent = c.flag("intermittent");
      if (cls.intermittent && cls.cls != "defect") {
        c.fail("/intermittent",
               "only a defect is intermittent (a race that shows in some runs); "
               "a documented limitation holds in every run");
      }
      if (classification_of(lib, cls.property) != nullptr) {
        c.fail("/property", "'" + cls.property + "' is classified twice");
      }
      lib.classified.push_back(std::move(cls));
    }
    d.libraries.push_back(std::move(lib));
  }
  if (d.libraries.empty()) top.fail("/libraries", "must name at least one library");
  return d;
}

conformance_matrix build_conformance_matrix(const conformance_description& d,
                                            const std::string& base_dir, bool as_html) {
  std::vector<std::string> order;  // properties, in the order they first appear
  std::set<std::string> seen;
  std::vector<library_cells> cells(d.libraries.size());
  for (std::size_t i = 0; i < d.libraries.size(); ++i) {
    for (const auto& r : d.libraries[i].reports) {
      const std::filesystem::path p = std::filesystem::path(r).is_absolute()
                                          ? std::filesystem::path(r)
                                          : std::filesystem::path(base_dir) / r;
      read_report(p.lexically_normal().string(), d.libraries[i].name, cells[i], order, seen);
    }
  }

  conformance_matrix m;
  m.libraries = d.libraries.size();
  m.properties = order.size();
  struct failure {
    std::size_t library;
    std::string property;
    const cell* c;
    const conformance_classification* cls;
  };
  std::vector<failure> failures;
  // Intermittent defects this run did not show: listed with their evidence, as failures are.
  std::vector<failure> unseen;
  for (std::size_t i = 0; i < d.libraries.size(); ++i) {
    const auto& lib = d.libraries[i];
    for (const auto& property : order) {
      const auto it = cells[i].cells.find(property);
      if (it == cells[i].cells.end() || it->second.verdict != "fails") continue;
      const auto* cls = classification_of(lib, property);
      failures.push_back({i, property, &it->second, cls});
      if (cls == nullptr) {
        m.problems.push_back(lib.name + ": " + property +
                             " fails and is not classified (a defect of the library, a documented "
                             "limitation, or a fix in offloadkit or the adapter)");
      }
    }
    for (const auto& cls : lib.classified) {
      const auto it = cells[i].cells.find(cls.property);
      if (it == cells[i].cells.end()) {
        m.problems.push_back(lib.name + ": " + cls.property +
                             " is classified, but no report of the library has it");
      } else if (unseen_intermittent(&it->second, &cls)) {
        unseen.push_back({i, cls.property, &it->second, &cls});
      } else if (it->second.verdict != "fails") {
        m.problems.push_back(lib.name + ": " + cls.property + " is classified as a " + cls.cls +
                             ", but it " + cell_text(&it->second, nullptr) +
                             " now: drop the classification");
      }
    }
  }
  m.failures = failures.size();
  std::size_t not_run = 0;
  for (const auto& lib : d.libraries) not_run += lib.not_run.empty() ? 0 : 1;

  const std::string title = d.title.empty() ? "Conformance matrix" : d.title;
  const std::string summary =
      std::to_string(m.libraries) + " libraries" +
      (not_run == 0 ? "" : " (" + std::to_string(not_run) + " not run here)") + ", " +
      std::to_string(m.properties) + " properties, " + std::to_string(m.failures) + " failures" +
      (m.problems.empty() ? ", every one classified"
                          : "; " + std::to_string(m.problems.size()) + " problem(s) to resolve");
  const auto cell_at = [&](std::size_t i, const std::string& property) -> const cell* {
    const auto it = cells[i].cells.find(property);
    return it == cells[i].cells.end() ? nullptr : &it->second;
  };
  const auto or_dash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  // A library not run here has one anchor for its whole column: the reason.
  const auto not_run_anchor = [](const conformance_library& lib) {
    return anchor(lib.name, "not run");
  };
  const auto counts = [&](std::size_t i) {
    if (!d.libraries[i].not_run.empty()) return "not run: " + d.libraries[i].not_run;
    int holds = 0, fails = 0, na = 0;
    for (const auto& [p, c] : cells[i].cells) {
      holds += c.verdict == "holds" ? 1 : 0;
      fails += c.verdict == "fails" ? 1 : 0;
      na += c.verdict == "not_applicable" ? 1 : 0;
    }
    return std::to_string(holds) + " hold, " + std::to_string(fails) + " fail, " +
           std::to_string(na) + " n/a";
  };

  std::ostringstream os;
  if (!as_html) {
    os << "# " << title << "\n\n**" << md_cell(summary) << "**\n\n"
       << "Generated by `offloadkit conformance` from the JSON reports of `offloadkit check "
          "--report`. A cell says whether the property holds for the library, fails (a defect "
          "of the library or a documented limitation, with the evidence below), does not apply "
          "to the profile the library declares (n/a), was skipped, or was not checked; a "
          "library that could not be checked here (it does not import, say) is a column of "
          "\"not run\", with the reason below the matrix.\n\n"
       << "## Libraries\n\n";
    std::vector<std::vector<std::string>> rows;
    for (std::size_t i = 0; i < d.libraries.size(); ++i) {
      const auto& lib = d.libraries[i];
      rows.push_back({md_cell(lib.name), md_cell(or_dash(lib.version)),
                      lib.adapter.empty() ? "" : md_code(lib.adapter), md_cell(lib.notes),
                      md_cell(joined(cells[i].executors)), md_cell(checked_span(cells[i].dates)),
                      md_cell(joined(cells[i].versions)), md_cell(counts(i))});
    }
    md_table(os,
             {"library", "version", "adapter", "what the adapter adds", "executor", "checked",
              "offloadkit", "verdicts"},
             rows);
    os << "\n## Matrix\n\n";
    std::vector<std::string> header = {"property"};
    for (const auto& lib : d.libraries) header.push_back(lib.name);
    rows.clear();
    for (const auto& property : order) {
      std::vector<std::string> row = {md_code(property)};
      for (std::size_t i = 0; i < d.libraries.size(); ++i) {
        if (!d.libraries[i].not_run.empty()) {
          row.push_back("[not run](#" + not_run_anchor(d.libraries[i]) + ")");
          continue;
        }
        const cell* c = cell_at(i, property);
        const auto* cls = classification_of(d.libraries[i], property);
        std::string t = md_cell(cell_text(c, cls));
        const bool fails = c != nullptr && c->verdict == "fails";
        if (fails || unseen_intermittent(c, cls)) {  // a link to its entry, bold for a failure
          t.insert(0, fails ? "**[" : "[");
          t += "](#";
          t += anchor(d.libraries[i].name, property);
          t += fails ? ")**" : ")";
        }
        row.push_back(t);
      }
      rows.push_back(std::move(row));
    }
    md_table(os, header, rows);
    if (not_run != 0) os << "\n## Not run here\n\n";
    for (const auto& lib : d.libraries) {
      if (lib.not_run.empty()) continue;
      os << "- <a id=\"" << not_run_anchor(lib) << "\"></a>**" << md_cell(lib.name) << "**"
         << (lib.adapter.empty() ? "" : " (" + md_code(lib.adapter) + ")") << ": "
         << md_cell(lib.not_run) << "\n";
    }
    // One entry of the failures (with_run: the run's seed, command and message too) or of the
    // intermittent defects this run did not show.
    const auto md_entry = [&](const failure& f, bool with_run) {
      const auto& lib = d.libraries[f.library];
      os << "\n<a id=\"" << anchor(lib.name, f.property) << "\"></a>\n### " << lib.name << ": "
         << f.property << " (" << entry_class(f.c, f.cls) << ")\n\n";
      if (f.cls != nullptr) {
        os << "- evidence: " << md_cell(f.cls->evidence) << "\n";
        if (!f.cls->upstream.empty()) os << "- upstream: " << md_cell(f.cls->upstream) << "\n";
        if (!f.cls->reproducer.empty()) {
          os << "- reproducer (the library and PyTorch alone): " << md_code(f.cls->reproducer)
             << "\n";
        }
      }
      os << "- report: " << md_code(f.c->report) << " (executor " << f.c->executor << ")\n";
      if (!with_run) return;
      if (!f.c->seed.empty()) os << "- seed: " << md_code(f.c->seed) << "\n";
      if (!f.c->reproduce.empty()) os << "- reproduce: " << md_code(f.c->reproduce) << "\n";
      if (!f.c->detail.empty()) os << "\n" << md_block(f.c->detail);
    };
    if (!failures.empty()) os << "\n## Failures\n";
    for (const auto& f : failures) md_entry(f, true);
    if (!unseen.empty()) os << "\n## Intermittent defects this run did not show\n";
    for (const auto& u : unseen) md_entry(u, false);
    if (!m.problems.empty()) {
      os << "\n## Problems\n\n";
      for (const auto& p : m.problems) os << "- " << md_cell(p) << "\n";
    }
  } else {
    html_begin(os, title, summary, !m.problems.empty());
    os << "<h2>Libraries</h2>\n<table>\n<tr><th>library</th><th>version</th><th>adapter</th>"
          "<th>what the adapter adds</th><th>executor</th><th>checked</th><th>offloadkit</th>"
          "<th>verdicts</th></tr>\n";
    for (std::size_t i = 0; i < d.libraries.size(); ++i) {
      const auto& lib = d.libraries[i];
      os << "<tr><td>" << html(lib.name) << "</td><td>" << html(or_dash(lib.version))
         << "</td><td><code>" << html(lib.adapter) << "</code></td><td>" << html(lib.notes)
         << "</td><td>" << html(joined(cells[i].executors)) << "</td><td>"
         << html(checked_span(cells[i].dates)) << "</td><td>" << html(joined(cells[i].versions))
         << "</td><td>" << html(counts(i)) << "</td></tr>\n";
    }
    os << "</table>\n<h2>Matrix</h2>\n<table>\n<tr><th>property</th>";
    for (const auto& lib : d.libraries) os << "<th>" << html(lib.name) << "</th>";
    os << "</tr>\n";
    for (const auto& property : order) {
      os << "<tr><td><code>" << html(property) << "</code></td>";
      for (std::size_t i = 0; i < d.libraries.size(); ++i) {
        if (!d.libraries[i].not_run.empty()) {
          os << "<td class=\"skipped\"><a href=\"#" << not_run_anchor(d.libraries[i])
             << "\">not run</a></td>";
          continue;
        }
        const cell* c = cell_at(i, property);
        const auto* cls = classification_of(d.libraries[i], property);
        const std::string t = html(cell_text(c, cls));
        os << "<td class=\"" << css_class(c) << "\">";
        if ((c != nullptr && c->verdict == "fails") || unseen_intermittent(c, cls)) {
          os << "<a href=\"#" << anchor(d.libraries[i].name, property) << "\">" << t << "</a>";
        } else {
          os << t;
        }
        os << "</td>";
      }
      os << "</tr>\n";
    }
    os << "</table>\n";
    if (not_run != 0) os << "<h2>Not run here</h2>\n<ul>\n";
    for (const auto& lib : d.libraries) {
      if (lib.not_run.empty()) continue;
      os << "<li id=\"" << not_run_anchor(lib) << "\"><b>" << html(lib.name) << "</b>";
      if (!lib.adapter.empty()) os << " (<code>" << html(lib.adapter) << "</code>)";
      os << ": " << html(lib.not_run) << "</li>\n";
    }
    if (not_run != 0) os << "</ul>\n";
    const auto html_entry = [&](const failure& f, bool with_run) {
      const auto& lib = d.libraries[f.library];
      os << "<h3 id=\"" << anchor(lib.name, f.property) << "\">" << html(lib.name) << ": "
         << html(f.property) << " (" << html(entry_class(f.c, f.cls)) << ")</h3>\n<ul>\n";
      if (f.cls != nullptr) {
        os << "<li>evidence: " << html(f.cls->evidence) << "</li>\n";
        if (!f.cls->upstream.empty()) os << "<li>upstream: " << html(f.cls->upstream) << "</li>\n";
        if (!f.cls->reproducer.empty()) {
          os << "<li>reproducer (the library and PyTorch alone): <code>" << html(f.cls->reproducer)
             << "</code></li>\n";
        }
      }
      os << "<li>report: <code>" << html(f.c->report) << "</code> (executor " << html(f.c->executor)
         << ")</li>\n";
      if (with_run && !f.c->seed.empty()) {
        os << "<li>seed: <code>" << html(f.c->seed) << "</code></li>\n";
      }
      if (with_run && !f.c->reproduce.empty()) {
        os << "<li>reproduce: <code>" << html(f.c->reproduce) << "</code></li>\n";
      }
      os << "</ul>\n";
      if (with_run && !f.c->detail.empty()) os << "<pre>" << html(f.c->detail) << "</pre>\n";
    };
    if (!failures.empty()) os << "<h2>Failures</h2>\n";
    for (const auto& f : failures) html_entry(f, true);
    if (!unseen.empty()) os << "<h2>Intermittent defects this run did not show</h2>\n";
    for (const auto& u : unseen) html_entry(u, false);
    if (!m.problems.empty()) {
      os << "<h2>Problems</h2>\n<ul>\n";
      for (const auto& p : m.problems) os << "<li class=\"fails\">" << html(p) << "</li>\n";
      os << "</ul>\n";
    }
    os << "</body>\n</html>\n";
  }
  m.text = os.str();
  return m;
}

int conformance_main(const std::vector<std::string>& args) {
  return run_guarded("conformance", [&args] {
    std::string description_path;
    std::string out;
    auto app = make_app(
        "conformance",
        "Builds the conformance matrix of several libraries (library x property: holds, fails,\n"
        "n/a, skipped, not checked) from the JSON reports of `offloadkit check --report` and a\n"
        "description that names each library, its version, its reports and the classification\n"
        "of every failure (a defect of the library, with evidence and the upstream issue, or a\n"
        "documented limitation).",
        "The description (JSON):\n"
        "  {\"format\": \"offloadkit.conformance\", \"format_version\": 1, \"title\": \"...\",\n"
        "   \"libraries\": [{\"name\": \"...\", \"version\": \"...\", \"adapter\": \"...\", "
        "\"notes\": \"...\",\n"
        "                  \"reports\": [\"report.json\", ...],\n"
        "                  \"classified\": [{\"property\": \"feature/property\", \"class\": "
        "\"defect|limitation\",\n"
        "                                  \"evidence\": \"...\", \"upstream\": "
        "\"owner/repo#N\",\n"
        "                                  \"reproducer\": \"a command without offloadkit\",\n"
        "                                  \"intermittent\": false}]}]}\n"
        "A defect with \"intermittent\": true is a race that shows in some runs and not in\n"
        "others: where its property holds, the cell says so and links the defect, and the\n"
        "classification is not stale.\n"
        "Report paths are relative to the description's folder. A driver-fault report gives one\n"
        "row per feature, feature/driver_faults. A report that saw how the properties' (or the\n"
        "fault cases') processes exited gives feature/shutdown: it holds when every one exited\n"
        "cleanly after its result, and fails, once per library and feature, when one crashed,\n"
        "hung or exited non-zero at exit; classify it as any failure. A library that could not be "
        "checked here has\n"
        "\"not_run\": \"why\" instead of reports and classifications (its version may be left\n"
        "out): its column says \"not run\", and the reason is listed under the matrix.\n\n" +
            exit_status_text() +
            "  conformance: 1 when the matrix was written but a failure is unclassified or a\n"
            "  classification is stale.\n");
    app->add_option("DESCRIPTION", description_path, "the description file (JSON)")
        ->required()
        ->type_name("FILE");
    app->add_option("-o,--output", out,
                    "where the matrix is written: .md (Markdown) or .html (one page); default: "
                    "Markdown on stdout")
        ->type_name("FILE")
        ->check(CLI::Validator(
            [](const std::string& v) -> std::string {
              const auto dot = v.rfind('.');
              const std::string ext = dot == std::string::npos ? "" : v.substr(dot);
              if (ext == ".md" || ext == ".html") return "";
              return "'" + v + "' does not end in one of the valid extensions .md, .html";
            },
            ""));
    if (!parse_arguments(*app, args, std::cout)) return exit_status::ok;

    const conformance_description d = read_conformance_description(description_path);
    const std::string base = std::filesystem::path(description_path).parent_path().string();
    const bool as_html = out.size() > 5 && out.compare(out.size() - 5, 5, ".html") == 0;
    const conformance_matrix m = build_conformance_matrix(d, base.empty() ? "." : base, as_html);
    if (out.empty()) {
      std::cout << m.text;
    } else {
      report_file file(out);
      file.write(m.text);
      std::cout << "conformance matrix: " << out << " (" << m.libraries << " libraries, "
                << m.properties << " properties, " << m.failures << " failures)\n";
    }
    for (const auto& p : m.problems) std::cerr << "offloadkit conformance: " << p << "\n";
    return m.problems.empty() ? exit_status::ok : exit_status::check_failed;
  });
}

}  // namespace offloadkit::tools
