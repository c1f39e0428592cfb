// Host layout of a tensor set in one buffer: where each tensor's bytes go, and which tensors can
// be copied together. A plan depends only on the set's shape (sizes, and which tensors are
// adjacent in device memory), so it is built once per shape and cached.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "offloadkit/arena/tensor_set.hpp"
#include "offloadkit/executor.hpp"

namespace offloadkit::arena {

/// Each run of device-contiguous tensors starts at a multiple of this in the host buffer.
inline constexpr std::size_t default_alignment = 256;

/// Tensors [first, first + count) copied as one range of `bytes` at `host_offset`.
struct copy_run {
  std::size_t first = 0;
  std::size_t count = 0;
  std::size_t host_offset = 0;
  std::size_t bytes = 0;
};

/// Where a device address's allocation lies (executor::extent_of). Two tensors join into one copy
/// only when their addresses touch *and* they share an allocation: separately allocated buffers
/// may touch, and a GPU rejects a copy that spans two allocations. An empty lookup trusts
/// touching addresses alone (for callers that carve every tensor from one allocation).
using extent_lookup = std::function<allocation_extent(const void*)>;

/// The shape a plan is keyed by. continues[i] is true when tensor i is non-empty and starts
/// exactly where the previous non-empty tensor ends in device memory, in the same allocation.
struct layout_key {
  std::vector<std::size_t> sizes;
  std::vector<bool> continues;
  friend bool operator==(const layout_key& a, const layout_key& b) {
    return a.sizes == b.sizes && a.continues == b.continues;
  }
};

struct layout_key_hash {
  std::size_t operator()(const layout_key& k) const noexcept;
};

struct layout_plan {
  layout_key key;
  std::size_t alignment = default_alignment;
  /// offsets[i]: where tensor i lives in the host buffer. Non-empty tensors never overlap.
  std::vector<std::size_t> offsets;
  /// The copies for a set of exactly this key: one per run of device-contiguous tensors.
  std::vector<copy_run> runs;
  /// Host bytes the plan needs (end of the last tensor).
  std::size_t total_bytes = 0;
};

layout_key make_key(tensor_set_view set, const extent_lookup& extent_of = {});

/// Lays out a shape: device-contiguous tensors stay contiguous (so they copy as one range), every
/// other tensor starts at the next multiple of `alignment` (a power of two).
layout_plan plan_layout(const layout_key& key, std::size_t alignment = default_alignment);

/// The runs for copying `set` against `plan`'s offsets when `set` has the plan's sizes but maybe
/// other addresses: tensors are merged only where both device and host sides are contiguous.
std::vector<copy_run> coalesce(const layout_plan& plan, tensor_set_view set,
                               const extent_lookup& extent_of = {});

/// Plans keyed by shape. A bounded cache: beyond `capacity` shapes it starts over.
class layout_cache {
 public:
  explicit layout_cache(std::size_t alignment = default_alignment, std::size_t capacity = 16);

  /// The plan for `set`'s shape, built on first sight of the shape.
  std::shared_ptr<const layout_plan> get(tensor_set_view set, const extent_lookup& extent_of = {});
  /// Plans built so far (a steady workload builds one per shape, once).
  [[nodiscard]] std::size_t plans_built() const noexcept { return built_; }
  [[nodiscard]] std::size_t size() const noexcept { return plans_.size(); }
  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }

 private:
  std::size_t alignment_;
  std::size_t capacity_;
  std::size_t built_ = 0;
  std::unordered_map<layout_key, std::shared_ptr<const layout_plan>, layout_key_hash> plans_;
};

}  // namespace offloadkit::arena
