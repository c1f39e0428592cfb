// Runs the schedule_parse fuzz target over a fixed corpus, so that CI exercises it without clang or
// libFuzzer: the good and bad corpus files, the example schedules, deep nesting, and deterministic
// byte-level mutations of a valid file. The target aborts on anything but acceptance or a
// schedule_error.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void run(const std::string& text) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
}

std::vector<std::string> json_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) {
        out.push_back(dir);
        out.back().append("/").append(n);
      }
    }
    closedir(d);
  }
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(ScheduleFuzzCorpus, CorpusFilesAndMutations) {
  std::vector<std::string> files = json_files(OFFLOADKIT_TRACES_CORPUS "/good");
  for (const auto& f : json_files(OFFLOADKIT_TRACES_CORPUS "/bad")) files.push_back(f);
  for (const auto& f : json_files(OFFLOADKIT_TRACES_EXAMPLES)) files.push_back(f);
  ASSERT_GE(files.size(), 20u);
  for (const auto& f : files) run(slurp(f));
  run(std::string(300000, '['));
  run("{\"steps\": [[" + std::string(300000, '{'));
  run("");
  run(std::string("\0\xff\xfe", 3));
  const std::string base = slurp(OFFLOADKIT_TRACES_CORPUS "/good/minimal.json");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string t = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !t.empty(); ++e) {
      const std::size_t pos = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t[pos] = static_cast<char>(rng() % 256);
          break;
        case 1:
          t.erase(pos, 1 + rng() % 8);
          break;
        default:
          t.insert(pos, std::vector<std::string>{"[", "]", "-1", "1e400", "99999999999999999999",
                                                 "[\"F\",0,0],", "null", "{}"}[rng() % 8]);
      }
    }
    run(t);
  }
}
