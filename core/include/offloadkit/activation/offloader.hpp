// Activation offload, shaped like saved-tensor hooks: forward hands each saved activation to
// pack(), which may move it off the device and give the source buffer back to its owner; backward
// asks for it again with unpack(), which returns it on the device it came from. Layer-boundary
// hints let an implementation schedule prefetch; tensors smaller than a threshold stay on the
// device. Every implementation (reference, optimized, a plugin) is a final class behind this one
// interface, and the activation battery checks them all the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "offloadkit/executor.hpp"

namespace offloadkit::activation {

/// Element type of a tensor; only its size matters to offload, the tag travels with the tensor.
enum class dtype : std::uint8_t { u8, i8, f16, bf16, f32, i32, f64, i64 };

/// Bytes per element of `t`.
[[nodiscard]] std::size_t dtype_size(dtype t) noexcept;
[[nodiscard]] const char* to_string(dtype t) noexcept;

/// A device tensor as the hooks see it: plain values plus a release callback.
///
/// Ownership: the holder of a tensor owns its buffer. pack() takes ownership and gives the buffer
/// back by calling `release` exactly once, and only when nothing it issued still reads the buffer
/// (for an offloaded tensor: after its copy has completed). A tensor returned by unpack() belongs
/// to the caller, who calls `release` once the work that reads it has been issued on the stream
/// given to unpack(); the implementation orders any reuse after that work.
struct tensor {
  void* data = nullptr;
  std::size_t bytes = 0;
  int device = 0;
  dtype type = dtype::u8;
  std::vector<std::int64_t> shape;
  /// Called from the thread that calls into the offloader (never from a stream callback), so it
  /// may issue stream work of its own.
  std::function<void()> release;
};

/// Elements of `shape` (1 for a scalar's empty shape); throws out_of_range for a negative extent.
[[nodiscard]] std::size_t element_count(const std::vector<std::int64_t>& shape);

/// Opaque token for a packed tensor.
struct handle {
  std::uint64_t id = 0;
};

/// Construction options shared by every implementation (one that has no prefetch ignores the last
/// two), so that checks build any implementation the same way.
struct offload_options {
  /// Tensors with fewer bytes stay on the device.
  std::size_t keep_threshold = 0;
  /// Device memory the implementation may hold for prefetched tensors and its buffer cache.
  std::size_t prefetch_bytes = std::size_t{1} << 30;
  /// How many layers, counting the one whose backward begins, may be prefetched.
  int prefetch_layers = 2;
  /// Device bytes, per device, of sources still held while their copy to the host is in flight
  /// (0: no bound). A source goes back to its owner only once its copy is seen complete, so a
  /// host that runs far ahead of the GPU gets nothing back until it synchronizes and offload then
  /// saves no memory during forward. With a bound, pack() first waits on the host for the oldest
  /// copies, handing their sources back, until the new tensor fits: memory returns during
  /// forward, at the cost of host waits. A tensor larger than the bound by itself may still be
  /// in flight when pack() returns, alone.
  std::size_t max_pending_bytes = 0;
};

/// Counters every implementation keeps; checks and benchmarks read them.
struct offload_stats {
  std::size_t packed = 0;               ///< pack() calls
  std::size_t kept = 0;                 ///< of those, kept on the device (below the threshold)
  std::size_t offloaded_bytes = 0;      ///< bytes copied device -> host
  std::size_t restored_bytes = 0;       ///< bytes copied host -> device
  std::size_t prefetched = 0;           ///< tensors uploaded ahead of their unpack()
  std::size_t demand_uploads = 0;       ///< tensors uploaded inside unpack() (not prefetched)
  std::size_t served_from_source = 0;   ///< unpacked from a source not yet given back
  std::size_t peak_prefetch_bytes = 0;  ///< device bytes held for prefetch and cache, at most
  std::size_t pinned_allocations = 0;
  std::size_t device_allocations = 0;
  std::size_t pending_waits = 0;  ///< sources pack() waited for to stay within max_pending_bytes
  /// Prefetches that failed inside unpack(), which still succeeded: the tensors they were for
  /// are uploaded on demand instead.
  std::size_t failed_prefetches = 0;
};

class offloader {
 public:
  offloader() = default;
  offloader(const offloader&) = delete;
  offloader& operator=(const offloader&) = delete;
  virtual ~offloader() = default;

  /// Takes ownership of `t`, whose contents are ready in the order of stream `s` (the stream that
  /// produced it). Throws out_of_range when bytes disagree with shape and dtype or the device is
  /// not one of the executor's. If pack throws, nothing is packed and `t.release` has not been
  /// called: the caller still owns the buffer (keep a copy of the tensor to retry).
  [[nodiscard]] handle pack(tensor t, stream_ref s) { return do_pack(std::move(t), s); }

  /// Returns the packed tensor, ready in the order of `s`, on the device it was packed from
  /// whatever device `s` belongs to. Each handle is unpacked once; an unknown or already unpacked
  /// handle throws out_of_range. If unpack throws, the handle stays packed and may be retried.
  [[nodiscard]] tensor unpack(handle h, stream_ref s) { return do_unpack(h, s); }

  /// Forward has finished producing layer `layer`'s saved tensors (issued on `s`).
  void forward_layer_end(int layer, stream_ref s) { do_forward_layer_end(layer, s); }
  /// Backward of `layer` is about to start on `s`: tensors of this and earlier layers are next.
  void backward_layer_begin(int layer, stream_ref s) { do_backward_layer_begin(layer, s); }

  /// Waits for the offloader's own copies and gives back every source whose copy has completed.
  /// Does not wait for the caller's streams.
  void synchronize() { do_synchronize(); }

  /// Tensors with fewer bytes than this stay on the device.
  [[nodiscard]] std::size_t keep_threshold() const noexcept { return do_keep_threshold(); }
  [[nodiscard]] offload_stats stats() const { return do_stats(); }
  [[nodiscard]] std::string name() const { return do_name(); }

 private:
  virtual handle do_pack(tensor t, stream_ref s) = 0;
  virtual tensor do_unpack(handle h, stream_ref s) = 0;
  virtual void do_forward_layer_end(int layer, stream_ref s) = 0;
  virtual void do_backward_layer_begin(int layer, stream_ref s) = 0;
  virtual void do_synchronize() = 0;
  [[nodiscard]] virtual std::size_t do_keep_threshold() const noexcept = 0;
  [[nodiscard]] virtual offload_stats do_stats() const = 0;
  [[nodiscard]] virtual std::string do_name() const = 0;
};

/// Checks what pack() must check (bytes vs shape and dtype, device range); throws out_of_range.
void validate_for_pack(const tensor& t, int device_count);

}  // namespace offloadkit::activation
