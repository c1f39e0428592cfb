// The --report writer on its own: formats chosen by extension, the file opened before anything
// runs, and every verdict, profile and fault case in each format (the --driver-faults report,
// whose runs need a GPU, is checked here on made-up cases). The reports of real runs are checked
// by tests/expect_report.cmake.
#include "report.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "cli_common.hpp"
#include "offloadkit/testing/battery_list.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::tools {
namespace {

std::string scratch_path(const std::string& name) {
  return ::testing::TempDir() + "offloadkit_report_test_" + std::to_string(::getpid()) + "_" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ReportFormat, ChosenByExtension) {
  EXPECT_EQ(report_format_of("r.md"), report_format::markdown);
  EXPECT_EQ(report_format_of("dir.x/r.json"), report_format::json);
  EXPECT_EQ(report_format_of("/tmp/r.html"), report_format::html);
  for (const char* bad : {"r.txt", "r.htm", "md", ".json", "", "r.md.bak"}) {
    try {
      (void)report_format_of(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const usage_error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(contains(what, "--report: '" + std::string(bad) + "'")) << what;
      EXPECT_TRUE(contains(what, "valid extensions are .md, .json, .html")) << what;
    }
  }
}

TEST(ReportFile, UnwritablePathIsFoundWhenOpened) {
  const std::string missing = scratch_path("no/such/folder/r.md");
  try {
    report_file f(missing);
    ADD_FAILURE() << "opened " << missing;
  } catch (const input_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--report: cannot open '" + missing + "' for writing: No such file or directory");
  }
  // A folder named like a report.
  const std::string folder = scratch_path("folder.json");
  ASSERT_EQ(::mkdir(folder.c_str(), 0700), 0);
  EXPECT_THROW(report_file{folder}, input_error);
  ::rmdir(folder.c_str());
}

TEST(ReportFile, WriteReplacesTheContents) {
  const std::string path = scratch_path("replace.md");
  {
    report_file f(path);
    EXPECT_EQ(read_file(path), "");  // created when opened
    f.write("a longer first text\n");
    f.write("short\n");
  }
  EXPECT_EQ(read_file(path), "short\n");
  std::remove(path.c_str());
}

TEST(ReportHeader, CommandLineAsOneShellLine) {
  const report_header h =
      common_report_header("offloadkit", {"check"}, {"--plugin", "/a b/lib.so", "--cases", "3"});
  EXPECT_EQ(h.command_line, "offloadkit check --plugin '/a b/lib.so' --cases 3");
  EXPECT_FALSE(h.version.empty());
  EXPECT_FALSE(h.host.empty());
  EXPECT_TRUE(std::regex_match(h.date_utc, std::regex("[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} UTC")))
      << h.date_utc;
}

TEST(ReportProfile, BatteryListCarriesTheDescriptorsFlags) {
  testing::stash_implementation impl;
  impl.name = "mine";
  impl.caps.capturable = false;
  impl.caps.page_ids = true;
  impl.support.host = false;
  testing::battery_list<testing::stash_implementation> list("stash", impl);
  list.add(
      "runs", [](executor&, const testing::stash_implementation&) {}, 5);
  list.add_if(false, "graphs", {}, 5, "profile says not capturable");
  const std::vector<check_case> cases = std::move(list).take();
  const profile_flags expected = {{"capturable", "no"},
                                  {"page_ids", "yes"},
                                  {"overflow", "per-key status word"},
                                  {"placement", "split within a key (device first)"},
                                  {"unknown_restore", "recorded as restore_empty"},
                                  {"config_validation", "at construction"},
                                  {"key_space", "vp < 256, layer < 4096, microbatch < 4096"},
                                  {"cuda", "yes"},
                                  {"host", "no"},
                                  {"executor_allocations", "yes"}};
  ASSERT_EQ(cases.size(), 2U);
  EXPECT_EQ(cases[0].profile, expected);
  EXPECT_EQ(cases[1].profile, expected);
  const auto profiles = profiles_of(cases);
  ASSERT_EQ(profiles.size(), 1U);
  EXPECT_EQ(profiles[0].implementation, "mine");
  EXPECT_EQ(profiles[0].flags, expected);
}

check_outcome outcome(const std::string& name) {
  check_outcome o;
  o.feature = "stash";
  o.implementation = "mine";
  o.name = name;
  o.executor_name = "host";
  o.seed = 42;
  o.cases_planned = 3;
  return o;
}

check_report sample_check_report() {
  check_report r;
  r.header = common_report_header("offloadkit", {"check"}, {"--plugin", "/x/lib.so"});
  r.header.executor = "host";
  r.header.executor_why = "asked for with --executor host";
  r.header.seed = 42;
  r.header.seed_fresh = true;
  r.header.cases = "3 per property (--cases)";
  r.header.subject_kind = "plugin";
  r.header.subject = "/x/lib.so";
  r.header.isolation = "each in a child process (time limit 600 s)";
  r.profiles = {{"stash", "mine", {{"capturable", "no"}, {"page_ids", "yes"}}}};

  report_row holds;
  holds.outcome = outcome("round_trip");
  holds.outcome.passed = true;
  holds.outcome.cases_run = 3;
  report_row fails;
  fails.outcome = outcome("exhaustion");
  fails.outcome.cases_run = 2;
  fails.outcome.message = "Falsifiable after 2 tests\nrows = `7` | <b>";
  fails.abnormal_end = "crashed: signal 11 (SIGSEGV)";
  fails.has_result = false;
  fails.output = "last line of output\n";
  fails.reproduce = "offloadkit check --seed 42 --cases 3 --property exhaustion";
  fails.debug = "gdb --args offloadkit check --seed 42 --in-process";
  report_row not_applicable;
  not_applicable.outcome = outcome("graphs");
  not_applicable.outcome.skipped = true;
  not_applicable.outcome.not_applicable = true;
  not_applicable.outcome.message = "not applicable: profile says not capturable";
  report_row skipped;
  skipped.outcome = outcome("two_devices");
  skipped.outcome.skipped = true;
  skipped.outcome.message = "skipped: needs 2 devices, the executor has 1";
  r.rows = {holds, fails, not_applicable, skipped};
  r.selected = 4;
  r.notes = {"region: not provided by the plugin"};
  r.seconds = 1.5;
  return r;
}

TEST(CheckReport, JsonHasEveryRowAndItsEvidence) {
  // A second property ruled out by the profile, so that no two counts of the summary are equal.
  check_report r = sample_check_report();
  report_row also_not_applicable = r.rows[2];
  also_not_applicable.outcome.name = "graph_replay";
  r.rows.push_back(also_not_applicable);
  r.selected = 5;
  const auto j = nlohmann::json::parse(render_report(r, report_format::json));
  EXPECT_EQ(j.at("format"), "offloadkit.report");
  EXPECT_EQ(j.at("kind"), "properties");
  EXPECT_EQ(j.at("header").at("seed"), 42);
  EXPECT_EQ(j.at("header").at("subject").at("kind"), "plugin");
  EXPECT_EQ(j.at("profiles").at(0).at("declared").at("page_ids"), true);
  const auto& rows = j.at("properties");
  ASSERT_EQ(rows.size(), 5U);
  EXPECT_EQ(rows[0].at("verdict"), "holds");
  EXPECT_EQ(rows[1].at("verdict"), "fails");
  EXPECT_EQ(rows[1].at("seed"), 42);
  EXPECT_EQ(rows[1].at("process_end"), "crashed: signal 11 (SIGSEGV)");
  EXPECT_EQ(rows[1].at("reproduce"), "offloadkit check --seed 42 --cases 3 --property exhaustion");
  EXPECT_TRUE(contains(rows[1].at("message").get<std::string>(), "rows = `7`"));
  EXPECT_EQ(rows[1].at("output"), "last line of output\n");
  EXPECT_EQ(rows[2].at("verdict"), "not_applicable");
  EXPECT_EQ(rows[2].at("reason"), "profile says not capturable");
  EXPECT_EQ(rows[3].at("verdict"), "skipped");
  EXPECT_EQ(rows[4].at("verdict"), "not_applicable");
  const auto& summary = j.at("summary");
  EXPECT_EQ(summary.at("holds"), 1);
  EXPECT_EQ(summary.at("fails"), 1);
  EXPECT_EQ(summary.at("not_applicable"), 2);
  EXPECT_EQ(summary.at("skipped"), 1);
  EXPECT_EQ(summary.at("complete"), true);
  EXPECT_EQ(j.at("not_checked").at(0), "region: not provided by the plugin");
}

TEST(CheckReport, MarkdownHasEveryRowAndEscapesWhatItQuotes) {
  const std::string md = render_report(sample_check_report(), report_format::markdown);
  EXPECT_TRUE(contains(md, "| stash | mine | round_trip | holds | 3 of 3 |")) << md;
  EXPECT_TRUE(
      contains(md, "| stash | mine | exhaustion | **fails, crashed: signal 11 (SIGSEGV)** |"))
      << md;
  EXPECT_TRUE(contains(md, "| stash | mine | graphs | not applicable | - |")) << md;
  EXPECT_TRUE(contains(md, "| capturable | page_ids |\n|---|---|\n| no | yes |")) << md;
  EXPECT_TRUE(contains(md,
                       "- reproduce: `offloadkit check --seed 42 --cases 3 --property "
                       "exhaustion`"))
      << md;
  EXPECT_TRUE(contains(md, "```\nFalsifiable after 2 tests\nrows = `7` | <b>\n```")) << md;
  EXPECT_TRUE(contains(md, "- **stash/mine graphs**: not applicable: profile says not capturable"))
      << md;
  EXPECT_TRUE(contains(md, "- not checked: region: not provided by the plugin")) << md;
  EXPECT_TRUE(contains(md, "1 hold, 1 fail, 1 not applicable, 1 skipped (4 properties")) << md;
}

TEST(CheckReport, HtmlIsOnePageWithColouredVerdicts) {
  const std::string page = render_report(sample_check_report(), report_format::html);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0U);
  EXPECT_TRUE(contains(page, "<style>"));
  EXPECT_FALSE(contains(page, "<script"));
  EXPECT_FALSE(contains(page, "<link"));
  EXPECT_TRUE(contains(page, "<td>round_trip</td><td class=\"holds\"")) << page;
  EXPECT_TRUE(contains(page, "<td>exhaustion</td><td class=\"fails\"")) << page;
  EXPECT_TRUE(contains(page, "<td>graphs</td><td class=\"not_applicable\"")) << page;
  EXPECT_TRUE(contains(page, "<td>two_devices</td><td class=\"skipped\"")) << page;
  // The message, in the verdict's title and in the failure's section, escaped in both.
  EXPECT_TRUE(contains(page, "title=\"Falsifiable after 2 tests\nrows = `7` | &lt;b&gt;\">"))
      << page;
  EXPECT_TRUE(contains(page, "<pre>Falsifiable after 2 tests\nrows = `7` | &lt;b&gt;</pre>"))
      << page;
  EXPECT_FALSE(contains(page, "| <b>")) << "the message's markup is written unescaped";
}

TEST(CheckReport, AnInterruptedRunSaysSo) {
  check_report r = sample_check_report();
  r.rows.resize(2);
  r.stopped = "interrupted by SIGINT after 2 of 4 properties";
  for (auto format : {report_format::markdown, report_format::html}) {
    EXPECT_TRUE(contains(render_report(r, format),
                         "(2 properties of 4 selected, 1.5 s); the run stopped early: "
                         "interrupted by SIGINT after 2 of 4 properties"));
  }
  const auto j = nlohmann::json::parse(render_report(r, report_format::json));
  EXPECT_EQ(j.at("summary").at("complete"), false);
  EXPECT_EQ(j.at("summary").at("selected"), 4);
}

fault_report sample_fault_report() {
  fault_report r;
  r.header = common_report_header("offloadkit", {"check"}, {"--driver-faults"});
  r.header.executor = "cuda";
  r.header.executor_why = "--driver-faults";
  r.header.cases = "N = 0, 1, 2, ... until a run reaches no call N";
  r.header.subject_kind = "plugin";
  r.header.subject = "/x/lib.so";
  r.interposer = "/x/liboffloadkit_interpose.so";
  fault_report_feature f;
  f.feature = "region";
  f.implementation = "leaky";
  f.scenario = "create, write, pause, resume, verify, destroy";
  f.profile = {{"address_stable", "yes"}, {"graphs", "own"}};
  interpose::case_row clean;
  clean.n = 0;
  clean.call = "cuMemCreate";
  clean.cls = interpose::fault_class::clean;
  clean.detail = "cuda_error in create; the retry worked";
  interpose::case_row leak;
  leak.n = 1;
  leak.call = "cuMemMap";
  leak.cls = interpose::fault_class::leak;
  leak.detail = "1 physical allocation handle(s) created and never released";
  leak.output = "mapping failed\n";
  interpose::case_row last;
  last.n = 2;
  last.cls = interpose::fault_class::clean;
  last.detail = "no call 2: the run made 2 counted call(s)";
  f.rows = {clean, leak, last};
  f.reproduce = {"offloadkit check --fault-call 0", "offloadkit check --fault-call 1",
                 "offloadkit check --fault-call 2"};
  f.complete = true;
  r.features = {f};
  r.notes = {"stash: not provided by the plugin"};
  return r;
}

TEST(FaultReport, EveryCaseWithItsClassInEachFormat) {
  const fault_report r = sample_fault_report();
  const auto j = nlohmann::json::parse(render_report(r, report_format::json));
  EXPECT_EQ(j.at("kind"), "driver_faults");
  const auto& cases = j.at("features").at(0).at("cases");
  ASSERT_EQ(cases.size(), 3U);
  EXPECT_EQ(cases[1].at("class"), "leak");
  EXPECT_EQ(cases[1].at("call"), "cuMemMap");
  EXPECT_EQ(cases[1].at("reproduce"), "offloadkit check --fault-call 1");
  EXPECT_EQ(cases[1].at("output"), "mapping failed\n");
  EXPECT_TRUE(cases[2].at("call").is_null());
  EXPECT_EQ(j.at("features").at(0).at("counts").at("clean"), 2);
  EXPECT_EQ(j.at("features").at(0).at("declared").at("address_stable"), true);
  EXPECT_EQ(j.at("summary").at("every_case_clean"), false);

  const std::string md = render_report(r, report_format::markdown);
  EXPECT_TRUE(contains(md, "| 1 | cuMemMap | **leak** | 1 physical allocation")) << md;
  EXPECT_TRUE(contains(md, "| 2 | (no call N) | clean |")) << md;
  EXPECT_TRUE(contains(md, "- reproduce: `offloadkit check --fault-call 1`")) << md;
  EXPECT_TRUE(contains(md, "3 case(s) in 1 feature(s)")) << md;
  EXPECT_TRUE(contains(md, "NOT every case clean (2 clean, 1 leak)")) << md;

  const std::string page = render_report(r, report_format::html);
  EXPECT_TRUE(contains(page, "<td>cuMemMap</td><td class=\"bad\">leak</td>")) << page;
  EXPECT_TRUE(contains(page, "<td>cuMemCreate</td><td class=\"clean\">clean</td>")) << page;
}

TEST(FaultReport, ACrashAfterTheResultIsTheFeaturesShutdownFindingInEachFormat) {
  fault_report r = sample_fault_report();
  auto& rows = r.features.at(0).rows;
  rows[0].shutdown = "crashed: signal 11 (SIGSEGV) after its result";
  rows[0].output = "tearing down\n";
  rows[2].shutdown = rows[0].shutdown;  // the case with no failure injected too
  const auto j = nlohmann::json::parse(render_report(r, report_format::json));
  const auto& feature = j.at("features").at(0);
  EXPECT_EQ(feature.at("cases").at(0).at("class"), "clean");
  EXPECT_EQ(feature.at("cases").at(0).at("shutdown"), rows[0].shutdown);
  EXPECT_TRUE(feature.at("cases").at(1).at("shutdown").is_null());
  const auto& shutdown = feature.at("shutdown");
  EXPECT_EQ(shutdown.at("clean"), false);
  ASSERT_EQ(shutdown.at("findings").size(), 1U);
  const auto& finding = shutdown.at("findings").at(0);
  EXPECT_EQ(finding.at("cases"), nlohmann::json::array({0, 2}));
  EXPECT_EQ(finding.at("of"), 3);
  EXPECT_EQ(finding.at("without_fault"), true);
  EXPECT_EQ(finding.at("reproduce"), "offloadkit check --fault-call 0");
  EXPECT_EQ(finding.at("output"), "tearing down\n");
  EXPECT_TRUE(contains(finding.at("text").get<std::string>(),
                       "2 of 3 cases' processes (N=0, 2) crashed: signal 11 (SIGSEGV) after its "
                       "result, including the case with no failure injected"));
  EXPECT_TRUE(
      contains(j.at("summary").at("text").get<std::string>(), "; shutdown: region: 2 of 3"));

  const std::string md = render_report(r, report_format::markdown);
  EXPECT_TRUE(contains(md, "### region shutdown\n\n2 of 3 cases' processes (N=0, 2)")) << md;
  const std::string page = render_report(r, report_format::html);
  EXPECT_TRUE(contains(page, "<h3 class=\"bad\">region shutdown</h3>")) << page;
}

}  // namespace
}  // namespace offloadkit::tools
