#include "timeline_cli.hpp"

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "cli_common.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/traces/analysis.hpp"
#include "offloadkit/traces/capture.hpp"
#include "offloadkit/traces/cupti_recorder.hpp"
#include "offloadkit/traces/export.hpp"

namespace offloadkit::tools {
namespace {

namespace ot = ::offloadkit::traces;

/// Copy bandwidth limits above this are surely a typo (HBM itself is a few TB/s).
constexpr double max_limit_gb_per_s = 100000;

/// The analysis options capture and analyze share.
struct analysis_args {
  ot::analysis_options options;
  double h2d_limit = 0;  ///< GB/s; 0: no ratio printed
  double d2h_limit = 0;
  double min_overlap = -1;  ///< < 0: reported, not checked
  bool strict = false;      ///< fail on pageable copies / steady-state pinned allocs / syncs
  std::string svg;
};

CLI::Validator non_empty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& value) -> std::string {
        return value.empty() ? "'' is empty: give " + what : std::string();
      },
      "");
}

void add_analysis_options(CLI::App& app, analysis_args& a) {
  app.add_option("--svg", a.svg, "timeline picture (default: the timeline path with .svg)")
      ->type_name("FILE")
      ->transform(non_empty("the path of the picture"));
  app.add_option("--step-prefix", a.options.step_prefix,
                 "NVTX ranges/markers named P... delimit steps (default: step)")
      ->type_name("P")
      ->transform(non_empty("the start of the NVTX names that delimit steps"));
  const std::string limit_range =
      "more than 0, at most " + std::to_string(static_cast<long>(max_limit_gb_per_s));
  app.add_option("--h2d-limit", a.h2d_limit,
                 "print H2D bandwidth as a ratio to this limit\n(" + limit_range + ")")
      ->type_name("GB/s")
      ->transform(real_range(0, max_limit_gb_per_s, /*lo_open=*/true, "GB/s"));
  app.add_option("--d2h-limit", a.d2h_limit,
                 "print D2H bandwidth as a ratio to this limit\n(" + limit_range + ")")
      ->type_name("GB/s")
      ->transform(real_range(0, max_limit_gb_per_s, /*lo_open=*/true, "GB/s"));
  app.add_option("--min-overlap", a.min_overlap,
                 "fail unless at least F (0..1) of copy time overlaps\ncompute")
      ->type_name("F")
      ->transform(real_range(0, 1));
  app.add_flag("--strict", a.strict,
               "also fail on pageable copies, pinned allocations after\n"
               "the first step and host synchronizations inside steps");
}

std::string analysis_footer(const std::string& what) { return what + "\n\n" + exit_status_text(); }

std::string default_svg(const std::string& json_path) {
  const std::string ext = ".json";
  if (json_path.size() > ext.size() &&
      json_path.compare(json_path.size() - ext.size(), ext.size(), ext) == 0) {
    return json_path.substr(0, json_path.size() - ext.size()) + ".svg";
  }
  return json_path + ".svg";
}

/// Prints the report and the checks into `out`; returns exit_status::ok when every requested
/// check passed, check_failed otherwise.
int report(const ot::timeline& t, const analysis_args& a, std::ostream& out) {
  out << ot::summary(t, a.options, a.h2d_limit, a.d2h_limit) << "\n";
  int rc = exit_status::ok;
  std::vector<ot::check_report> reports;
  if (a.min_overlap >= 0) reports.push_back(ot::check_copy_overlap(t, a.min_overlap, a.options));
  if (a.strict) {
    reports.push_back(ot::check_no_pageable_copies(t));
    reports.push_back(ot::check_no_steady_state_pinned_allocations(t, a.options));
    reports.push_back(ot::check_no_host_syncs_in_steps(t, a.options));
  }
  for (const auto& r : reports) {
    out << (r.passed ? "PASS " : "FAIL ") << r.name << ": " << r.text << "\n";
    if (!r.passed) rc = exit_status::check_failed;
  }
  return rc;
}

ot::timeline parse_timeline(const std::string& path, const std::string& text) {
  try {
    return ot::parse_chrome_trace(text);
  } catch (const offloadkit::logic_error& e) {
    throw input_error(path + ": " + e.what());
  }
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw input_error(path + ": is a directory, not a timeline file");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw input_error(path + ": cannot be read (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw input_error(path + ": reading failed");
  return ss.str();
}

/// The report on stdout, then the picture written beside the timeline (or to --svg).
int analyse_file(const std::string& path, const analysis_args& a) {
  const ot::timeline t = parse_timeline(path, read_file(path));
  const int rc = report(t, a, std::cout);
  const std::string svg = a.svg.empty() ? default_svg(path) : a.svg;
  ot::svg_options so;
  so.title = t.source.empty() ? path : t.source;
  try {
    ot::write_svg(t, svg, so);
  } catch (const offloadkit::runtime_error& e) {
    throw input_error(svg + ": the picture cannot be written: " + e.what());
  }
  std::cout << "timeline: " << path << " (open in https://ui.perfetto.dev)\npicture: " << svg
            << "\n";
  return rc;
}

std::unique_ptr<CLI::App> analyze_app(analysis_args& a, std::string& path) {
  auto app = make_app("analyze",
                      "Reports on a captured timeline: overlap of copies and compute, pageable "
                      "copies,\npinned allocations and host synchronizations inside steps, "
                      "bandwidth per direction.",
                      analysis_footer("A check asked for (--min-overlap, --strict) that fails "
                                      "makes the exit status 1."));
  app->add_option("TIMELINE", path, "the timeline file (Chrome-trace JSON from capture)")
      ->type_name("FILE")
      ->required();
  add_analysis_options(*app, a);
  return app;
}

}  // namespace

int analyze_main(const std::vector<std::string>& args) {
  return run_guarded("analyze", [&args] {
    analysis_args a;
    std::string path;
    auto app = analyze_app(a, path);
    if (!parse_arguments(*app, args, std::cout)) return exit_status::ok;
    return analyse_file(path, a);
  });
}

int analyze_in_memory(const std::vector<std::string>& args, const std::string& timeline_text,
                      std::string& report_text) {
  analysis_args a;
  std::string path;
  auto app = analyze_app(a, path);
  std::ostringstream out;
  if (!parse_arguments(*app, args, out)) {
    report_text = out.str();
    return exit_status::ok;
  }
  const ot::timeline t = parse_timeline(path, timeline_text);
  const int rc = report(t, a, out);
  (void)ot::to_svg(t);
  report_text = out.str();
  return rc;
}

int capture_main(const std::vector<std::string>& args) {
  return run_guarded("capture", [&args] {
    analysis_args a;
    std::string out;
    std::vector<std::string> command;
    auto app =
        make_app("capture",
                 "Runs a CUDA program (PyTorch too) under the CUPTI recorder, writes its timeline\n"
                 "(Perfetto JSON) and an SVG picture, and reports on it as analyze does.",
                 analysis_footer("The command's own exit status, when it is not 0, is capture's.\n"
                                 "usage example: offloadkit capture -o out.json --strict -- python "
                                 "train.py"));
    app->add_option("-o,--output", out, "where the timeline is written")
        ->type_name("FILE")
        ->required()
        ->transform(non_empty("the path of the timeline file"));
    add_analysis_options(*app, a);
    app->add_option("COMMAND", command, "the program to run and its arguments, after --")
        ->type_name("")
        ->required();
    if (!parse_arguments(*app, args, std::cout)) return exit_status::ok;

    const std::string reason = ot::cupti_recorder::unavailable_reason();
    if (!reason.empty()) throw unavailable_error("CUPTI cannot record here: " + reason);
    ot::capture_result run;
    try {
      run = ot::capture_command(command, out, ot::find_injection_library());
    } catch (const offloadkit::runtime_error& e) {
      throw unavailable_error(e.what());
    }
    std::cout << "command: " << run.command_line << " (exit " << run.exit_status << ")\n";
    if (!run.timeline_written) {
      const std::string why = "no timeline was written to " + run.timeline_path +
                              ": the command made no CUDA driver call, or it ended without "
                              "running exit handlers";
      if (run.exit_status == 0) throw input_error(why);
      std::cerr << "offloadkit capture: " << why << "\n";
      return run.exit_status;
    }
    const int rc = analyse_file(run.timeline_path, a);
    return run.exit_status != 0 ? run.exit_status : rc;
  });
}

}  // namespace offloadkit::tools
