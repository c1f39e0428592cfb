// `offloadkit conformance`: the conformance matrix of several libraries (library x property, each
// cell holds / fails / not applicable / skipped / not checked), built from the JSON reports of
// `offloadkit check --report` and a description that names each library, its version, the
// reports it was checked in, and the classification of every failure: a defect of the library
// (with its evidence and, where one exists, the upstream issue) or a documented limitation. A
// failure that comes from offloadkit or from an adapter is fixed there, never classified. A library
// that could not be checked here (it does not import, say) is a column of "not run", with why.
#pragma once

#include <string>
#include <vector>

namespace offloadkit::tools {

/// What a failing cell is.
struct conformance_classification {
  std::string property;    ///< "feature/property", or "feature/driver_faults"
  std::string cls;         ///< "defect" or "limitation"
  std::string evidence;    ///< what shows it: the documentation, the shrunk case, ...
  std::string upstream;    ///< the matching upstream issue or pull request ("owner/repo#123")
  std::string reproducer;  ///< a command that shows a defect with the library alone (optional)
  /// A defect that depends on timing (a race): a run in which the property holds has not shown
  /// it, which does not make the classification stale; the cell says so and links the defect.
  bool intermittent = false;
};

struct conformance_library {
  std::string name;
  std::string version;               ///< the version or commit that was checked
  std::string adapter;               ///< how it was driven (the adapter's module or plugin)
  std::string notes;                 ///< what the adapter had to add, say
  std::vector<std::string> reports;  ///< JSON report paths (relative to the description's folder)
  std::vector<conformance_classification> classified;
  /// Why the library was not checked here (it does not import, say): its column says "not run"
  /// and the reason is listed; such a library has no reports and no classifications.
  std::string not_run;
};

struct conformance_description {
  std::string title;
  std::vector<conformance_library> libraries;
};

/// Reads a description file (format "offloadkit.conformance", version 1). Throws input_error
/// naming the file, the JSON pointer and what is wrong: an unknown key, a missing one, a class
/// other than defect or limitation.
conformance_description read_conformance_description(const std::string& path);

struct conformance_matrix {
  std::string text;  ///< the document, Markdown or HTML
  /// What keeps the matrix from being complete: a failure with no classification, a
  /// classification of a property that does not fail (but an intermittent defect's, whose
  /// property holds). Empty: every failure is classified.
  std::vector<std::string> problems;
  std::size_t libraries = 0, properties = 0, failures = 0;
};

/// Reads every library's reports (paths relative to `base_dir`) and builds the matrix, as
/// Markdown or (`html`) one self-contained page. Throws input_error for a report that cannot be
/// read, is not an offloadkit report, or gives one property of a library twice.
conformance_matrix build_conformance_matrix(const conformance_description& description,
                                            const std::string& base_dir, bool html);

/// `offloadkit conformance DESCRIPTION [-o FILE.md|FILE.html]` with `args` (the arguments after
/// the command's name). Returns the exit status: 0 the matrix is complete, 1 it was written but a
/// failure is unclassified (or a classification is stale), 2 bad usage, 5 an input file cannot be
/// read or is invalid, or the output cannot be written.
int conformance_main(const std::vector<std::string>& args);

}  // namespace offloadkit::tools
