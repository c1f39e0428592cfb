// Internal: makes a CUDA device current for a scope (the runtime's current device is per host
// thread) and gives the caller's back at its end.
#pragma once

#include <cuda_runtime_api.h>

#include <new>

#include "offloadkit/detail/cuda_try.hpp"

namespace offloadkit::detail {

// Makes `device` current for a scope and restores the caller's device at its end. The throwing
// form is for ordinary calls; the nothrow form for release paths.
class device_guard {
 public:
  explicit device_guard(int device) {
    OFFLOADKIT_CUDA_TRY(cudaGetDevice(&previous_));
    // Always set: since CUDA 12 this also makes the primary context current, which the driver's
    // VMM calls need on a thread that has made no runtime call yet.
    OFFLOADKIT_CUDA_TRY_CTX(cudaSetDevice(device), "device = ", device);
    restore_ = previous_ != device;
  }
  device_guard(int device, std::nothrow_t /*unused*/) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    restore_ = previous_ != device;
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (restore_) OFFLOADKIT_CUDA_ASSERT_OK(cudaSetDevice(previous_));
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace offloadkit::detail
