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
  void do_destroy_stream(stream_ref s) noexcept override;
  event_ref do_create_event(int device) override;
  void do_destroy_event(event_ref e) noexcept override;
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override;
  void do_fill(void* dst, int value, std::size_t bytes, stream_ref s) override;
  void do_launch(const launch_request& r, stream_ref s) override;
  void do_host_function(std::function<void()> fn, stream_ref s) override;
  void do_record(event_ref e, stream_ref s) override;
  void do_wait(event_ref e, stream_ref s) override;
  void do_synchronize_stream(stream_ref s) override;
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
  void do_begin_capture(stream_ref s) override;
  graph_ref do_end_capture(stream_ref s) override;
  void do_replay(graph_ref g, stream_ref s) override;
  void do_destroy_graph(graph_ref g) noexcept override;
};

}  // namespace offloadkit
