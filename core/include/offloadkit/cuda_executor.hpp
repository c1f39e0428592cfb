// The cuda back end: the CUDA runtime API plus the driver's virtual-memory entry points
// (cuMemCreate, cuMemMap, ...) obtained through cudaGetDriverEntryPointByVersion, so that no
// binary links libcuda and every binary starts on a machine without a driver. Constructing it
// where no GPU is usable throws offloadkit::cuda_error; check cuda_unavailable_reason() first.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "offloadkit/executor.hpp"

namespace offloadkit {

struct cuda_executor_options {
  /// Devices this executor may use; -1 means all that cudaGetDeviceCount reports.
  int devices = -1;
};

/// Why the cuda back end is not usable here, or an empty string when it is: no driver, no device,
/// a driver older than the runtime. Never throws; never touches a device beyond counting them.
std::string cuda_unavailable_reason();

class cuda_executor final : public executor {
 public:
  explicit cuda_executor(cuda_executor_options options = {});
  ~cuda_executor() override;

  [[nodiscard]] const cuda_executor_options& options() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;

  OFFLOADKIT_EXECUTOR_HOOK_OVERRIDES
};

}  // namespace offloadkit
