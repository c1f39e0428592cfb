// The GoogleTest main of every offloadkit suite. It
//  - handles --offloadkit-require-gpu (the .cuda ctest entries): where no GPU is usable it prints
//    the reason and exits with 77, which ctest reports as skipped, before any test runs;
//  - handles --offloadkit-require-devices=N (the .multigpu entries): the same where fewer than N
//    GPUs are usable ("needs 2 GPUs, 1 usable");
//  - fixes the process's seed (OFFLOADKIT_SEED, else RC_PARAMS' seed, else random), prints it
//    once, and hands it to rapidcheck through RC_PARAMS so that one number replays a run;
//  - ends with "OFFLOADKIT SKIPPED: N test(s) skipped, none failed" where tests skipped and none
//    failed, the one case a ctest SKIP_REGULAR_EXPRESSION may report as skipped (GoogleTest's own
//    "[  SKIPPED ]" lines appear beside failures too, which ctest would then hide as skips).
#include <gtest/gtest.h>

#include <algorithm>
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
constexpr const char* require_devices_flag = "--offloadkit-require-devices=";
constexpr long max_required_devices = 1024;

// N of --offloadkit-require-devices=N, or -1 (after a message on stderr) when it is not a number
// in [1, max_required_devices].
long parse_required_devices(const char* text) {
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno != 0 || n < 1 || n > max_required_devices) {
    std::fprintf(stderr, "offloadkit: %s%s: '%s' is not a device count: valid range 1..%ld\n",
                 require_devices_flag, text, text, max_required_devices);
    return -1;
  }
  return n;
}

// CUDA devices usable here (0 with `reason` set where the cuda back end cannot run).
int usable_cuda_devices(std::string& reason) {
  reason = cuda_unavailable_reason();
  if (!reason.empty()) return 0;
  try {
    return cuda_executor{}.device_count();
  } catch (const std::exception& e) {
    reason = e.what();
    return 0;
  }
}

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

// Prints the skip summary described at the top of this file.
class skip_summary final : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest& unit) override {
    if (unit.skipped_test_count() > 0 && unit.failed_test_count() == 0) {
      std::printf("OFFLOADKIT SKIPPED: %d test(s) skipped, none failed\n",
                  unit.skipped_test_count());
      std::fflush(stdout);
    }
  }
};

}  // namespace

int cases_from_environment() {
  const char* v = std::getenv("OFFLOADKIT_CASES");
  return v == nullptr ? 0 : std::max(0, std::atoi(v));
}

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
  namespace okt = offloadkit::testing;
  // Take our own flags out of argv before GoogleTest sees them.
  bool require_gpu = false;
  long require_devices = 0;
  const std::size_t devices_flag_length = std::strlen(okt::require_devices_flag);
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], okt::require_gpu_flag) == 0) {
      require_gpu = true;
    } else if (std::strncmp(argv[i], okt::require_devices_flag, devices_flag_length) == 0) {
      require_devices = okt::parse_required_devices(argv[i] + devices_flag_length);
      if (require_devices < 0) return 2;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argv[kept] = nullptr;
  argc = kept;

  if (require_gpu || require_devices > 0) {
    std::string reason;
    const int usable = okt::usable_cuda_devices(reason);
    if (usable == 0 && require_devices <= 1) {
      std::printf("OFFLOADKIT SKIP: no usable GPU: %s\n", reason.c_str());
      std::fflush(stdout);
      return okt::skip_return_code;
    }
    if (usable < require_devices) {
      std::printf("OFFLOADKIT SKIP: needs %ld GPUs, %d usable%s%s\n", require_devices, usable,
                  reason.empty() ? "" : ": ", reason.c_str());
      std::fflush(stdout);
      return okt::skip_return_code;
    }
  }

  try {
    (void)okt::seed();
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
  ::testing::UnitTest::GetInstance()->listeners().Append(new okt::skip_summary);  // gtest owns it
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
