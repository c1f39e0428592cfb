// The GoogleTest main of every offloadkit suite. It
//  - handles --offloadkit-require-gpu (the .cuda ctest entries): where no GPU is usable it prints
//    the reason and exits with 77, which ctest reports as skipped, before any test runs;
//  - fixes the process's seed (OFFLOADKIT_SEED, else RC_PARAMS' seed, else random), prints it
//    once, and hands it to rapidcheck through RC_PARAMS so that one number replays a run.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "offloadkit/cuda_executor.hpp"
#include "testing.hpp"

namespace offloadkit::testing {
namespace {

constexpr int skip_return_code = 77;  // ctest's SKIP_RETURN_CODE for the .cuda entries
constexpr const char* require_gpu_flag = "--offloadkit-require-gpu";

std::uint64_t parse_seed(const std::string& text, const char* source) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(begin, &end, 10);
  if (text.empty() || text[0] == '-' || errno != 0 || end == begin || *end != '\0') {
    throw std::invalid_argument(std::string(source) + " = '" + text +
                                "' is not a seed: expected a decimal integer in [0, 2^64)");
  }
  return value;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  std::istringstream in(s);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// The seed named in RC_PARAMS ("... seed=N ..."), if any.
bool rc_params_seed(std::uint64_t& seed) {
  const char* params = std::getenv("RC_PARAMS");
  if (params == nullptr) return false;
  for (const std::string& w : split_words(params)) {
    if (w.rfind("seed=", 0) == 0) {
      seed = parse_seed(w.substr(5), "RC_PARAMS seed");
      return true;
    }
  }
  return false;
}

// Rewrites RC_PARAMS so that rapidcheck uses `seed`; other parameters are kept. Must run before
// rapidcheck reads its configuration, i.e. before the first property.
void hand_seed_to_rapidcheck(std::uint64_t seed) {
  const char* params = std::getenv("RC_PARAMS");
  std::string rewritten;
  if (params != nullptr) {
    for (const std::string& w : split_words(params)) {
      if (w.rfind("seed=", 0) == 0) continue;
      rewritten += w + " ";
    }
  }
  rewritten += "seed=" + std::to_string(seed);
  ::setenv("RC_PARAMS", rewritten.c_str(), 1);
}

std::uint64_t choose_seed() {
  if (const char* env = std::getenv("OFFLOADKIT_SEED"); env != nullptr && *env != '\0') {
    return parse_seed(env, "OFFLOADKIT_SEED");
  }
  std::uint64_t seed = 0;
  if (rc_params_seed(seed)) return seed;
  std::random_device rd;
  do {
    seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  } while (seed == 0);  // 0 means "choose a fresh seed" to check_config: never hand it out
  return seed;
}

}  // namespace

std::uint64_t seed() {
  static const std::uint64_t value = [] {
    const std::uint64_t s = choose_seed();
    hand_seed_to_rapidcheck(s);
    std::printf("offloadkit seed: %llu (replay with OFFLOADKIT_SEED=%llu)\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    std::fflush(stdout);
    return s;
  }();
  return value;
}

}  // namespace offloadkit::testing

int main(int argc, char** argv) {
  // Take our own flag out of argv before GoogleTest sees it.
  bool require_gpu = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], offloadkit::testing::require_gpu_flag) == 0) {
      require_gpu = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argv[kept] = nullptr;
  argc = kept;

  if (require_gpu) {
    const std::string reason = offloadkit::cuda_unavailable_reason();
    if (!reason.empty()) {
      std::printf("OFFLOADKIT SKIP: no usable GPU: %s\n", reason.c_str());
      std::fflush(stdout);
      return offloadkit::testing::skip_return_code;
    }
  }

  try {
    (void)offloadkit::testing::seed();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offloadkit: %s\n", e.what());
    return 2;
  }

  // Threadsafe death tests re-execute the binary; by default GoogleTest spawns that child with
  // clone() on a one-page stack, which crashes the parent on some kernels (seen on a Firecracker VM
  // with kernel 6.18). fork() then exec() does the same job without the tiny stack. The flag has
  // no public setter, so it goes in as a command-line flag (a later one on the command line wins).
  std::vector<char*> args(argv, argv + argc);
  static char use_fork[] = "--gtest_death_test_use_fork";
  args.insert(args.begin() + 1, use_fork);
  args.push_back(nullptr);
  argc = static_cast<int>(args.size()) - 1;
  argv = args.data();
  ::testing::InitGoogleTest(&argc, argv);
  // The "...Catches..." tests plant races on purpose to show that a property fails. A race
  // detector would report them as the races they are, and compute-sanitizer serializes the work
  // that lets them show, so under either they are left out (ci/gpu sets OFFLOADKIT_SKIP_PLANTED).
  bool skip_planted = false;
#if defined(__SANITIZE_THREAD__)
  skip_planted = true;
#endif
  if (const char* env = std::getenv("OFFLOADKIT_SKIP_PLANTED"); env != nullptr && *env == '1') {
    skip_planted = true;
  }
  if (skip_planted) {
    std::string filter = ::testing::GTEST_FLAG(filter);
    filter += filter.find('-') == std::string::npos ? "-*Catches*" : ":*Catches*";
    ::testing::GTEST_FLAG(filter) = filter;
  }
  return RUN_ALL_TESTS();
}
