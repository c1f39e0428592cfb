// The unified-memory region, the seed's alternative to virtual-memory regions: one managed
// allocation whose pages pause prefetches to the host and resume prefetches back to the device.
//
// Release behaviour differs from vmm_region, and callers must know it:
//  - The allocation is never freed while the region lives; pause migrates its pages to host
//    memory. On a GPU the driver's free memory rises as the migration completes, by up to the
//    region's size (the unified-memory driver may keep part of it), not by a guaranteed amount.
//  - Touching a paused region does not fault: the pages migrate back on demand and silently
//    consume device memory again. A paused vmm_region faults instead.
//  - discard behaves like preserve (managed pages always keep their contents).
//  - The address is stable and graphs captured on it stay valid, as with vmm_region.
//  - On the host back end managed memory is host memory: pause and resume move nothing and
//    device_memory() does not change.
//
// The allocation and the prefetches are executor operations (allocate_managed, prefetch), so
// fault injection, delays and counting reach them as they reach every other region's memory.
#pragma once

#include "offloadkit/executor.hpp"
#include "offloadkit/region/graph_registry.hpp"
#include "offloadkit/region/region.hpp"

namespace offloadkit::region {

class unified_region final : public offload_region {
 public:
  unified_region(executor& ex, region_config config);
  ~unified_region() override;

 private:
  [[nodiscard]] void* do_data() const noexcept override { return data_; }
  [[nodiscard]] std::size_t do_size() const noexcept override { return bytes_; }
  [[nodiscard]] int do_device() const noexcept override { return device_; }
  [[nodiscard]] region_state do_state() const noexcept override { return state_; }
  [[nodiscard]] bool do_address_stable() const noexcept override { return true; }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return bytes_; }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return graphs_.captures(); }
  OFFLOADKIT_REGION_OPERATION_OVERRIDES

  void prefetch(bool to_device, stream_ref s);

  executor* ex_;
  std::size_t bytes_;
  int device_;
  void* data_ = nullptr;
  region_state state_ = region_state::active;
  detail::graph_registry graphs_{*ex_, "unified_region"};
};

}  // namespace offloadkit::region
