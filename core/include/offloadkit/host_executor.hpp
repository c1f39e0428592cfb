// The host back end: the executor's semantics on the CPU with real concurrency. Device and pinned
// memory are host allocations tracked in a registry; each stream is an in-order worker thread;
// events are cross-thread signals; virtual memory is a PROT_NONE reservation whose pages come
// from memfd physical memory mapped MAP_FIXED, so a stale address faults; graph capture records a
// stream's operations and replay re-issues them on the same addresses.
#pragma once

#include <cstddef>
#include <memory>

#include "offloadkit/executor.hpp"

namespace offloadkit {

struct host_executor_options {
  /// Simulated devices (ids 0..devices-1), for multi-device checks.
  int devices = 2;
  /// Simulated device memory per device; allocations and physical memory beyond it throw
  /// out_of_memory, which lets checks exercise OOM on a CPU.
  std::size_t device_capacity = std::size_t{16} << 30;
  /// Granularity of physical memory, a multiple of the OS page size.
  std::size_t granularity = std::size_t{2} << 20;
  /// Host threads that run one launch's index space (in chunks).
  unsigned launch_threads = 4;
  /// Place device and pinned allocations back to back, as cudaMalloc and cudaHostAlloc can: each
  /// device's allocations are carved first-fit from one contiguous reservation of
  /// device_capacity bytes (pinned ones from another of the same size), so consecutive
  /// allocations touch (each is padded to the 256-byte alignment only). Code that merges
  /// neighbouring buffers into one copy without asking extent_of() then issues a copy that spans
  /// two allocations, which the host back end rejects as a GPU does. Off: every allocation is a
  /// separate host allocation whose neighbours never touch it.
  bool adjacent_allocations = false;
};

class host_executor final : public executor {
 public:
  explicit host_executor(host_executor_options options = {});
  ~host_executor() override;

  [[nodiscard]] const host_executor_options& options() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;

  OFFLOADKIT_EXECUTOR_HOOK_OVERRIDES
};

}  // namespace offloadkit
