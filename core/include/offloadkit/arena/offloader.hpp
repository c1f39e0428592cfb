// The arena feature's one interface: offload a tensor set from device memory to host memory and
// reload it. Reference (per-tensor pageable, synchronous) and optimized (one cached pinned arena,
// batched non-blocking copies) implementations sit behind it, and every check is written against
// it. The boundary stays plain (device pointers, sizes, stream/event handles, typed exceptions)
// so a plugin built elsewhere can sit behind it too.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "offloadkit/arena/tensor_set.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::arena {

/// What an implementation promises beyond the round trip; the battery checks each promise made.
struct offload_promises {
  /// offload()/reload() may return before the copies finish (their event says when).
  bool asynchronous = false;
  /// Once a shape has been offloaded and reloaded, repeating it allocates no host memory and
  /// copies no byte through pageable memory.
  bool pinned_steady_state = false;
  /// Never holds more than one host buffer, also while it grows.
  bool single_host_buffer = false;
};

/// Offloads one tensor set at a time. Lifetime: the first offload() acquires host memory, which is
/// kept (cached) across offload/reload cycles until release() frees it; after release() every
/// call but release() throws state_error. Failures throw typed exceptions that say which step and
/// which tensor failed; the device tensors are never written by offload(), and a failed reload()
/// keeps the host copy, so a retry succeeds. One offloader is used by one host thread at a time;
/// two offloaders may run at once on two streams.
class offloader {
 public:
  offloader() = default;
  offloader(const offloader&) = delete;
  offloader& operator=(const offloader&) = delete;
  virtual ~offloader() = default;

  /// Copies every tensor of `set` to host memory in stream order on `s`. The returned event
  /// completes when the copies have; until then the device tensors must stay unchanged.
  event offload(tensor_set_view set, stream_ref s);
  /// Copies the host copy of the last offload() back into `set` (same sizes, any addresses) in
  /// stream order on `s`; the returned event completes when the tensors hold it. Throws
  /// state_error when there is no complete host copy, out_of_range when the sizes differ.
  event reload(tensor_set_view set, stream_ref s);
  /// Frees the host memory (after the queued copies that use it). Idempotent.
  void release() noexcept { do_release(); }

  [[nodiscard]] bool released() const noexcept { return do_released(); }
  /// Whether a complete host copy is held (a successful offload() since the last failure).
  [[nodiscard]] bool holds_copy() const noexcept { return do_holds_copy(); }
  /// Host bytes held now (pinned or pageable).
  [[nodiscard]] std::size_t host_bytes() const noexcept { return do_host_bytes(); }
  [[nodiscard]] offload_promises promises() const noexcept { return do_promises(); }
  [[nodiscard]] std::string name() const { return do_name(); }

 private:
  virtual event do_offload(tensor_set_view set, stream_ref s) = 0;
  virtual event do_reload(tensor_set_view set, stream_ref s) = 0;
  virtual void do_release() noexcept = 0;
  [[nodiscard]] virtual bool do_released() const noexcept = 0;
  [[nodiscard]] virtual bool do_holds_copy() const noexcept = 0;
  [[nodiscard]] virtual std::size_t do_host_bytes() const noexcept = 0;
  [[nodiscard]] virtual offload_promises do_promises() const noexcept = 0;
  [[nodiscard]] virtual std::string do_name() const = 0;
};

namespace detail {

/// Rethrows the exception in flight as the same type, its message prefixed with `context`.
[[noreturn]] void rethrow_with_context(const std::string& context);

/// Throws out_of_range unless `set` has exactly `sizes`, naming the first difference.
void expect_sizes(const std::vector<std::size_t>& sizes, tensor_set_view set,
                  const std::string& who);

}  // namespace detail
}  // namespace offloadkit::arena
