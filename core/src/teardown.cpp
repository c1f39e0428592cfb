// The per-thread record of teardown failures (teardown.hpp).
#include "offloadkit/teardown.hpp"

#include <cstdio>
#include <exception>
#include <utility>

namespace offloadkit {
namespace {

/// One thread's record. What is left in it when the thread ends was never taken by a case: it is
/// printed rather than dropped.
struct teardown_record {
  teardown_record() = default;
  teardown_record(const teardown_record&) = delete;
  teardown_record& operator=(const teardown_record&) = delete;
  ~teardown_record() {
    for (const std::string& e : errors) {
      std::fprintf(stderr, "offloadkit: a teardown failure no case reported: %s\n", e.c_str());
    }
  }
  std::vector<std::string> errors;
};

teardown_record& record() {
  thread_local teardown_record r;
  return r;
}

}  // namespace

void record_teardown_error(std::string message) noexcept {
  try {
    record().errors.push_back(std::move(message));
  } catch (const std::exception& e) {
    // The record could not grow (out of memory): the failure is printed where it happened.
    std::fprintf(stderr, "offloadkit: a teardown failure (not recorded: %s): %s\n", e.what(),
                 message.c_str());
  }
}

std::vector<std::string> take_teardown_errors() noexcept {
  std::vector<std::string> taken;
  taken.swap(record().errors);
  return taken;
}

std::string join_teardown_errors(const std::vector<std::string>& errors) {
  std::string out;
  for (const std::string& e : errors) {
    if (!out.empty()) out += '\n';
    out += e;
  }
  return out;
}

}  // namespace offloadkit
