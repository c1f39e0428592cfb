// The benchmark harness: the command line (defaults, --json after the benchmark's own options,
// usage errors and exit statuses), skipping without a GPU, the JSON file, and the limits and
// statistics the figures are computed with.
#include "harness.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"

namespace {

namespace bench = offloadkit::bench;
namespace tools = offloadkit::tools;

/// What one run of a command line gave: its status, stdout and stderr, and whether the body ran.
struct outcome {
  int status = -1;
  std::string out, err;
  bool ran = false;
};

/// `cl` run as "bench_t" with `args`, `body` its run, stdout and stderr captured.
outcome run_on(bench::command_line& cl, const std::vector<std::string>& args,
               const std::function<int()>& body) {
  std::vector<const char*> argv{"bench_t"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  outcome o;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  o.status = cl.run(static_cast<int>(argv.size()), argv.data(), [&] {
    o.ran = true;
    return body();
  });
  o.err = testing::internal::GetCapturedStderr();
  o.out = testing::internal::GetCapturedStdout();
  return o;
}

/// A benchmark "bench_t" with one option `--n N` (1..10) run with `args`; `body` is its run.
outcome run_command(const std::vector<std::string>& args, const std::function<int()>& body,
                    std::string* executor = nullptr, std::string* json = nullptr) {
  bench::command_line cl("bench_t", "A test benchmark.", "Exit status: 0 ok.");
  int n = 1;
  cl.app()
      .add_option("--n", n, "a number, 1..10")
      ->type_name("N")
      ->check(tools::integer_range(1, 10));
  return run_on(cl, args, [&] {
    if (executor != nullptr) *executor = cl.executor_name();
    if (json != nullptr) *json = cl.json_path();
    return body();
  });
}

int ok() { return 0; }

TEST(BenchHarness, DefaultsToCudaWithoutJson) {
  std::string executor, json = "x";
  const outcome o = run_command({}, ok, &executor, &json);
  EXPECT_EQ(o.status, 0);
  EXPECT_TRUE(o.ran);
  EXPECT_EQ(executor, "cuda");
  EXPECT_EQ(json, "");
}

TEST(BenchHarness, ReadsExecutorAndJson) {
  std::string executor, json;
  const outcome o =
      run_command({"--executor", "host", "--json", "f.json", "--n", "3"}, ok, &executor, &json);
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(executor, "host");
  EXPECT_EQ(json, "f.json");
}

TEST(BenchHarness, UsageErrorsNameOptionValueAndRangeAndExitTwo) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--executor", "gpu"}, "bench_t: --executor: gpu is not one of the valid values cuda, host"},
      {{"--n", "0"}, "bench_t: --n: 0 is out of range: valid range 1..10"},
      {{"--n", "many"}, "bench_t: --n: many is not an integer: valid range 1..10"},
      {{"--json"}, "bench_t: --json: needs a value"},
      // --json comes after the benchmark's own options.
      {{"--fast"},
       "bench_t: --fast: unknown option: valid options are --help, --executor, --n, "
       "--json"},
  };
  for (const auto& c : cases) {
    const outcome o = run_command(c.args, ok);
    EXPECT_EQ(o.status, tools::exit_status::usage) << c.message;
    EXPECT_FALSE(o.ran) << c.message;
    EXPECT_NE(o.err.find(c.message), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("(bench_t --help shows the usage)"), std::string::npos) << o.err;
  }
}

TEST(BenchHarness, HelpExitsZeroWithoutRunning) {
  const outcome o = run_command({"--help"}, ok);
  EXPECT_EQ(o.status, 0);
  EXPECT_FALSE(o.ran);
  EXPECT_NE(o.out.find("usage: bench_t"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("--executor cuda|host"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("--json FILE"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("Exit status: 0 ok."), std::string::npos) << o.out;
  EXPECT_LT(o.out.find("--n N"), o.out.find("--json FILE")) << o.out;
}

TEST(BenchHarness, BodyStatusAndErrors) {
  EXPECT_EQ(run_command({}, [] { return 1; }).status, 1);
  const outcome failed = run_command({}, []() -> int { throw std::runtime_error("it broke"); });
  EXPECT_EQ(failed.status, tools::exit_status::check_failed);
  EXPECT_EQ(failed.err, "bench_t: it broke\n");
  const outcome usage =
      run_command({}, []() -> int { throw tools::usage_error("--n: 9 is out of range here"); });
  EXPECT_EQ(usage.status, tools::exit_status::usage);
  EXPECT_EQ(usage.err, "bench_t: --n: 9 is out of range here\n(bench_t --help shows the usage)\n");
}

TEST(BenchHarness, SkipsWithReasonWhereNoGpuIsUsable) {
  const std::string reason = offloadkit::cuda_unavailable_reason();
  bench::command_line cl("bench_t", "A test benchmark.", "");
  const char* argv[] = {"bench_t"};
  std::string skipped = "stale";
  std::unique_ptr<offloadkit::executor> ex;
  testing::internal::CaptureStdout();
  const int status = cl.run(1, argv, [&] {
    ex = cl.make_executor(skipped);
    return ex ? 0 : cl.skip(skipped);
  });
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(status, 0);
  if (reason.empty()) {
    EXPECT_NE(ex, nullptr);
    EXPECT_EQ(skipped, "");
  } else {
    EXPECT_EQ(ex, nullptr);
    EXPECT_EQ(skipped, reason);
    EXPECT_EQ(out, "skipped: " + reason + "\n");
  }
}

TEST(BenchHarness, HostExecutorIsNeverSkipped) {
  bench::command_line cl("bench_t", "A test benchmark.", "");
  const char* argv[] = {"bench_t", "--executor", "host"};
  std::string skipped = "stale";
  std::unique_ptr<offloadkit::executor> ex;
  EXPECT_EQ(cl.run(3, argv,
                   [&] {
                     ex = cl.make_executor(skipped);
                     return 0;
                   }),
            0);
  ASSERT_NE(ex, nullptr);
  EXPECT_EQ(ex->name(), "host");
  EXPECT_EQ(skipped, "");
}

TEST(BenchHarness, GpuOnlyBenchmarksSkipOnHostAndWithoutGpu) {
  EXPECT_EQ(bench::gpu_only_skip_reason("host", "needs the cuda executor"),
            "needs the cuda executor");
  const std::string reason = offloadkit::cuda_unavailable_reason();
  EXPECT_EQ(bench::gpu_only_skip_reason("cuda", "needs the cuda executor"),
            reason.empty() ? "" : "no usable GPU: " + reason);
}

/// A fresh folder for one test's files.
std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("bench_harness_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(BenchHarness, JsonKeepsKeyOrderAndWritesNullForNonFinite) {
  const auto dir = scratch("json");
  const std::string path = (dir / "figures.json").string();
  bench::json doc = {{"benchmark", "t"},
                     {"executor", "host"},
                     {"rows", {{{"ratio", 0.5}, {"wrong", 0}}}},
                     {"limit", std::numeric_limits<double>::infinity()},
                     {"nan", std::nan("")},
                     {"command", std::string("bad \xff byte")}};
  bench::write_json(path, doc);
  const std::string text = read_file(path);
  const auto back = nlohmann::json::parse(text);
  EXPECT_LT(text.find("\"benchmark\""), text.find("\"executor\""));
  EXPECT_LT(text.find("\"executor\""), text.find("\"rows\""));
  EXPECT_EQ(back["rows"][0]["ratio"], 0.5);
  EXPECT_TRUE(back["limit"].is_null());
  EXPECT_TRUE(back["nan"].is_null());
  EXPECT_EQ(back["command"], "bad \xef\xbf\xbd byte");
  EXPECT_EQ(text.back(), '\n');
  std::filesystem::remove_all(dir);
}

TEST(BenchHarness, JsonThatCannotBeWrittenIsAnInputErrorNamingTheFile) {
  const auto dir = scratch("json_error");
  const std::string folder = dir.string();
  try {
    bench::write_json(folder, bench::json::object());
    ADD_FAILURE() << "a folder was written as a file";
  } catch (const offloadkit::input_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--json " + folder + ": cannot write the file: " + folder + " is a folder");
  }
  const std::string missing = (dir / "no" / "such" / "f.json").string();
  try {
    bench::write_json(missing, bench::json::object());
    ADD_FAILURE() << "a file in a missing folder was written";
  } catch (const offloadkit::input_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--json " + missing + ": cannot write the file: No such file or directory");
  }
  std::filesystem::remove_all(dir);
}

/// `skip` run as a benchmark's body with `args`: its outcome and the JSON file it wrote, if any.
outcome skip_with(const std::vector<std::string>& args, const bench::json& doc) {
  bench::command_line cl("bench_t", "A test benchmark.", "");
  return run_on(cl, args, [&] { return cl.skip("no usable GPU: none here", doc); });
}

TEST(BenchHarness, SkipWritesWhyIntoTheJsonFile) {
  const auto dir = scratch("skip_json");
  const std::string file = (dir / "f.json").string();
  const outcome plain = skip_with({"--json", file}, bench::json::object());
  EXPECT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.out, "skipped: no usable GPU: none here\n");
  std::ifstream in(file);
  const bench::json back = bench::json::parse(in);
  EXPECT_EQ(back["benchmark"], "bench_t");
  EXPECT_EQ(back["command"], "bench_t --json " + file);
  EXPECT_EQ(back["skipped"], "no usable GPU: none here");

  // A benchmark's own document (figures that need no GPU) keeps its fields and its name.
  const outcome own = skip_with({"--json", file}, {{"benchmark", "bench_own"}, {"memory", 3}});
  EXPECT_EQ(own.status, 0) << own.err;
  std::ifstream in2(file);
  const bench::json back2 = bench::json::parse(in2);
  EXPECT_EQ(back2["benchmark"], "bench_own");
  EXPECT_EQ(back2["memory"], 3);
  EXPECT_EQ(back2["skipped"], "no usable GPU: none here");

  // A folder for --json fails the skipped run as it would fail a measured one.
  const outcome folder = skip_with({"--json", dir.string()}, bench::json::object());
  EXPECT_EQ(folder.status, tools::exit_status::check_failed);
  EXPECT_EQ(folder.err, "bench_t: --json " + dir.string() +
                            ": cannot write the file: " + dir.string() + " is a folder\n");

  // Without --json nothing is written.
  std::filesystem::remove(file);
  const outcome none = skip_with({}, bench::json::object());
  EXPECT_EQ(none.status, 0);
  EXPECT_FALSE(std::filesystem::exists(file));
  std::filesystem::remove_all(dir);
}

TEST(BenchHarness, MedianAndRatio) {
  EXPECT_EQ(bench::median({3, 1, 2}), 2);
  EXPECT_EQ(bench::median({4, 1, 3, 2}), 3);  // the upper of the two middle values
  EXPECT_EQ(bench::median({7}), 7);
  EXPECT_EQ(bench::ratio(1, 4), 0.25);
  EXPECT_EQ(bench::ratio(1, 0), 0);  // a limit not measured
}

TEST(BenchHarness, BestOfTakesTheFastestRun) {
  int calls = 0;
  const double best = bench::best_of(3, [&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(calls == 2 ? 1 : 40));
  });
  EXPECT_EQ(calls, 3);
  EXPECT_GE(best, 0.001);
  EXPECT_LT(best, 0.030);
}

TEST(BenchHarness, PinnedCopyBandwidthIsBytesOverTheBestCopy) {
  offloadkit::host_executor host;
  offloadkit::counting_adaptor ex(host);
  const std::size_t bytes = std::size_t{8} << 20;
  using offloadkit::pointer_kind;
  for (const bool to_host : {true, false}) {
    ex.reset();
    const double bw = bench::pinned_copy_bandwidth(ex, bytes, to_host, 3);
    EXPECT_TRUE(std::isfinite(bw));
    EXPECT_GT(bw, 1e6);  // more than 1 MB/s: 8 MiB within 8 s
    // Each limit is measured in its own direction: the D2H limit by device-to-pinned copies
    // only, the H2D one by pinned-to-device copies only.
    const auto n = ex.snapshot();
    const pointer_kind from = to_host ? pointer_kind::device : pointer_kind::pinned;
    const pointer_kind to = to_host ? pointer_kind::pinned : pointer_kind::device;
    EXPECT_EQ(n.copied(from, to), 3 * bytes) << (to_host ? "D2H" : "H2D");
    EXPECT_EQ(n.copied(to, from), 0u) << (to_host ? "D2H" : "H2D");
  }
}

}  // namespace
