// The command line's shared pieces: range validators, error wording and help. The first test pins
// what CLI11 2.1.2 does without them (it wraps "-5" into an unsigned option and reads "010" as
// octal), which is the bug the validators exist for.
#include "cli_common.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace {

using offloadkit::tools::integer_range;
using offloadkit::tools::json_string;
using offloadkit::tools::make_app;
using offloadkit::tools::one_of;
using offloadkit::tools::parse_arguments;
using offloadkit::tools::parse_program_arguments;
using offloadkit::tools::real_range;
using offloadkit::tools::unsigned_range;
using offloadkit::tools::usage_error;

/// The message parse_arguments throws for `args`, or "" when they are accepted.
std::string refusal(CLI::App& app, const std::vector<std::string>& args) {
  std::ostringstream help;
  try {
    parse_arguments(app, args, help);
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}

// The planted bug: an unsigned option on CLI11 alone, as the command line parsed numbers before.
TEST(CliCommon, Cli11AloneWrapsNegativeNumbersAndReadsOctal) {
  std::uint64_t pages = 0;
  auto app = make_app("test", "");
  app->add_option("--pages", pages);
  EXPECT_EQ(refusal(*app, {"--pages", "-5"}), "");
  EXPECT_EQ(pages, UINT64_MAX - 4);
  EXPECT_EQ(refusal(*app, {"--pages", "010"}), "");
  EXPECT_EQ(pages, 8u);
}

TEST(CliCommon, UnsignedRange) {
  std::uint64_t pages = 0;
  auto app = make_app("test", "");
  app->add_option("--pages", pages)->transform(unsigned_range(1, UINT64_MAX));
  const std::string range = "valid range 1..18446744073709551615";
  EXPECT_EQ(refusal(*app, {"--pages", "-5"}), "--pages: -5 is out of range: " + range);
  EXPECT_EQ(refusal(*app, {"--pages", "-0"}), "--pages: -0 is out of range: " + range);
  EXPECT_EQ(refusal(*app, {"--pages", "18446744073709551616"}),
            "--pages: 18446744073709551616 is out of range: " + range);
  EXPECT_EQ(refusal(*app, {"--pages", "1e3"}), "--pages: 1e3 is not an integer: " + range);
  EXPECT_EQ(refusal(*app, {"--pages", "0x10"}), "--pages: 0x10 is not an integer: " + range);
  EXPECT_EQ(refusal(*app, {"--pages", " 5"}), "--pages: ' 5' is not an integer: " + range);
  EXPECT_EQ(refusal(*app, {"--pages=010"}), "");
  EXPECT_EQ(pages, 10u);
  EXPECT_EQ(refusal(*app, {"--pages", "18446744073709551615"}), "");
  EXPECT_EQ(pages, UINT64_MAX);
}

TEST(CliCommon, IntegerRange) {
  int n = 0;
  auto app = make_app("test", "");
  app->add_option("--n", n)->transform(integer_range(-3, 7));
  EXPECT_EQ(refusal(*app, {"--n", "-4"}), "--n: -4 is out of range: valid range -3..7");
  EXPECT_EQ(refusal(*app, {"--n", "8"}), "--n: 8 is out of range: valid range -3..7");
  EXPECT_EQ(refusal(*app, {"--n", "-9223372036854775809"}),
            "--n: -9223372036854775809 is out of range: valid range -3..7");
  EXPECT_EQ(refusal(*app, {"--n", "2.0"}), "--n: 2.0 is not an integer: valid range -3..7");
  EXPECT_EQ(refusal(*app, {"--n", "-"}), "--n: - is not an integer: valid range -3..7");
  EXPECT_EQ(refusal(*app, {"--n", "-3"}), "");
  EXPECT_EQ(n, -3);
}

TEST(CliCommon, RealRange) {
  double f = -1;
  double limit = 0;
  auto app = make_app("test", "");
  app->add_option("--f", f)->transform(real_range(0, 1));
  app->add_option("--limit", limit)->transform(real_range(0, 100, true, "GB/s"));
  EXPECT_EQ(refusal(*app, {"--f", "2"}), "--f: 2 is out of range: valid range 0..1");
  EXPECT_EQ(refusal(*app, {"--f", "nan"}), "--f: nan is not a number: valid range 0..1");
  EXPECT_EQ(refusal(*app, {"--f", "inf"}), "--f: inf is not a number: valid range 0..1");
  EXPECT_EQ(refusal(*app, {"--f", "0x1p-1"}), "--f: 0x1p-1 is not a number: valid range 0..1");
  EXPECT_EQ(refusal(*app, {"--f", "1e999"}), "--f: 1e999 is out of range: valid range 0..1");
  EXPECT_EQ(refusal(*app, {"--limit", "0"}),
            "--limit: 0 is out of range: valid range: more than 0 and at most 100 GB/s");
  EXPECT_EQ(refusal(*app, {"--f", "0.25", "--limit", "1e2"}), "");
  EXPECT_EQ(f, 0.25);
  EXPECT_EQ(limit, 100);
}

TEST(CliCommon, ErrorsNameTheOption) {
  std::string executor;
  bool flag = false;
  auto app = make_app("test", "");
  app->add_option("--executor", executor)->type_name("NAME")->transform(one_of({"host", "cuda"}));
  app->add_flag("--flag", flag);
  EXPECT_EQ(refusal(*app, {"--executor", "gpu"}),
            "--executor: gpu is not one of the valid values host, cuda");
  EXPECT_EQ(refusal(*app, {"--executor"}), "--executor: needs a value (NAME)");
  EXPECT_EQ(refusal(*app, {"--executor", "host", "--executor", "cuda"}),
            "--executor: given more than once");
  EXPECT_EQ(refusal(*app, {"--flag=1"}), "--flag: takes no value");
  EXPECT_EQ(refusal(*app, {"--fast"}),
            "--fast: unknown option: valid options are --help, --executor, --flag");
  EXPECT_EQ(refusal(*app, {"--fast=3"}),
            "--fast: unknown option: valid options are --help, --executor, --flag");
  EXPECT_EQ(refusal(*app, {"stray"}), "stray: unexpected argument");
}

TEST(CliCommon, HelpGoesToItsStream) {
  auto app = make_app("test", "Does a test.", "footer line");
  int n = 0;
  app->add_option("--n", n, "how many")->type_name("N");
  std::ostringstream help;
  EXPECT_FALSE(parse_arguments(*app, {"--help"}, help));
  EXPECT_NE(help.str().find("usage: offloadkit test [options]"), std::string::npos) << help.str();
  EXPECT_NE(help.str().find("--n N"), std::string::npos) << help.str();
  EXPECT_NE(help.str().find("footer line"), std::string::npos) << help.str();
}

TEST(CliCommon, AProgramWithoutCommandsParsesItsArgumentsAndSaysWhatToDo) {
  auto app = make_app("", "Measures a thing.", "exit status: ...", "bench_thing");
  int reps = 5;
  app->add_option("--reps", reps, "rounds")->type_name("N")->check(integer_range(1, 100));
  std::ostringstream out, err;
  const char* go_on[] = {"bench_thing", "--reps", "7"};
  EXPECT_EQ(parse_program_arguments(*app, 3, go_on, out, err), -1);
  EXPECT_EQ(reps, 7);
  EXPECT_EQ(err.str(), "");

  auto help_app = make_app("", "Measures a thing.", "exit status: ...", "bench_thing");
  const char* help[] = {"bench_thing", "--help"};
  EXPECT_EQ(parse_program_arguments(*help_app, 2, help, out, err), 0);
  EXPECT_NE(out.str().find("usage: bench_thing [options]"), std::string::npos) << out.str();

  auto bad_app = make_app("", "Measures a thing.", "", "bench_thing");
  bad_app->add_option("--reps", reps, "rounds")->type_name("N")->check(integer_range(1, 100));
  const char* bad[] = {"bench_thing", "--reps", "0"};
  EXPECT_EQ(parse_program_arguments(*bad_app, 3, bad, out, err), 2);
  EXPECT_EQ(err.str(),
            "bench_thing: --reps: 0 is out of range: valid range 1..100\n"
            "(bench_thing --help shows the usage)\n");
}

TEST(CliCommon, JsonStringEscapesAndReplacesWhatIsNotUtf8) {
  EXPECT_EQ(json_string("plain"), "\"plain\"");
  EXPECT_EQ(json_string("a \"b\" c\\d\ne"), "\"a \\\"b\\\" c\\\\d\\ne\"");
  EXPECT_EQ(json_string(std::string("x\x01y", 3)), "\"x\\u0001y\"");
  EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
  EXPECT_EQ(json_string("bad \xff byte"), "\"bad \xef\xbf\xbd byte\"");
}

}  // namespace
