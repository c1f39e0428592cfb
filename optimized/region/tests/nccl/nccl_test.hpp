// What nccl_region_test's two halves share: the runner and the command line
// (nccl_region_test.cpp) and the scenario one variant runs in its process (nccl_scenario.cpp):
// exit statuses, options, variants, the output lines and the watchdog.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives.hpp"

namespace offloadkit::multigpu {

using clock_type = std::chrono::steady_clock;

// Exit statuses. A variant child: 0 right sum, 1 wrong sum, 3 error, 4 hang, 77 skipped. The
// runner: 0 every gating variant gave the right sum, 1 one did not, 77 plain was skipped.
constexpr int exit_right = 0;
constexpr int exit_wrong = 1;
constexpr int exit_usage = 2;
constexpr int exit_error = 3;
constexpr int exit_hang = 4;
constexpr int exit_skip = 77;  // ctest's SKIP_RETURN_CODE

constexpr const char* result_prefix = "==> result: ";
constexpr const char* held_prefix = "==> held: ";

// ---- options ------------------------------------------------------------------------------------

struct options {
  std::string variant;  ///< empty: run every variant, each in a child process
  int rounds = 3;       ///< pause/resume rounds after the first replay; the last one discards
  /// Floats per region: about 24 MiB, not a multiple of the 2 MiB granularity, so that the
  /// region's last (and only) chunk is partly used.
  std::size_t elements = std::size_t{6} * 1024 * 1024 + 12345;
  int deadline_s = 60;  ///< per step; NCCL's initialization gets twice as long
  /// cuda: NCCL on GPUs 0 and 1. host: the host executor and the host stand-in for NCCL, the
  /// scenario's dry run on a machine without GPUs.
  std::string executor = "cuda";
  host_fault fault = host_fault::none;  ///< planted by the host stand-in
  std::string fault_name = "none";
  bool list = false;
  bool find_nccl_only = false;
  /// Where the runner writes its table and findings (Markdown) on every outcome, pass, fail or
  /// skip; empty: nowhere but stdout.
  std::string findings;
};

// ---- variants -----------------------------------------------------------------------------------

enum class registration { none, kept, redone };

struct variant {
  std::string name;
  bool out_of_place = false;
  registration reg = registration::none;
  bool gates = false;  ///< a wrong sum (or a hang, a crash, an error) fails the test
  std::vector<std::pair<std::string, std::string>> env;  ///< set, overriding, before NCCL loads
  std::string what;                                      ///< one line
};

/// Every variant, in the order the runner runs them.
const std::vector<variant>& all_variants();
/// The variant of that name, or null.
const variant* find_variant(const std::string& name);

// ---- output (nccl_region_test.cpp) ------------------------------------------------------------

std::string mib(long long bytes);
std::string seconds_since(clock_type::time_point start);
/// Writes straight to stdout: the watchdog thread uses it while the main thread is stuck.
void write_out(const std::string& text);
/// Keeps the first wrong sum found: a hang or an error after it (in the teardown, say) is
/// reported together with it (after_earlier_wrong), so that the wrong sum is not lost from the
/// table.
void note_wrong(const std::string& text);
std::string after_earlier_wrong(const std::string& text);
/// Prints the final result line and ends the process without running destructors or exit
/// handlers: after a hang or an error the CUDA and NCCL state is not one to tear down.
[[noreturn]] void finish(int code, const std::string& result);
[[noreturn]] void hang(const std::string& what, int seconds);
[[noreturn]] void skip(const std::string& reason);

// ---- watchdog -----------------------------------------------------------------------------------

/// Bounds the steps that block inside CUDA or NCCL (initialization, capture, pause, teardown):
/// armed with a step's name and limit, it reports a hang and ends the process when the step has
/// not finished in time.
class watchdog {
 public:
  watchdog() = default;
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  /// Disarms the watchdog when it goes out of scope.
  class step {
   public:
    explicit step(watchdog& w) : w_(&w) {}
    step(const step&) = delete;
    step& operator=(const step&) = delete;
    ~step() { w_->disarm(); }

   private:
    watchdog* w_;
  };

  [[nodiscard]] step arm(std::string what, int seconds) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      what_ = std::move(what);
      seconds_ = seconds;
      deadline_ = clock_type::now() + std::chrono::seconds(seconds);
      armed_ = true;
    }
    wake_.notify_all();
    return step(*this);
  }

  void disarm() {
    const std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (!armed_) {
        wake_.wait(lock);
        continue;
      }
      const auto deadline = deadline_;
      wake_.wait_until(lock, deadline);
      if (armed_ && !stop_ && deadline_ == deadline && clock_type::now() >= deadline) {
        hang(what_, seconds_);
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::string what_;
  int seconds_ = 0;
  clock_type::time_point deadline_{};
  bool armed_ = false;
  bool stop_ = false;
  std::thread thread_{[this] { run(); }};  // last: starts once the members above exist
};

/// Runs variant `v` in this process and ends the process with its result line and exit status.
[[noreturn]] void run_scenario(const variant& v, const options& o);

}  // namespace offloadkit::multigpu
