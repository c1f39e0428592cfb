// Layout planning and the plan cache.
#include "offloadkit/arena/layout.hpp"

#include <cstdint>
#include <limits>

#include "offloadkit/error.hpp"

namespace offloadkit::arena {
namespace {

std::size_t align_up(std::size_t v, std::size_t a, std::size_t tensor) {
  OFFLOADKIT_EXPECTS(v <= std::numeric_limits<std::size_t>::max() - (a - 1), out_of_range,
                     "layout: host offset ", v, " of tensor ", tensor,
                     " overflows when aligned to ", a);
  return (v + a - 1) & ~(a - 1);
}

bool device_contiguous(const device_tensor& prev, const device_tensor& next) {
  return static_cast<const std::byte*>(prev.data) + prev.bytes ==
         static_cast<const std::byte*>(next.data);
}

/// Decides whether a tensor joins the previous one, asking for each allocation's extent once
/// (consecutive tensors of one allocation are answered from the extent already known).
class joiner {
 public:
  explicit joiner(const extent_lookup& extent_of) : extent_of_(extent_of) {}
  bool joins(const device_tensor& prev, const device_tensor& next) {
    if (!device_contiguous(prev, next)) return false;
    if (!extent_of_) return true;
    if (!known_.contains(next.data)) known_ = extent_of_(next.data);
    return known_.contains(next.data) && known_.contains(prev.data);
  }

 private:
  const extent_lookup& extent_of_;
  allocation_extent known_;
};

}  // namespace

std::size_t layout_key_hash::operator()(const layout_key& k) const noexcept {
  // FNV-1a over sizes and adjacency bits: cheap, and shapes differ in many places when they differ.
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(k.sizes.size());
  for (std::size_t i = 0; i < k.sizes.size(); ++i) {
    mix(k.sizes[i]);
    mix(k.continues[i] ? 1 : 0);
  }
  return static_cast<std::size_t>(h);
}

layout_key make_key(tensor_set_view set, const extent_lookup& extent_of) {
  layout_key k;
  k.sizes.resize(set.size());
  k.continues.assign(set.size(), false);
  joiner join(extent_of);
  const device_tensor* prev = nullptr;
  for (std::size_t i = 0; i < set.size(); ++i) {
    k.sizes[i] = set[i].bytes;
    if (set[i].bytes == 0) continue;
    k.continues[i] = prev != nullptr && join.joins(*prev, set[i]);
    prev = &set[i];
  }
  return k;
}

layout_plan plan_layout(const layout_key& key, std::size_t alignment) {
  OFFLOADKIT_EXPECTS(alignment != 0 && (alignment & (alignment - 1)) == 0, out_of_range,
                     "layout: alignment = ", alignment, " is not a power of two >= 1");
  OFFLOADKIT_EXPECTS(key.continues.size() == key.sizes.size(), out_of_range, "layout: key has ",
                     key.sizes.size(), " sizes but ", key.continues.size(), " adjacency flags");
  layout_plan p;
  p.key = key;
  p.alignment = alignment;
  p.offsets.resize(key.sizes.size());
  std::size_t cursor = 0;
  for (std::size_t i = 0; i < key.sizes.size(); ++i) {
    const std::size_t bytes = key.sizes[i];
    if (bytes == 0) {
      p.offsets[i] = cursor;
      continue;
    }
    if (key.continues[i] && !p.runs.empty()) {
      copy_run& r = p.runs.back();
      p.offsets[i] = cursor;
      r.count = i + 1 - r.first;
      r.bytes += bytes;
    } else {
      cursor = align_up(cursor, alignment, i);
      p.offsets[i] = cursor;
      p.runs.push_back(copy_run{i, 1, cursor, bytes});
    }
    OFFLOADKIT_EXPECTS(bytes <= std::numeric_limits<std::size_t>::max() - cursor, out_of_range,
                       "layout: tensor ", i, " of ", bytes, " bytes at host offset ", cursor,
                       " overflows size_t");
    cursor += bytes;
  }
  p.total_bytes = cursor;
  return p;
}

std::vector<copy_run> coalesce(const layout_plan& plan, tensor_set_view set,
                               const extent_lookup& extent_of) {
  OFFLOADKIT_EXPECTS(set.size() == plan.offsets.size(), out_of_range, "layout: set of ", set.size(),
                     " tensors does not match a plan of ", plan.offsets.size());
  std::vector<copy_run> runs;
  joiner join(extent_of);
  const device_tensor* prev = nullptr;
  std::size_t prev_index = 0;
  for (std::size_t i = 0; i < set.size(); ++i) {
    const std::size_t bytes = set[i].bytes;
    if (bytes == 0) continue;
    const bool host_next =
        prev != nullptr && plan.offsets[prev_index] + prev->bytes == plan.offsets[i];
    if (host_next && join.joins(*prev, set[i])) {
      runs.back().count = i + 1 - runs.back().first;
      runs.back().bytes += bytes;
    } else {
      runs.push_back(copy_run{i, 1, plan.offsets[i], bytes});
    }
    prev = &set[i];
    prev_index = i;
  }
  return runs;
}

layout_cache::layout_cache(std::size_t alignment, std::size_t capacity)
    : alignment_(alignment), capacity_(capacity == 0 ? 1 : capacity) {
  OFFLOADKIT_EXPECTS(alignment != 0 && (alignment & (alignment - 1)) == 0, out_of_range,
                     "layout_cache: alignment = ", alignment, " is not a power of two >= 1");
}

std::shared_ptr<const layout_plan> layout_cache::get(tensor_set_view set,
                                                     const extent_lookup& extent_of) {
  layout_key key = make_key(set, extent_of);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  auto plan = std::make_shared<const layout_plan>(plan_layout(key, alignment_));
  // A workload cycles through few shapes; starting over keeps a drifting one from growing memory.
  if (plans_.size() >= capacity_) plans_.clear();
  plans_.emplace(std::move(key), plan);
  ++built_;
  return plan;
}

}  // namespace offloadkit::arena
