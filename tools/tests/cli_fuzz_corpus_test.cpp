// Runs the cli_fuzz target's runner over its seed corpus (fuzz/corpus/cli) and over deterministic
// mutations of every seed, so that CI exercises it without clang or libFuzzer; and shows with
// planted command entries that the runner reports what it must.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_fuzz.hpp"

namespace {

std::string run(const std::string& input, const offloadkit_cli_fuzz_entries& entries = {}) {
  return offloadkit_cli_fuzz_run(reinterpret_cast<const std::uint8_t*>(input.data()), input.size(),
                                 entries);
}

std::vector<std::pair<std::string, std::string>> seeds() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& entry : std::filesystem::directory_iterator(OFFLOADKIT_CLI_FUZZ_CORPUS)) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    out.emplace_back(entry.path().filename().string(), ss.str());
  }
  return out;
}

TEST(CliFuzzCorpus, SeedsAreHandled) {
  const auto corpus = seeds();
  ASSERT_GE(corpus.size(), 10u) << "the seed corpus is missing";
  for (const auto& [name, input] : corpus) EXPECT_EQ(run(input), "") << name;
}

TEST(CliFuzzCorpus, MutatedSeedsAreHandled) {
  std::mt19937 rng(20261123);  // fixed: this is a corpus, not a property
  const char interesting[] = {'\n', '-', '=', '0', '9', 'e', '.', '[', '{', '"', '\0'};
  for (const auto& [name, seed] : seeds()) {
    for (int i = 0; i < 60; ++i) {
      std::string in = seed;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !in.empty(); ++e) {
        const std::size_t at = rng() % in.size();
        switch (rng() % 3) {
          case 0:
            in[at] = interesting[rng() % sizeof interesting];
            break;
          case 1:
            in.erase(at, 1 + rng() % 8);
            break;
          default:
            in.insert(at, 1, static_cast<char>(rng()));
            break;
        }
      }
      ASSERT_EQ(run(in), "") << name << ", mutation " << i << ":\n" << in.substr(0, 300);
    }
  }
}

// Planted: entries that break the promises, each of which the runner must report.
bool check_throws_logic_error(const std::vector<std::string>&, std::ostream&) {
  throw std::logic_error("stoull");
}
bool check_two_line_usage(const std::vector<std::string>&, std::ostream&) {
  throw offloadkit::tools::usage_error("--cases: bad\nvalue");
}
int analyze_reports_nothing(const std::vector<std::string>&, const std::string&, std::string&) {
  return 0;
}

TEST(CliFuzzCorpus, PlantedEntriesAreReported) {
  offloadkit_cli_fuzz_entries planted;
  planted.check = check_throws_logic_error;
  EXPECT_NE(run("check\n--cases\n5\n\n", planted).find("unexpected exception: stoull"),
            std::string::npos);
  planted.check = check_two_line_usage;
  EXPECT_NE(run("check\n--cases\n5\n\n", planted).find("spans lines"), std::string::npos);
  planted.analyze = analyze_reports_nothing;
  EXPECT_NE(run("analyze\nt.json\n\n{}", planted).find("reported nothing"), std::string::npos);
}

}  // namespace
