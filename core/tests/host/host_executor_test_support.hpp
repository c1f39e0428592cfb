// What the host back end's tests share (host_executor_test.cpp, host_executor_memory_test.cpp):
// a small two-device executor's options, a gate to hold a stream with, the message of an expected
// exception and a launch body that reads its row count from memory when it runs.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <future>
#include <string>

#include "offloadkit/host_device.hpp"
#include "offloadkit/host_executor.hpp"

namespace offloadkit::testing::host_executor_test {

inline constexpr std::size_t kib = 1024;
inline constexpr std::size_t granule = 64 * kib;

inline host_executor_options small_options() {
  host_executor_options o;
  o.devices = 2;
  o.device_capacity = 1024 * kib;
  o.granularity = granule;
  o.launch_threads = 4;
  return o;
}

/// A gate a host function blocks on until the test opens it.
struct gate {
  std::promise<void> opened;
  std::shared_future<void> future = opened.get_future().share();
  void open() { opened.set_value(); }
};

template <class Exception, class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const Exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

/// Marks the first *count of n slots: reads the count from (device) memory when it runs.
struct mark_first_rows {
  const int* count;
  int* out;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    out[i] = static_cast<int>(i) < *count ? 1 : 0;
  }
};

}  // namespace offloadkit::testing::host_executor_test
