// Records a timeline of the current process through CUPTI: kernels, memcpys (with pinned or
// pageable sides), memsets, synchronizations and NVTX ranges from the activity API, plus the host
// calls that matter for offload (cudaHostAlloc/cudaMallocHost/cudaFreeHost/cudaHostRegister, the
// driver's cuMemHostAlloc/cuMemAllocHost/cuMemFreeHost, cuMemMap/cuMemUnmap) from API callbacks.
//
// libcupti is loaded with dlopen (never linked), so binaries start where CUPTI or the driver is
// missing; unavailable_reason() then says why and start() throws runtime_error with that reason.
// One recorder may be active per process: CUPTI has one set of activity callbacks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "offloadkit/traces/timeline.hpp"

namespace offloadkit::traces {

class cupti_recorder {
 public:
  struct options {
    /// Bytes per CUPTI activity buffer; more buffers are handed out as they fill.
    std::size_t buffer_bytes = std::size_t{8} << 20;
    bool kernels = true;
    bool memcpys = true;
    bool memsets = true;
    bool syncs = true;
    bool nvtx = true;
    bool api_callbacks = true;
  };

  cupti_recorder();
  ~cupti_recorder();
  cupti_recorder(const cupti_recorder&) = delete;
  cupti_recorder& operator=(const cupti_recorder&) = delete;

  /// Why CUPTI cannot be used here ("" when it can): the library was not found (with the paths
  /// tried) or lacks a needed symbol. Loads the library on first call; never throws.
  static std::string unavailable_reason();
  /// The path libcupti was loaded from ("" when not loaded).
  static std::string library_path();
  /// Now on the clock of CUPTI's records (cuptiGetTimestamp), in nanoseconds; CLOCK_MONOTONIC
  /// where CUPTI cannot be loaded. For host-side records that must line up with device work.
  static std::int64_t timestamp_ns() noexcept;

  /// Enables the activity kinds and callbacks. Throws runtime_error when CUPTI is unavailable or
  /// another recorder is active, cuda_error-like runtime_error naming the CUPTI call that failed.
  void start(const options& o);
  void start() { start(options{}); }
  /// Flushes every buffer and disables recording; records stay available through take().
  void stop() noexcept;
  /// Flushes CUPTI's buffers into the recorder (blocking until completed buffers are processed).
  void flush();
  /// Moves the records gathered so far out of the recorder.
  timeline take();
  [[nodiscard]] bool active() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace offloadkit::traces
