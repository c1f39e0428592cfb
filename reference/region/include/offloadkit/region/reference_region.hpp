// The reference offload region: what frameworks did before virtual-memory regions. Pause copies
// the contents to a fresh host buffer and frees the device allocation; resume allocates again
// (usually at a new address) and re-captures every registered graph. Correct, slower, and
// address-unstable.
#pragma once

#include "offloadkit/executor.hpp"
#include "offloadkit/region/graph_registry.hpp"
#include "offloadkit/region/region.hpp"

namespace offloadkit::region {

class reference_region final : public offload_region {
 public:
  reference_region(executor& ex, region_config config);
  ~reference_region() override;

 private:
  [[nodiscard]] void* do_data() const noexcept override { return device_; }
  [[nodiscard]] std::size_t do_size() const noexcept override { return bytes_; }
  [[nodiscard]] int do_device() const noexcept override { return device_id_; }
  [[nodiscard]] region_state do_state() const noexcept override { return state_; }
  [[nodiscard]] bool do_address_stable() const noexcept override { return false; }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return bytes_; }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return graphs_.captures(); }
  OFFLOADKIT_REGION_OPERATION_OVERRIDES

  executor* ex_;
  std::size_t bytes_;
  int device_id_;
  void* device_ = nullptr;  // device allocation while active
  void* host_ = nullptr;    // pageable host copy while paused (null after a discard)
  region_state state_ = region_state::active;
  detail::graph_registry graphs_{*ex_, "reference_region"};
};

}  // namespace offloadkit::region
