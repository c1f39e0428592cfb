// Random tensor sets on an executor, and host-memory tracking for the arena battery.
#include <algorithm>
#include <cstdint>
#include <string>

#include "offloadkit/detail/splitmix64.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/testing/arena_battery_support.hpp"

namespace offloadkit::arena::testing {

std::size_t set_spec::total() const {
  std::size_t n = 0;
  for (const tensor_spec& t : tensors) n += t.bytes;
  return n;
}

void showValue(const set_spec& spec, std::ostream& os) {
  os << spec.tensors.size() << " tensors, " << spec.total() << " bytes, lead " << spec.lead
     << ": [";
  for (std::size_t i = 0; i < spec.tensors.size(); ++i) {
    const tensor_spec& t = spec.tensors[i];
    if (i != 0) os << ' ';
    if (t.joins) os << '+' << (t.gap != 0 ? std::to_string(t.gap) + "/" : std::string());
    os << t.bytes << (t.bytes == 0 && t.null_if_empty ? "(null)" : "");
  }
  os << ']';
}

device_set make_device_set(executor& ex, const set_spec& spec, int device) {
  device_set out;
  out.tensors.resize(spec.tensors.size());
  std::size_t i = 0;
  while (i < spec.tensors.size()) {
    // A group: tensor i and the following tensors that join it share one allocation.
    std::size_t end = i + 1;
    std::size_t bytes = spec.lead + spec.tensors[i].bytes;
    while (end < spec.tensors.size() && spec.tensors[end].joins) {
      bytes += spec.tensors[end].gap + spec.tensors[end].bytes;
      ++end;
    }
    out.allocations.emplace_back(ex, memory_kind::device, bytes, device);
    auto* base = out.allocations.back().as<unsigned char>();
    std::size_t at = spec.lead;
    for (std::size_t k = i; k < end; ++k) {
      if (k != i) at += spec.tensors[k].gap;
      const tensor_spec& t = spec.tensors[k];
      out.tensors[k].bytes = t.bytes;
      out.tensors[k].data = (t.bytes == 0 && t.null_if_empty) ? nullptr : base + at;
      at += t.bytes;
    }
    i = end;
  }
  return out;
}

snapshot pattern_of(tensor_set_view set, std::uint64_t seed) {
  snapshot data(set.size());
  for (std::size_t i = 0; i < set.size(); ++i) {
    std::uint64_t x = seed ^ (0x100000001b3ull * (i + 1));
    data[i].resize(set[i].bytes);
    for (std::size_t b = 0; b < set[i].bytes; b += 8) {
      const std::uint64_t v = offloadkit::detail::splitmix64(x);
      for (std::size_t k = 0; k < 8 && b + k < set[i].bytes; ++k) {
        data[i][b + k] = static_cast<unsigned char>(v >> (8 * k));
      }
    }
  }
  return data;
}

void write_set(executor& ex, tensor_set_view set, const snapshot& data, stream_ref s) {
  OFFLOADKIT_EXPECTS(data.size() == set.size(), out_of_range, "write_set: ", data.size(),
                     " tensors of data for a set of ", set.size());
  for (std::size_t i = 0; i < set.size(); ++i) {
    OFFLOADKIT_EXPECTS(data[i].size() == set[i].bytes, out_of_range, "write_set: tensor ", i,
                       " has ", set[i].bytes, " bytes, its data ", data[i].size());
    if (set[i].bytes != 0) ex.copy(set[i].data, data[i].data(), set[i].bytes, s);
  }
}

void fill_pattern(executor& ex, tensor_set_view set, std::uint64_t seed, stream_ref s) {
  const snapshot data = pattern_of(set, seed);
  write_set(ex, set, data, s);
  ex.synchronize(s);
}

void scribble(executor& ex, tensor_set_view set, int value, stream_ref s) {
  for (const device_tensor& t : set) {
    if (t.bytes != 0) ex.fill(t.data, value, t.bytes, s);
  }
  ex.synchronize(s);
}

snapshot read_set(executor& ex, tensor_set_view set, stream_ref s) {
  snapshot out(set.size());
  for (std::size_t i = 0; i < set.size(); ++i) {
    out[i].resize(set[i].bytes);
    if (set[i].bytes != 0) ex.copy(out[i].data(), set[i].data, set[i].bytes, s);
  }
  ex.synchronize(s);
  return out;
}

std::string first_difference(const snapshot& expected, const snapshot& actual) {
  if (expected.size() != actual.size()) {
    return ::offloadkit::detail::concat(expected.size(), " tensors expected, ", actual.size(),
                                        " found");
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (expected[i].size() != actual[i].size()) {
      return ::offloadkit::detail::concat("tensor ", i, ": ", expected[i].size(),
                                          " bytes expected, ", actual[i].size(), " found");
    }
    auto m = std::mismatch(expected[i].begin(), expected[i].end(), actual[i].begin());
    if (m.first != expected[i].end()) {
      return ::offloadkit::detail::concat(
          "tensor ", i, " of ", expected.size(), " (", expected[i].size(), " bytes): byte ",
          m.first - expected[i].begin(), " is ", int(*m.second), ", expected ", int(*m.first));
    }
  }
  return {};
}

std::size_t contiguous_runs(const device_set& set) {
  auto allocation_of = [&set](const device_tensor& t) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    for (std::size_t a = 0; a < set.allocations.size(); ++a) {
      const auto* base = set.allocations[a].as<unsigned char>();
      if (p >= base && p < base + set.allocations[a].size()) return a;
    }
    return set.allocations.size();  // not carved from the set's allocations
  };
  std::size_t runs = 0;
  const device_tensor* prev = nullptr;
  std::size_t prev_allocation = 0;
  for (const device_tensor& t : set.tensors) {
    if (t.bytes == 0) continue;
    const std::size_t allocation = allocation_of(t);
    if (prev == nullptr || allocation != prev_allocation ||
        static_cast<const unsigned char*>(prev->data) + prev->bytes !=
            static_cast<const unsigned char*>(t.data)) {
      ++runs;
    }
    prev = &t;
    prev_allocation = allocation;
  }
  return runs;
}

void host_memory_tracker::add(figures& f, std::size_t bytes) noexcept {
  ++f.live_allocations;
  ++f.allocations;
  f.live_bytes += bytes;
  f.peak_allocations = std::max(f.peak_allocations, f.live_allocations);
  f.peak_bytes = std::max(f.peak_bytes, f.live_bytes);
}

void* host_memory_tracker::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  void* p = executor_adaptor::do_allocate(kind, bytes, device);
  if (kind != memory_kind::device) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (kind == memory_kind::pinned) add(pinned_, bytes);
    add(host_, bytes);
  }
  return p;
}

void host_memory_tracker::do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept {
  if (kind != memory_kind::device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto drop = [bytes](figures& f) {
      --f.live_allocations;
      f.live_bytes -= bytes;
    };
    if (kind == memory_kind::pinned) drop(pinned_);
    drop(host_);
  }
  executor_adaptor::do_deallocate(kind, p, bytes);
}

host_memory_tracker::figures host_memory_tracker::pinned() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pinned_;
}

host_memory_tracker::figures host_memory_tracker::host() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return host_;
}

void host_memory_tracker::reset_peaks() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  pinned_.peak_allocations = pinned_.live_allocations;
  pinned_.peak_bytes = pinned_.live_bytes;
  host_.peak_allocations = host_.live_allocations;
  host_.peak_bytes = host_.live_bytes;
}

}  // namespace offloadkit::arena::testing
