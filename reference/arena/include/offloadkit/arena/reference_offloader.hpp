// The reference offloader: what frameworks do without an arena. Per tensor, a pageable host
// allocation and a synchronous copy; reload copies each tensor back synchronously. Simple enough
// to trust, and the baseline the optimized offloader is checked and measured against.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "offloadkit/arena/offloader.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::arena {

class reference_offloader final : public offloader {
 public:
  explicit reference_offloader(executor& ex) : ex_(&ex) {}
  ~reference_offloader() override { do_release(); }

 private:
  event do_offload(tensor_set_view set, stream_ref s) override;
  event do_reload(tensor_set_view set, stream_ref s) override;
  void do_release() noexcept override;
  [[nodiscard]] bool do_released() const noexcept override { return released_; }
  [[nodiscard]] bool do_holds_copy() const noexcept override { return valid_; }
  [[nodiscard]] std::size_t do_host_bytes() const noexcept override;
  [[nodiscard]] offload_promises do_promises() const noexcept override { return {}; }
  [[nodiscard]] std::string do_name() const override { return "reference offloader"; }

  executor* ex_;
  std::vector<buffer> host_;  ///< one pageable buffer per tensor of the held copy
  bool valid_ = false;
  bool released_ = false;
};

}  // namespace offloadkit::arena
