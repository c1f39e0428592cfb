// What the executor properties share inside the battery library: byte patterns and comparisons,
// a mapped range, managed memory, random sizes and memory kinds, and each property's declaration
// (the bodies are in this folder's *_properties.cpp, listed by battery.cpp).
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "executor_kernels.hpp"
#include "offloadkit/adaptors.hpp"
#include "offloadkit/detail/splitmix64.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/testing/device_memory.hpp"
#include "offloadkit/testing/fault_countdown.hpp"
#include "offloadkit/testing/sync_on_exit.hpp"

namespace offloadkit::testing::executor_properties {

using executor_checks::index_value;
using executor_checks::launch_affine;
using executor_checks::launch_count_and_write;
using offloadkit::testing::sync_on_exit;
using std::chrono::microseconds;
using std::chrono::milliseconds;

inline constexpr std::size_t kib = std::size_t{1} << 10;
inline constexpr std::size_t mib = std::size_t{1} << 20;

// ---- helpers ------------------------------------------------------------------------------------

using offloadkit::detail::splitmix64;

/// Captures what `body` issues on `s` into a graph. Should `body` throw, the capture is ended (so
/// that the stream is usable for the checks that follow) and the error goes on.
template <class Body>
inline graph capture_graph(executor& ex, stream_ref s, Body&& body) {
  ex.begin_capture(s);
  try {
    std::forward<Body>(body)();
  } catch (...) {
    try {
      graph discarded(ex, ex.end_capture(s));
    } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one to report
    }
    throw;
  }
  return graph(ex, ex.end_capture(s));
}

/// Fills host-visible memory with bytes determined by `seed` (distinct seeds, distinct bytes).
inline void write_pattern(void* p, std::size_t bytes, std::uint64_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  std::uint64_t state = seed;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const std::uint64_t v = splitmix64(state);
    std::memcpy(b + i, &v, 8);
  }
  if (i < bytes) {
    const std::uint64_t v = splitmix64(state);
    std::memcpy(b + i, &v, bytes - i);
  }
}

inline std::string hex_byte(unsigned char c) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(2) << std::setfill('0') << static_cast<unsigned>(c);
  return os.str();
}

/// Fails the case, naming the first differing byte and how many differ, unless the bytes match.
inline void expect_bytes(const void* actual, const void* expected, std::size_t bytes,
                         const std::string& what) {
  if (bytes == 0 || std::memcmp(actual, expected, bytes) == 0) return;
  const auto* a = static_cast<const unsigned char*>(actual);
  const auto* e = static_cast<const unsigned char*>(expected);
  std::size_t first = bytes;
  std::size_t differing = 0;
  for (std::size_t i = 0; i < bytes; ++i) {
    if (a[i] != e[i]) {
      if (first == bytes) first = i;
      ++differing;
    }
  }
  RC_FAIL(offloadkit::detail::concat(what, ": ", differing, " of ", bytes,
                                     " bytes differ, the first at byte ", first, " (got ",
                                     hex_byte(a[first]), ", expected ", hex_byte(e[first]), ")"));
}

inline unsigned char* at(const buffer& b, std::size_t offset) {
  return b.as<unsigned char>() + offset;
}

/// A reserved virtual range on one device with physical memory of that device mapped behind it
/// and access granted to it; remap() replaces the physical memory at the same address. Every step
/// that fails is rolled back.
class mapped_range {
 public:
  mapped_range(executor& ex, std::size_t bytes, int device = 0)
      : ex_(ex), bytes_(bytes), device_(device) {
    va_ = ex_.reserve(bytes_, device_);
    try {
      map_new();
    } catch (...) {
      // No destructor runs for a half-built object: undo what map_new() got done.
      teardown();
      throw;
    }
  }
  mapped_range(const mapped_range&) = delete;
  mapped_range& operator=(const mapped_range&) = delete;
  ~mapped_range() { teardown(); }

  /// Unmaps and releases the physical memory; the address stays reserved.
  void unmap_and_release() {
    ex_.unmap(va_, bytes_);
    mapped_ = false;
    ex_.release_physical(physical_);
    has_physical_ = false;
  }
  /// Creates new physical memory and maps it at the same address.
  void map_new() {
    physical_ = ex_.create_physical(bytes_, device_);
    has_physical_ = true;
    ex_.map(va_, bytes_, physical_);
    mapped_ = true;
    ex_.set_access(va_, bytes_, device_);
  }

  [[nodiscard]] void* data() const noexcept { return va_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] const physical_handle& physical() const noexcept { return physical_; }

 private:
  void teardown() noexcept {
    if (mapped_) {
      try {
        ex_.unmap(va_, bytes_);
      } catch (...) {  // NOLINT(bugprone-empty-catch): teardown never throws
      }
      mapped_ = false;
    }
    if (has_physical_) ex_.release_physical(physical_);
    has_physical_ = false;
    ex_.unreserve(va_, bytes_);
  }

  executor& ex_;
  std::size_t bytes_;
  int device_;
  void* va_ = nullptr;
  physical_handle physical_{};
  bool has_physical_ = false;
  bool mapped_ = false;
};

/// Byte counts for copies and fills: the edges (0, 1, odd, around a page) often, sizes up to
/// `max` sometimes.
inline std::size_t gen_bytes(std::size_t max) {
  return *rc::gen::weightedOneOf<std::size_t>({
      {3, rc::gen::element<std::size_t>(0, 1, 2, 3, 7, 8, 63, 64, 65, 4095, 4096, 4097)},
      {4, rc::gen::inRange<std::size_t>(0, 4 * kib)},
      {2, rc::gen::inRange<std::size_t>(4 * kib, 256 * kib)},
      {1, rc::gen::inRange<std::size_t>(256 * kib, max + 1)},
  });
}

inline std::uint64_t gen_seed() { return *rc::gen::arbitrary<std::uint64_t>(); }

inline const char* kind_name(memory_kind k) { return to_string(k); }

/// A random memory kind (drawn as an index: rapidcheck shows ints in counterexamples).
inline memory_kind gen_kind() {
  constexpr std::array<memory_kind, 3> kinds = {memory_kind::device, memory_kind::pinned,
                                                memory_kind::pageable};
  return kinds[*rc::gen::inRange<std::size_t>(0, kinds.size())];
}

inline pointer_kind pointer_kind_of(memory_kind k) {
  switch (k) {
    case memory_kind::device:
      return pointer_kind::device;
    case memory_kind::pinned:
      return pointer_kind::pinned;
    case memory_kind::pageable:
      return pointer_kind::pageable;
  }
  return pointer_kind::pageable;
}

/// Copies device-visible bytes to a fresh host buffer (synchronously) so that they can be compared.
inline std::vector<unsigned char> read_back(executor& ex, const void* src, std::size_t bytes,
                                            stream_ref s) {
  buffer staging(ex, memory_kind::pinned, bytes);
  ex.copy(staging.data(), src, bytes, s);
  ex.synchronize(s);
  return std::vector<unsigned char>(staging.as<unsigned char>(),
                                    staging.as<unsigned char>() + bytes);
}

// ---- managed memory -----------------------------------------------------------------------------

/// A managed allocation, given back when it goes out of scope.
class managed_allocation {
 public:
  managed_allocation(executor& ex, std::size_t bytes, int device)
      : ex_(ex),
        bytes_(bytes),
        p_(static_cast<unsigned char*>(ex.allocate_managed(bytes, device))) {}
  managed_allocation(const managed_allocation&) = delete;
  managed_allocation& operator=(const managed_allocation&) = delete;
  ~managed_allocation() { ex_.deallocate_managed(p_, bytes_); }
  [[nodiscard]] unsigned char* data() const noexcept { return p_; }

 private:
  executor& ex_;
  std::size_t bytes_;
  unsigned char* p_;
};

// ---- properties (the battery lists them in battery.cpp) ---------------------------------------

/// Bytes survive a tour through every ordered pair of memory kinds (pageable, pinned, device, each
/// to itself too), each hop into a fresh buffer at a random misalignment, each hop on one of two
/// streams ordered by an event when the stream changes.
void copy_round_trip(executor& ex);

/// fill() sets exactly the requested bytes, in every memory kind, and nothing around them.
void fill_property(executor& ex);

/// A launched OFFLOADKIT_HD body runs exactly once per index: a device-scope atomic counter ends
/// at n and every index holds its own value.
void launch_count(executor& ex);

/// Work issued to one stream runs in issue order: a random sequence of fills, copies and launches
/// over three buffers, with random delays injected on the stream, ends in the same bytes as the
/// same sequence run one step at a time on the host.
void stream_order(executor& base);

/// With record on the producer and wait on the consumer, the consumer sees the producer's data
/// however long the producer is held back (injected delays on both streams).
void event_ordering(executor& base);

/// Without the wait, nothing orders the consumer after the producer: while the producer is held
/// back (an injected delay, then a gate the check opens only after the consumer finished), the
/// consumer reads the old bytes. This is what makes a missing wait observable; it fails if the
/// executor serializes its streams. The gate makes the verdict independent of timing, and orders
/// the consumer's read before the producer's write for race detectors.
void missing_wait_is_observable(executor& base);

/// Reserve, create, map, set access, write; then any number of cycles of copy out, unmap and
/// release, create and map again at the same address, copy back: the data and the address survive,
/// and the device memory is really given back while unmapped.
void vmm_remap(executor& ex);

/// A graph captured on a mapped range (copy in, kernel, copy out) replays correctly after the
/// range was unmapped, released, created and mapped again at the same address.
void graph_replay_after_remap(executor& ex);

/// Managed memory keeps its bytes however its pages move: written by the host, prefetched to
/// random devices and to the host on two streams (ordered by events), copied out to device memory,
/// overwritten and copied back in stream order, it reads back as written. classify() knows it for
/// what it is (its extent is extent_of_names_the_allocation's).
void managed_round_trip(executor& ex);

/// extent_of() names the allocation an address lies in: for random allocations of every kind and
/// random addresses inside them, the extent starts at the allocation and covers it. Device memory
/// and mapped ranges must be known on every back end (whoever merges neighbouring device buffers
/// into one copy relies on it); host memory must be known on the host back end, and where the
/// cuda back end knows it, it must be right.
void extent_of_names_the_allocation(executor& ex);

/// Every device's resources are that device's: for each device d (in a random order), a device
/// allocation, physical memory created, mapped and made accessible for d, and managed memory
/// prefetched to d are classified as d's and take d's memory (its free memory drops by at least
/// their bytes, except for managed memory, which a GPU driver pools and the host back end never
/// charges to a device) while no other device's free memory moves (exactly on the host back end,
/// within two granules on a GPU); streams and events of d say so, and a copy, a launch over d's
/// memory, an event recorded after them and a graph captured and replayed on a stream of d all run.
/// A graph's result is graph_replay_after_remap's to check, a mapping's kind vmm_remap's and
/// managed contents managed_round_trip's.
void device_placement(executor& ex);

/// Countdown fault injection (abseil's model): for N = 0, 1, 2, ... the N-th allocation, copy,
/// create_physical, map or set_access of the sequence fails; after each injected failure a clean
/// run of the sequence still works and no device memory is lost.
void fault_injection_leaves_executor_usable(executor& base);

/// The counting adaptor's figures equal a model's for a random sequence of allocations, copies
/// between every kind of memory, fills, launches, host functions and event waits.
void counting_adaptor_counts(executor& base);

}  // namespace offloadkit::testing::executor_properties
