// The graph-stable offload region: a virtual range reserved once and backed by physical memory
// in chunks. Pause copies the contents out through a cached pinned buffer, chunk by chunk, and
// unmaps and releases each chunk as soon as its copy has landed (the copy of chunk k overlaps the
// unmap of chunk k-1); resume creates physical memory again, maps it at the same address and
// copies the contents back. Graphs captured on the region stay valid across pause and resume. A
// swap with another vmm_region interleaves one's pause with the other's resume chunk by chunk, the
// copies out on the caller's stream and the copies in on a second one, so that both copy
// directions of the link work at once. Where two chunks of device memory are free, the copies in
// run one chunk ahead of the outgoing region's releases; otherwise they follow them, and the swap
// needs one chunk beyond what the outgoing region frees.
#pragma once

#include <optional>
#include <vector>

#include "offloadkit/executor.hpp"
#include "offloadkit/region/graph_registry.hpp"
#include "offloadkit/region/region.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::region {

class vmm_region final : public offload_region {
 public:
  vmm_region(executor& ex, region_config config);
  ~vmm_region() override;

  /// Bytes per chunk (a multiple of the device granularity).
  [[nodiscard]] std::size_t chunk_bytes() const noexcept { return chunk_; }
  /// Bytes of the cached pinned buffer (0 before the first preserving pause).
  [[nodiscard]] std::size_t host_buffer_bytes() const noexcept { return host_.size(); }

 private:
  [[nodiscard]] void* do_data() const noexcept override { return base_; }
  [[nodiscard]] std::size_t do_size() const noexcept override { return bytes_; }
  [[nodiscard]] int do_device() const noexcept override { return device_; }
  [[nodiscard]] region_state do_state() const noexcept override;
  [[nodiscard]] bool do_address_stable() const noexcept override { return true; }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return reserved_; }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return graphs_.captures(); }
  OFFLOADKIT_REGION_OPERATION_OVERRIDES
  void do_swap(offload_region& other, pause_mode mode, stream_ref s) override;

  /// Where a chunk's contents are. A chunk is `mapped` with its handle held, or not.
  enum class contents { device, host, none };
  struct chunk {
    std::size_t offset = 0;
    std::size_t bytes = 0;  // physical bytes (granularity multiple)
    std::size_t used = 0;   // bytes of the region inside this chunk (what is copied)
    bool mapped = false;
    physical_handle handle{};
    contents where = contents::device;
  };

  struct copy_out_pipeline;
  void map_chunk(chunk& c);
  void unmap_chunk(chunk& c);
  void release_all() noexcept;
  [[nodiscard]] char* at(const chunk& c) const noexcept {
    return static_cast<char*>(base_) + c.offset;
  }

  executor* ex_;
  std::size_t bytes_;
  int device_;
  std::size_t chunk_ = 0;
  std::size_t reserved_ = 0;
  void* base_ = nullptr;
  std::vector<chunk> chunks_;
  buffer host_;          // cached pinned copy, allocated at the first preserving pause
  event chunk_done_[2];  // alternate between consecutive chunks of a pause
  event resume_done_;    // the last resume's copies; a later pause or destruction waits on it
  bool resume_pending_ = false;
  std::optional<stream> side_;  // where a swap that resumes this region issues its copies in
  detail::graph_registry graphs_{*ex_, "vmm_region"};
};

}  // namespace offloadkit::region
