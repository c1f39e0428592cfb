// The reference activation offloader: pack waits for the producer, copies the tensor to pageable
// host memory synchronously and gives the source back; unpack copies it back synchronously to a
// fresh allocation on its device of origin. Slow and obviously right: the baseline the optimized
// offloader is compared with.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::activation {

class reference_offloader final : public offloader {
 public:
  explicit reference_offloader(executor& ex, offload_options options = {});
  ~reference_offloader() override;

 private:
  struct entry {
    tensor source;  // kept tensors hold their source; offloaded ones its metadata only
    bool kept = false;
    void* host = nullptr;
  };

  handle do_pack(tensor t, stream_ref s) override;
  tensor do_unpack(handle h, stream_ref s) override;
  void do_forward_layer_end(int, stream_ref) override {}
  void do_backward_layer_begin(int, stream_ref) override {}
  void do_synchronize() override {}
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override;
  [[nodiscard]] offload_stats do_stats() const override;
  [[nodiscard]] std::string do_name() const override { return "reference"; }
  stream_ref copy_stream(int device);

  executor& ex_;
  offload_options options_;
  std::map<int, stream> streams_;
  std::map<std::uint64_t, entry> entries_;
  std::uint64_t next_id_ = 1;
  offload_stats stats_;
};

}  // namespace offloadkit::activation
