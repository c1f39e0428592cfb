// What the arena battery, its tests and its benchmark share: random tensor-set shapes, device
// sets carved from device allocations (so some tensors are contiguous and some are not, at any
// alignment), filling and reading them back, and an adaptor that tracks live host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/arena/tensor_set.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::arena::testing {

struct tensor_spec {
  std::size_t bytes = 0;
  /// Placed in the same allocation as the previous tensor, `gap` bytes after its end.
  bool joins = false;
  std::size_t gap = 0;
  /// A zero-byte tensor given a null pointer.
  bool null_if_empty = false;
};

struct set_spec {
  std::vector<tensor_spec> tensors;
  /// Offset of every allocation's first tensor, to get odd device alignments.
  std::size_t lead = 0;
  [[nodiscard]] std::size_t total() const;
};

/// How rapidcheck prints a counterexample: sizes, and '+' for a tensor that joins the previous.
void showValue(const set_spec& spec, std::ostream& os);  // NOLINT(readability-identifier-naming)

/// Device tensors and the allocations they were carved from.
struct device_set {
  std::vector<buffer> allocations;
  std::vector<device_tensor> tensors;
  [[nodiscard]] tensor_set_view view() const { return tensors; }
};

device_set make_device_set(executor& ex, const set_spec& spec, int device = 0);
using snapshot = std::vector<std::vector<unsigned char>>;
/// The deterministic pseudo-random pattern (per seed and tensor) fill_pattern writes.
snapshot pattern_of(tensor_set_view set, std::uint64_t seed);
/// Copies `data` (one vector per tensor, of its size) into the set on `s` without waiting: `data`
/// must outlive the copies. Throws out_of_range where a size differs.
void write_set(executor& ex, tensor_set_view set, const snapshot& data, stream_ref s);
/// Writes pattern_of(set, seed) and waits for it.
void fill_pattern(executor& ex, tensor_set_view set, std::uint64_t seed, stream_ref s);
/// Sets every byte of every tensor to `value` and waits for it.
void scribble(executor& ex, tensor_set_view set, int value, stream_ref s);
/// Copies every tensor back to host vectors and waits for it.
snapshot read_set(executor& ex, tensor_set_view set, stream_ref s);
/// An empty string when equal, else where the first difference is.
std::string first_difference(const snapshot& expected, const snapshot& actual);
/// Runs of non-empty tensors that touch in device memory within one of the set's allocations: the
/// fewest copies one direction can take (one copy may not span two allocations, even touching).
std::size_t contiguous_runs(const device_set& set);

/// Tracks host allocations (pinned and pageable) that are live now and at most at once.
class host_memory_tracker final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;
  struct figures {
    std::size_t live_allocations = 0, live_bytes = 0;
    std::size_t peak_allocations = 0, peak_bytes = 0;
    std::size_t allocations = 0;  ///< host allocations made in all
  };
  [[nodiscard]] figures pinned() const;
  [[nodiscard]] figures host() const;  ///< pinned and pageable together
  void reset_peaks() noexcept;

 private:
  void* do_allocate(memory_kind kind, std::size_t bytes, int device) override;
  void do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept override;
  static void add(figures& f, std::size_t bytes) noexcept;
  mutable std::mutex mutex_;
  figures pinned_, host_;
};

}  // namespace offloadkit::arena::testing
