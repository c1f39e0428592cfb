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

  [[nodiscard]] backend do_kind() const noexcept override;
  [[nodiscard]] std::string do_name() const override;
  [[nodiscard]] int do_device_count() const override;
  void* do_allocate(memory_kind kind, std::size_t bytes, int device) override;
  void do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept override;
  [[nodiscard]] pointer_info do_classify(const void* p) const override;
  [[nodiscard]] allocation_extent do_extent_of(const void* p) const override;
  memory_info do_device_memory(int device) override;
  void* do_allocate_managed(std::size_t bytes, int device) override;
  void do_deallocate_managed(void* p, std::size_t bytes) noexcept override;
  void do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) override;
  stream_ref do_create_stream(int device) override;
  void do_destroy_stream(stream_ref ref) noexcept override;
  event_ref do_create_event(int device) override;
  void do_destroy_event(event_ref e) noexcept override;
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override;
  void do_fill(void* dst, int value, std::size_t bytes, stream_ref s) override;
  void do_launch(const launch_request& r, stream_ref s) override;
  void do_host_function(std::function<void()> fn, stream_ref s) override;
  void do_record(event_ref e, stream_ref s) override;
  void do_wait(event_ref e, stream_ref s) override;
  void do_synchronize_stream(stream_ref ref) override;
  void do_synchronize_event(event_ref e) override;
  bool do_ready(event_ref e) override;
  std::size_t do_granularity(int device) override;
  void* do_reserve(std::size_t bytes, int device) override;
  void do_unreserve(void* va, std::size_t bytes) noexcept override;
  physical_handle do_create_physical(std::size_t bytes, int device) override;
  void do_release_physical(physical_handle h) noexcept override;
  void do_map(void* va, std::size_t bytes, physical_handle h) override;
  void do_unmap(void* va, std::size_t bytes) override;
  void do_set_access(void* va, std::size_t bytes, int device) override;
  void do_begin_capture(stream_ref ref) override;
  graph_ref do_end_capture(stream_ref ref) override;
  void do_replay(graph_ref g, stream_ref ref) override;
  void do_destroy_graph(graph_ref g) noexcept override;
};

}  // namespace offloadkit
