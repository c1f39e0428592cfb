// Tests of what only the host back end does: stale virtual addresses fault, simulated device
// capacity and physical-memory accounting, cross-thread event ordering, capture and replay that
// re-read memory at replay time, sticky stream errors, and use from several host threads. The
// checks shared by both back ends are the executor battery in core/tests/.
#include "offloadkit/host_executor.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <cuda/atomic>
#include <fstream>
#include <future>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/launch.hpp"
#include "offloadkit/resources.hpp"

namespace ok = offloadkit;

namespace {

constexpr std::size_t kib = 1024;
constexpr std::size_t granule = 64 * kib;

ok::host_executor_options small_options() {
  ok::host_executor_options o;
  o.devices = 2;
  o.device_capacity = 1024 * kib;
  o.granularity = granule;
  o.launch_threads = 4;
  return o;
}

void touch(void* p) { *static_cast<volatile char*>(p) = 1; }

// A touch of a stale address must die of SIGSEGV; under a sanitizer, whose handler reports the
// fault and exits, it must die with the sanitizer's SEGV report.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EXPECT_FAULT(statement) EXPECT_DEATH(statement, "SEGV")
#else
#define EXPECT_FAULT(statement) EXPECT_EXIT(statement, ::testing::KilledBySignal(SIGSEGV), "")
#endif

char* at(void* p, std::size_t offset) { return static_cast<char*>(p) + offset; }

/// Mappings of the host back end's physical memory in this process: they vanish only when the
/// memory is really gone (released and unmapped), not when an allocator's count says so.
int physical_mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("offloadkit-physical") != std::string::npos) ++n;
  }
  return n;
}

/// A gate a host function blocks on until the test opens it.
struct gate {
  std::promise<void> opened;
  std::shared_future<void> future = opened.get_future().share();
  void open() { opened.set_value(); }
};

template <class Exception, class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const Exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

// Launch bodies (trivially copyable, device pointers by value).
struct count_indices {
  int* counts;
  unsigned long long* sum;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    cuda::atomic_ref<int, cuda::thread_scope_device>(counts[i]).fetch_add(1);
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(*sum).fetch_add(i);
  }
};

/// Marks the first *count of n slots: reads the count from (device) memory when it runs.
struct mark_first_rows {
  const int* count;
  int* out;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    out[i] = static_cast<int>(i) < *count ? 1 : 0;
  }
};

/// The planted bug: the count is read once on the host and baked into the body.
struct mark_first_rows_baked {
  int count;
  int* out;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    out[i] = static_cast<int>(i) < count ? 1 : 0;
  }
};

struct throw_at_seven {
  void operator()(std::size_t i) const {
    if (i == 7) throw std::out_of_range("index 7 is cursed");
  }
};

int sum_of(const int* p, std::size_t n) {
  int s = 0;
  for (std::size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

}  // namespace

// ---- virtual memory faults ---------------------------------------------------------------------

TEST(HostExecutorDeathTest, TouchingAReservedButUnmappedAddressFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ok::host_executor ex(small_options());
  void* va = ex.reserve(4 * granule);
  EXPECT_FAULT(touch(va));
  EXPECT_FAULT(touch(at(va, 3 * granule + 17)));
  ex.unreserve(va, 4 * granule);
}

TEST(HostExecutorDeathTest, MappedMemoryFaultsUntilSetAccessAndAfterUnmap) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ok::host_executor ex(small_options());
  void* va = ex.reserve(2 * granule);
  ok::physical_handle h = ex.create_physical(granule);
  ex.map(va, granule, h);
  // Mapped but not yet accessible, as on CUDA.
  EXPECT_FAULT(touch(va));
  ex.set_access(va, granule);
  touch(va);
  std::memset(va, 0x5a, granule);
  // The second granule was never mapped.
  EXPECT_FAULT(touch(at(va, granule)));

  ex.unmap(va, granule);
  EXPECT_FAULT(touch(va));
  EXPECT_FAULT(touch(at(va, granule - 1)));

  // The physical memory outlives the mapping while its handle lives: remapping restores the data
  // at the same address.
  ex.map(va, granule, h);
  ex.set_access(va, granule);
  EXPECT_EQ(static_cast<unsigned char*>(va)[granule - 1], 0x5a);
  ex.unmap(va, granule);
  ex.release_physical(h);
  ex.unreserve(va, 2 * granule);
}

TEST(HostExecutorDeathTest, AStreamCopyIntoAnUnmappedRangeFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ok::host_executor ex(small_options());
  void* va = ex.reserve(granule);
  std::vector<char> src(64, 1);
  ok::stream s(ex);
  EXPECT_FAULT({
    ex.copy(va, src.data(), src.size(), s);
    ex.synchronize(s);
  });
  ex.unreserve(va, granule);
}

// ---- capacity and accounting -------------------------------------------------------------------

TEST(HostExecutor, ExhaustingDeviceCapacityThrowsOutOfMemoryAndRecovers) {
  ok::host_executor ex(small_options());
  void* a = ex.allocate(ok::memory_kind::device, 768 * kib, 0);
  EXPECT_EQ(ex.device_memory(0).free, 256 * kib);
  EXPECT_EQ(ex.device_memory(0).total, 1024 * kib);

  const std::string msg = message_of<ok::out_of_memory>(
      [&] { (void)ex.allocate(ok::memory_kind::device, 512 * kib, 0); });
  EXPECT_NE(msg.find("524288"), std::string::npos) << msg;  // what was asked for
  EXPECT_NE(msg.find("262144"), std::string::npos) << msg;  // what was free
  // The failure changed nothing.
  EXPECT_EQ(ex.device_memory(0).free, 256 * kib);
  // Other devices and host memory do not count against device 0.
  void* other = ex.allocate(ok::memory_kind::device, 1024 * kib, 1);
  void* pinned = ex.allocate(ok::memory_kind::pinned, 4096 * kib);
  EXPECT_EQ(ex.device_memory(1).free, 0U);
  EXPECT_THROW((void)ex.allocate(ok::memory_kind::device, 1, 1), ok::out_of_memory);
  // Physical memory shares the capacity.
  EXPECT_THROW((void)ex.create_physical(8 * granule, 0), ok::out_of_memory);
  const ok::physical_handle h = ex.create_physical(4 * granule, 0);
  EXPECT_EQ(ex.device_memory(0).free, 0U);
  ex.release_physical(h);

  ex.deallocate(ok::memory_kind::device, a, 768 * kib);
  EXPECT_EQ(ex.device_memory(0).free, 1024 * kib);
  void* whole = ex.allocate(ok::memory_kind::device, 1024 * kib, 0);
  ex.deallocate(ok::memory_kind::device, whole, 1024 * kib);
  ex.deallocate(ok::memory_kind::device, other, 1024 * kib);
  ex.deallocate(ok::memory_kind::pinned, pinned, 4096 * kib);
  EXPECT_EQ(ex.device_memory(1).free, 1024 * kib);
}

ok::host_executor_options adjacent_options() {
  ok::host_executor_options o = small_options();
  o.adjacent_allocations = true;
  return o;
}

const char* bytes_of(const void* p) { return static_cast<const char*>(p); }

TEST(HostExecutorAdjacent, OffUnlessAskedFor) {
  EXPECT_FALSE(ok::host_executor_options{}.adjacent_allocations);
  ok::host_executor heap(small_options());
  void* a = heap.allocate(ok::memory_kind::device, 1024, 0);
  void* b = heap.allocate(ok::memory_kind::device, 1024, 0);
  EXPECT_NE(bytes_of(a) + 1024, bytes_of(b));  // the heap keeps its own headers in between
  heap.deallocate(ok::memory_kind::device, b, 1024);
  heap.deallocate(ok::memory_kind::device, a, 1024);
}

TEST(HostExecutorAdjacent, ConsecutiveAllocationsTouchAndEachKeepsItsOwnExtent) {
  ok::host_executor ex(adjacent_options());
  EXPECT_TRUE(ex.options().adjacent_allocations);
  for (const ok::memory_kind kind : {ok::memory_kind::device, ok::memory_kind::pinned}) {
    void* a = ex.allocate(kind, 1000, 0);  // padded to 1024
    void* b = ex.allocate(kind, 512, 0);
    void* c = ex.allocate(kind, 0, 0);  // still a block of its own
    EXPECT_EQ(bytes_of(b), bytes_of(a) + 1024) << ok::to_string(kind);
    EXPECT_EQ(bytes_of(c), bytes_of(b) + 512) << ok::to_string(kind);
    EXPECT_EQ(ex.extent_of(bytes_of(a) + 999).base, a);
    EXPECT_EQ(ex.extent_of(bytes_of(a) + 999).bytes, 1000U);
    EXPECT_EQ(ex.extent_of(b).base, b);
    EXPECT_EQ(ex.extent_of(b).bytes, 512U);
    EXPECT_EQ(ex.classify(b).kind, kind == ok::memory_kind::device ? ok::pointer_kind::device
                                                                   : ok::pointer_kind::pinned);
    ex.deallocate(kind, c, 0);
    ex.deallocate(kind, b, 512);
    ex.deallocate(kind, a, 1000);
  }
  // Pageable memory is the heap's, as on a GPU.
  void* p = ex.allocate(ok::memory_kind::pageable, 64);
  EXPECT_EQ(ex.classify(p).kind, ok::pointer_kind::pageable);
  ex.deallocate(ok::memory_kind::pageable, p, 64);
}

TEST(HostExecutorAdjacent, ACopyThatSpansTwoTouchingAllocationsIsRejectedAsOnAGpu) {
  ok::host_executor ex(adjacent_options());
  ok::stream s(ex, 0);
  void* a = ex.allocate(ok::memory_kind::device, 1024, 0);
  void* b = ex.allocate(ok::memory_kind::device, 1024, 0);
  ASSERT_EQ(bytes_of(b), bytes_of(a) + 1024);
  ok::buffer host(ex, ok::memory_kind::pinned, 2048);
  for (std::size_t i = 0; i < 2048; ++i)
    host.as<unsigned char>()[i] = static_cast<unsigned char>(i);
  // Each allocation on its own works, and its bytes are its own.
  ex.copy(a, host.data(), 1024, s);
  ex.copy(b, host.as<char>() + 1024, 1024, s);
  ok::buffer back(ex, ok::memory_kind::pinned, 2048);
  ex.copy(back.data(), a, 1024, s);
  ex.copy(back.as<char>() + 1024, b, 1024, s);
  s.synchronize();
  EXPECT_EQ(std::memcmp(back.data(), host.data(), 2048), 0);
  // One copy over both, although the addresses are contiguous, is refused in either direction.
  const std::string msg = message_of<ok::out_of_range>([&] { ex.copy(back.data(), a, 2048, s); });
  EXPECT_NE(msg.find("runs past the end"), std::string::npos) << msg;
  EXPECT_THROW(ex.copy(a, host.data(), 2048, s), ok::out_of_range);
  EXPECT_THROW(ex.fill(static_cast<char*>(a) + 512, 0, 1024, s), ok::out_of_range);
  ex.deallocate(ok::memory_kind::device, b, 1024);
  ex.deallocate(ok::memory_kind::device, a, 1024);
}

TEST(HostExecutorAdjacent, FreedRangesAreReusedLowestFirstAndMergeWithTheirNeighbours) {
  ok::host_executor ex(adjacent_options());
  const auto dev = ok::memory_kind::device;
  void* a = ex.allocate(dev, 256, 0);
  void* b = ex.allocate(dev, 256, 0);
  void* c = ex.allocate(dev, 256, 0);
  ex.deallocate(dev, b, 256);
  void* b2 = ex.allocate(dev, 256, 0);
  EXPECT_EQ(b2, b);  // the hole is filled first
  ex.deallocate(dev, a, 256);
  ex.deallocate(dev, b2, 256);
  void* ab = ex.allocate(dev, 512, 0);
  EXPECT_EQ(ab, a);  // the two freed neighbours merged into one range
  void* d = ex.allocate(dev, 256, 0);
  EXPECT_EQ(bytes_of(d), bytes_of(c) + 256);
  // Another device's allocations come from its own reservation.
  void* other = ex.allocate(dev, 256, 1);
  EXPECT_EQ(ex.extent_of(other).base, other);
  EXPECT_EQ(ex.classify(other).device, 1);
  for (void* p : {ab, c, d, other}) ex.deallocate(dev, p, p == ab ? 512 : 256);
  EXPECT_EQ(ex.device_memory(0).free, 1024 * kib);
}

TEST(HostExecutorAdjacent, CapacityStillBoundsDeviceMemory) {
  ok::host_executor ex(adjacent_options());
  void* a = ex.allocate(ok::memory_kind::device, 768 * kib, 0);
  EXPECT_EQ(ex.device_memory(0).free, 256 * kib);
  EXPECT_THROW((void)ex.allocate(ok::memory_kind::device, 512 * kib, 0), ok::out_of_memory);
  EXPECT_EQ(ex.device_memory(0).free, 256 * kib);  // the failure changed nothing
  ex.deallocate(ok::memory_kind::device, a, 768 * kib);
  void* whole = ex.allocate(ok::memory_kind::device, 1024 * kib, 0);
  EXPECT_EQ(whole, a);
  EXPECT_EQ(ex.device_memory(0).free, 0U);
  ex.deallocate(ok::memory_kind::device, whole, 1024 * kib);
}

TEST(HostExecutor, PhysicalMemoryGoesOnlyWhenReleasedAndUnmapped) {
  ok::host_executor ex(small_options());
  const std::size_t free0 = ex.device_memory(0).free;
  const int mappings0 = physical_mappings();
  void* va = ex.reserve(4 * granule);

  // release while mapped, then unmap
  ok::physical_handle h = ex.create_physical(2 * granule);
  EXPECT_EQ(ex.device_memory(0).free, free0 - 2 * granule);
  ex.map(va, 2 * granule, h);
  ex.set_access(va, 2 * granule);
  std::memset(va, 1, 2 * granule);
  EXPECT_EQ(physical_mappings(), mappings0 + 1);
  ex.release_physical(h);
  EXPECT_EQ(ex.device_memory(0).free, free0 - 2 * granule);
  EXPECT_EQ(static_cast<char*>(va)[0], 1);  // still mapped, still there
  ex.unmap(va, 2 * granule);
  EXPECT_EQ(ex.device_memory(0).free, free0);
  EXPECT_EQ(physical_mappings(), mappings0);

  // unmap, then release
  h = ex.create_physical(granule);
  ex.map(at(va, granule), granule, h);
  ex.unmap(at(va, granule), granule);
  EXPECT_EQ(ex.device_memory(0).free, free0 - granule);
  ex.release_physical(h);
  EXPECT_EQ(ex.device_memory(0).free, free0);

  // unreserve takes whatever is still mapped with it
  h = ex.create_physical(granule);
  ex.map(at(va, 3 * granule), granule, h);
  ex.release_physical(h);
  EXPECT_EQ(ex.device_memory(0).free, free0 - granule);
  ex.unreserve(va, 4 * granule);
  EXPECT_EQ(ex.device_memory(0).free, free0);
  EXPECT_EQ(physical_mappings(), mappings0);
}

TEST(HostExecutor, OnePhysicalAllocationMappedTwiceSharesItsBytes) {
  ok::host_executor ex(small_options());
  void* a = ex.reserve(granule);
  void* b = ex.reserve(granule);
  const ok::physical_handle h = ex.create_physical(granule);
  ex.map(a, granule, h);
  ex.map(b, granule, h);
  ex.set_access(a, granule);
  ex.set_access(b, granule);
  static_cast<int*>(a)[5] = 42;
  EXPECT_EQ(static_cast<int*>(b)[5], 42);
  ex.release_physical(h);
  ex.unmap(a, granule);
  EXPECT_EQ(static_cast<int*>(b)[5], 42);
  EXPECT_EQ(ex.device_memory(0).free, ex.device_memory(0).total - granule);
  ex.unmap(b, granule);
  EXPECT_EQ(ex.device_memory(0).free, ex.device_memory(0).total);
  ex.unreserve(a, granule);
  ex.unreserve(b, granule);
}

TEST(HostExecutor, VirtualMemoryRejectsBadArgumentsClearly) {
  ok::host_executor ex(small_options());
  EXPECT_EQ(ex.granularity(0), granule);
  std::string msg = message_of<ok::out_of_range>([&] { (void)ex.reserve(granule + 1); });
  EXPECT_NE(msg.find(std::to_string(granule + 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(granule)), std::string::npos) << msg;
  EXPECT_THROW((void)ex.reserve(0), ok::out_of_range);
  EXPECT_THROW((void)ex.create_physical(granule / 2), ok::out_of_range);
  EXPECT_THROW((void)ex.reserve(granule, 2), ok::out_of_range);

  void* va = ex.reserve(4 * granule);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(va) % granule, 0U);
  const ok::physical_handle h = ex.create_physical(granule);
  EXPECT_THROW(ex.map(at(va, 4096), granule, h), ok::logic_error);          // not granule-aligned
  EXPECT_THROW(ex.map(at(va, 4 * granule), granule, h), ok::out_of_range);  // past the end
  EXPECT_THROW(ex.map(va, 2 * granule, h), ok::logic_error);                // size differs
  EXPECT_THROW(ex.set_access(va, granule), ok::logic_error);                // nothing mapped
  EXPECT_THROW(ex.unmap(va, granule), ok::logic_error);                     // nothing mapped
  ex.map(va, granule, h);
  msg = message_of<ok::logic_error>([&] { ex.map(va, granule, h); });
  EXPECT_NE(msg.find("overlaps"), std::string::npos) << msg;
  const ok::physical_handle big = ex.create_physical(2 * granule);
  ex.map(at(va, granule), 2 * granule, big);
  EXPECT_THROW(ex.unmap(at(va, granule), granule), ok::logic_error);  // half a mapping
  EXPECT_THROW(ex.set_access(va, 4 * granule), ok::logic_error);      // last granule unmapped
  ex.set_access(va, 3 * granule);
  ex.unmap(va, 3 * granule);  // two whole mappings at once
  ex.release_physical(big);
  ex.release_physical(h);
  msg = message_of<ok::logic_error>([&] { ex.map(va, granule, h); });
  EXPECT_NE(msg.find("released"), std::string::npos) << msg;
  // Still usable after every rejection.
  const ok::physical_handle again = ex.create_physical(granule);
  ex.map(va, granule, again);
  ex.set_access(va, granule);
  touch(va);
  ex.unmap(va, granule);
  ex.release_physical(again);
  ex.unreserve(va, 4 * granule);
  EXPECT_EQ(ex.device_memory(0).free, ex.device_memory(0).total);
}

// ---- pointers and allocations ------------------------------------------------------------------

TEST(HostExecutor, ClassifyFindsInteriorPointersReservationsAndZeroByteAllocations) {
  ok::host_executor ex(small_options());
  void* d = ex.allocate(ok::memory_kind::device, 1000, 1);
  void* p = ex.allocate(ok::memory_kind::pinned, 1000);
  void* g = ex.allocate(ok::memory_kind::pageable, 1000);
  for (void* q : {d, p, g}) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % 256, 0U);
  EXPECT_EQ(ex.classify(at(d, 999)).kind, ok::pointer_kind::device);
  EXPECT_EQ(ex.classify(at(d, 999)).device, 1);
  EXPECT_EQ(ex.classify(at(p, 500)).kind, ok::pointer_kind::pinned);
  EXPECT_EQ(ex.classify(at(p, 500)).device, -1);
  EXPECT_EQ(ex.classify(g).kind, ok::pointer_kind::pageable);
  int local = 0;
  EXPECT_EQ(ex.classify(&local).kind, ok::pointer_kind::pageable);
  EXPECT_EQ(ex.classify(&local).device, -1);

  void* va = ex.reserve(2 * granule, 1);
  EXPECT_EQ(ex.classify(at(va, granule + 3)).kind, ok::pointer_kind::device);
  EXPECT_EQ(ex.classify(at(va, granule + 3)).device, 1);
  ex.unreserve(va, 2 * granule);
  EXPECT_EQ(ex.classify(va).kind, ok::pointer_kind::pageable);

  void* z1 = ex.allocate(ok::memory_kind::device, 0);
  void* z2 = ex.allocate(ok::memory_kind::device, 0);
  ASSERT_NE(z1, nullptr);
  ASSERT_NE(z2, nullptr);
  EXPECT_NE(z1, z2);
  EXPECT_EQ(ex.classify(z1).kind, ok::pointer_kind::device);
  EXPECT_EQ(ex.device_memory(0).free, ex.device_memory(0).total);
  for (void* q : {z1, z2}) ex.deallocate(ok::memory_kind::device, q, 0);
  ex.deallocate(ok::memory_kind::device, d, 1000);
  ex.deallocate(ok::memory_kind::pinned, p, 1000);
  ex.deallocate(ok::memory_kind::pageable, g, 1000);
  EXPECT_EQ(ex.classify(d).kind, ok::pointer_kind::pageable);
}

TEST(HostExecutor, BadDeviceIdsNameTheIdAndTheRange) {
  ok::host_executor ex(small_options());
  std::string msg =
      message_of<ok::out_of_range>([&] { (void)ex.allocate(ok::memory_kind::device, 16, 2); });
  EXPECT_NE(msg.find("device = 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[0, 2)"), std::string::npos) << msg;
  msg = message_of<ok::out_of_range>([&] { (void)ex.create_stream(-1); });
  EXPECT_NE(msg.find("device = -1"), std::string::npos) << msg;
  EXPECT_THROW((void)ex.device_memory(7), ok::out_of_range);
  EXPECT_THROW((void)ex.create_event(2), ok::out_of_range);
  EXPECT_THROW((void)ex.create_physical(granule, 3), ok::out_of_range);
  // Host kinds ignore the device, as cudaHostAlloc does.
  void* p = ex.allocate(ok::memory_kind::pinned, 16, 9);
  ex.deallocate(ok::memory_kind::pinned, p, 16);
}

TEST(HostExecutor, ReleaseCallsOnUnknownHandlesDoNotCrash) {
  ok::host_executor ex(small_options());
  int local = 0;
  ex.deallocate(ok::memory_kind::device, &local, sizeof local);
  ex.deallocate(ok::memory_kind::device, nullptr, 0);
  ex.destroy_stream(ok::stream_ref{&local, 0});
  ex.destroy_event(ok::event_ref{&local, 0});
  ex.destroy_graph(ok::graph_ref{&local});
  ex.release_physical(ok::physical_handle{12345, 0, granule});
  ex.unreserve(&local, granule);
  void* p = ex.allocate(ok::memory_kind::device, 64);
  ex.deallocate(ok::memory_kind::device, p, 64);
  ex.deallocate(ok::memory_kind::device, p, 64);  // twice
  EXPECT_EQ(ex.device_memory(0).free, ex.device_memory(0).total);
}

TEST(HostExecutor, StreamOperationsRejectBadArguments) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::buffer a(ex, ok::memory_kind::device, 256);
  ok::buffer b(ex, ok::memory_kind::device, 256);
  EXPECT_THROW(ex.copy(a.as<char>() + 10, a.data(), 100, s), ok::logic_error);  // overlap
  EXPECT_THROW(ex.copy(a.data(), b.data(), 257, s), ok::out_of_range);          // past the end
  EXPECT_THROW(ex.copy(a.data(), b.as<char>() + 1, 256, s), ok::out_of_range);
  EXPECT_THROW(ex.fill(a.as<char>() + 200, 0, 57, s), ok::out_of_range);
  EXPECT_THROW(ex.host_function({}, s), ok::logic_error);
  int local = 0;
  EXPECT_THROW(ex.copy(a.data(), b.data(), 8, ok::stream_ref{&local, 0}), ok::logic_error);
  EXPECT_THROW(ex.copy(a.data(), b.data(), 8, ok::stream_ref{s.ref().native, 1}), ok::logic_error);

  ok::launch_request r = ok::make_launch(4, mark_first_rows{nullptr, nullptr});
  r.host_run = nullptr;
  const std::string msg = message_of<ok::logic_error>([&] { ex.launch(r, s); });
  EXPECT_NE(msg.find("host_run"), std::string::npos) << msg;
  r = ok::make_launch(4, mark_first_rows{nullptr, nullptr}, "k", 0);
  EXPECT_THROW(ex.launch(r, s), ok::out_of_range);
  r = ok::make_launch(4, mark_first_rows{nullptr, nullptr}, "k", 2048);
  EXPECT_THROW(ex.launch(r, s), ok::out_of_range);

  ok::event e1(ex, 1);
  EXPECT_THROW(ex.record(e1, s), ok::logic_error);  // event and stream on different devices
  s.synchronize();
}

// ---- launches ----------------------------------------------------------------------------------

TEST(HostExecutor, LaunchRunsEveryIndexExactlyOnce) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{10007}}) {
    ok::buffer counts(ex, ok::memory_kind::device, n * sizeof(int));
    ok::buffer sum(ex, ok::memory_kind::device, sizeof(unsigned long long));
    ex.fill(counts.data(), 0, counts.size(), s);
    ex.fill(sum.data(), 0, sum.size(), s);
    ok::launch(ex, n, count_indices{counts.as<int>(), sum.as<unsigned long long>()}, s);
    s.synchronize();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(counts.as<int>()[i], 1) << "index " << i;
    EXPECT_EQ(*sum.as<unsigned long long>(), n * (n - 1) / 2);
  }
  ok::launch(ex, 0, count_indices{nullptr, nullptr}, s);  // an empty launch is a no-op
  s.synchronize();
}

TEST(HostExecutor, TheDefaultStreamOfEachDeviceWorks) {
  ok::host_executor ex(small_options());
  ok::buffer a(ex, ok::memory_kind::device, 64, 1);
  ex.fill(a.data(), 7, 64, ok::stream_ref{nullptr, 1});
  ex.synchronize(ok::stream_ref{nullptr, 1});
  EXPECT_EQ(a.as<unsigned char>()[63], 7);
  EXPECT_THROW(ex.synchronize(ok::stream_ref{nullptr, 2}), ok::out_of_range);
}

// ---- events across streams --------------------------------------------------------------------

TEST(HostExecutor, AnEventWaitOrdersWorkAcrossStreams) {
  ok::host_executor ex(small_options());
  ok::stream a(ex);
  ok::stream b(ex);
  ok::event e(ex);
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
  // The producer sleeps, so a consumer that does not wait would run first.
  ex.host_function(
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        flag.store(1);
      },
      a);
  ex.record(e, a);
  ex.wait(e, b);
  ex.host_function([&] { seen.store(flag.load()); }, b);
  b.synchronize();
  EXPECT_EQ(seen.load(), 1);
  a.synchronize();

  // The same with real memory: the fill on a is visible to the copy on b.
  ok::buffer src(ex, ok::memory_kind::device, 4096);
  ok::buffer dst(ex, ok::memory_kind::pinned, 4096);
  ex.fill(dst.data(), 0, 4096, b);
  ex.host_function([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, a);
  ex.fill(src.data(), 0x3c, 4096, a);
  ex.record(e, a);
  ex.wait(e, b);
  ex.copy(dst.data(), src.data(), 4096, b);
  b.synchronize();
  EXPECT_EQ(dst.as<unsigned char>()[4095], 0x3c);
  a.synchronize();
}

TEST(HostExecutor, TheSuiteCatchesAMissingWait) {
  ok::host_executor ex(small_options());
  ok::stream a(ex);
  ok::stream b(ex);
  ok::event e(ex);
  gate g;
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
  auto producer = [&, f = g.future] {
    f.wait();
    flag.store(1);
  };
  ex.host_function(producer, a);
  ex.record(e, a);
  // Missing: ex.wait(e, b). The consumer runs while the producer is still held.
  ex.host_function([&] { seen.store(flag.load()); }, b);
  b.synchronize();
  EXPECT_EQ(seen.load(), 0) << "without the wait, b must not have waited for a";
  EXPECT_FALSE(ex.ready(e));
  g.open();
  ex.synchronize(e);
  EXPECT_TRUE(ex.ready(e));
  a.synchronize();
}

TEST(HostExecutor, AWaitTargetsTheRecordThatWasLatestWhenItWasIssued) {
  ok::host_executor ex(small_options());
  ok::stream a(ex);
  ok::stream b(ex);
  ok::event e(ex);
  gate first;
  gate second;
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
  ex.host_function(
      [&, f = first.future] {
        f.wait();
        flag.store(1);
      },
      a);
  ex.record(e, a);
  ex.wait(e, b);
  ex.host_function([&] { seen.store(flag.load()); }, b);
  // A later record must not extend the earlier wait.
  ex.host_function(
      [&, f = second.future] {
        f.wait();
        flag.store(2);
      },
      a);
  ex.record(e, a);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(seen.load(), -1) << "b ran before the record it waits for";
  first.open();
  b.synchronize();
  EXPECT_EQ(seen.load(), 1);
  EXPECT_FALSE(ex.ready(e));  // the latest record is still held
  second.open();
  ex.synchronize(e);
  EXPECT_EQ(flag.load(), 2);
}

TEST(HostExecutor, NeverRecordedEventsAreCompleteAndWaitingOnThemIsANoOp) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::event e(ex);
  EXPECT_TRUE(ex.ready(e));
  ex.synchronize(e);
  ex.wait(e, s);
  s.synchronize();
}

TEST(HostExecutor, EventSynchronizeBlocksUntilTheRecordCompletes) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::event e(ex);
  gate g;
  std::atomic<bool> done{false};
  ex.host_function(
      [&, f = g.future] {
        f.wait();
        done.store(true);
      },
      s);
  ex.record(e, s);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    g.open();
  });
  ex.synchronize(e);
  EXPECT_TRUE(done.load());
  opener.join();
  s.synchronize();
}

// ---- capture and replay -----------------------------------------------------------------------

namespace {
/// Captures "copy the count to the device, mark the first count rows" and returns the graph.
template <class Body>
ok::graph_ref capture_mark(ok::executor& ex, ok::stream_ref s, int* device_count,
                           const int* host_count, Body body, std::atomic<int>& host_calls) {
  ex.begin_capture(s);
  ex.copy(device_count, host_count, sizeof(int), s);
  ok::launch(ex, 64, body, s);
  ex.host_function([&host_calls] { host_calls.fetch_add(1); }, s);
  return ex.end_capture(s);
}
}  // namespace

TEST(HostExecutor, ReplayReReadsDeviceValuesAtReplayTime) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::buffer count(ex, ok::memory_kind::device, sizeof(int));
  ok::buffer out(ex, ok::memory_kind::device, 64 * sizeof(int));
  ok::buffer host(ex, ok::memory_kind::pinned, sizeof(int));
  ex.fill(out.data(), 0, out.size(), s);
  s.synchronize();
  std::atomic<int> calls{0};
  *host.as<int>() = 3;
  const ok::graph_ref g = capture_mark(ex, s, count.as<int>(), host.as<int>(),
                                       mark_first_rows{count.as<int>(), out.as<int>()}, calls);
  s.synchronize();
  EXPECT_EQ(sum_of(out.as<int>(), 64), 0) << "captured work must not run at capture time";
  EXPECT_EQ(calls.load(), 0);
  for (int rows : {5, 17, 0, 64}) {
    *host.as<int>() = rows;
    ex.replay(g, s);
    s.synchronize();
    EXPECT_EQ(sum_of(out.as<int>(), 64), rows);
  }
  EXPECT_EQ(calls.load(), 4);
  ex.destroy_graph(g);
}

TEST(HostExecutor, TheSuiteCatchesABodyThatReadsTheCountAtCaptureTime) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::buffer count(ex, ok::memory_kind::device, sizeof(int));
  ok::buffer out(ex, ok::memory_kind::device, 64 * sizeof(int));
  ok::buffer host(ex, ok::memory_kind::pinned, sizeof(int));
  std::atomic<int> calls{0};
  *host.as<int>() = 3;
  const ok::graph_ref g = capture_mark(ex, s, count.as<int>(), host.as<int>(),
                                       mark_first_rows_baked{3, out.as<int>()}, calls);
  *host.as<int>() = 5;
  ex.replay(g, s);
  s.synchronize();
  EXPECT_NE(sum_of(out.as<int>(), 64), 5) << "a baked-in count must be seen as stale";
  ex.destroy_graph(g);
}

TEST(HostExecutor, CaptureStateErrorsAndEventsInsideAGraph) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::stream s1(ex, 1);
  ok::event e(ex);
  EXPECT_THROW((void)ex.end_capture(s), ok::state_error);
  ex.begin_capture(s);
  EXPECT_THROW(ex.begin_capture(s), ok::state_error);
  EXPECT_THROW(ex.synchronize(s), ok::state_error);
  ex.record(e, s);
  const ok::graph_ref g = ex.end_capture(s);
  EXPECT_TRUE(ex.ready(e)) << "a record inside a capture does not run";
  EXPECT_THROW(ex.replay(g, s1), ok::logic_error);  // captured on device 0
  gate hold;
  ex.host_function([f = hold.future] { f.wait(); }, s);
  ex.replay(g, s);
  EXPECT_FALSE(ex.ready(e)) << "the replayed record is queued behind the held host function";
  hold.open();
  s.synchronize();
  EXPECT_TRUE(ex.ready(e));
  ex.destroy_graph(g);
  EXPECT_THROW(ex.replay(g, s), ok::logic_error);
}

// ---- errors on the stream ---------------------------------------------------------------------

TEST(HostExecutor, AnOperationThatThrowsLeavesAStickyErrorForTheNextSynchronize) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  std::atomic<bool> ran_after{false};
  ex.host_function([] { throw std::runtime_error("boom"); }, s);
  ex.host_function([&] { ran_after.store(true); }, s);
  std::string msg = message_of<ok::runtime_error>([&] { s.synchronize(); });
  EXPECT_NE(msg.find("boom"), std::string::npos) << msg;
  EXPECT_TRUE(ran_after.load());
  s.synchronize();  // reported once

  ok::launch(ex, 100, throw_at_seven{}, "cursed_kernel", s);
  msg = message_of<ok::runtime_error>([&] { s.synchronize(); });
  EXPECT_NE(msg.find("index 7 is cursed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cursed_kernel"), std::string::npos) << msg;

  // offloadkit's own runtime errors keep their type.
  ex.host_function([] { throw ok::injected_fault("planted"); }, s);
  EXPECT_THROW(s.synchronize(), ok::injected_fault);

  // Stream calls from a host function are refused, as on CUDA, and reported the same way.
  ex.host_function([&] { ex.synchronize(s); }, s);
  msg = message_of<ok::runtime_error>([&] { s.synchronize(); });
  EXPECT_NE(msg.find("host function"), std::string::npos) << msg;
}

// ---- lifetime and threads ---------------------------------------------------------------------

TEST(HostExecutor, TheDestructorCleansUpEverythingStillAlive) {
  std::atomic<int> ran{0};
  {
    ok::host_executor ex(small_options());
    const ok::stream_ref s = ex.create_stream(0);
    const ok::event_ref e = ex.create_event(0);
    void* d = ex.allocate(ok::memory_kind::device, 4096);
    void* p = ex.allocate(ok::memory_kind::pinned, 4096);
    void* va = ex.reserve(2 * granule);
    const ok::physical_handle h = ex.create_physical(granule);
    ex.map(va, granule, h);
    ex.set_access(va, granule);
    ex.begin_capture(s);
    ex.fill(d, 1, 4096, s);
    (void)ex.end_capture(s);
    const ok::stream_ref capturing = ex.create_stream(1);
    ex.begin_capture(capturing);
    ex.host_function(
        [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          ran.fetch_add(1);
        },
        s);
    ex.copy(p, d, 4096, s);
    ex.copy(va, p, 4096, s);
    ex.record(e, s);
  }
  EXPECT_EQ(ran.load(), 1) << "queued work is drained before the executor goes";
}

TEST(HostExecutor, DeallocateWaitsForQueuedWorkLikeCudaFree) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  void* d = ex.allocate(ok::memory_kind::device, 1 << 16);
  void* p = ex.allocate(ok::memory_kind::pinned, 1 << 16);
  std::atomic<bool> slept{false};
  ex.host_function(
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        slept.store(true);
      },
      s);
  ex.fill(d, 9, 1 << 16, s);
  ex.copy(p, d, 1 << 16, s);
  ex.deallocate(ok::memory_kind::device, d, 1 << 16);
  EXPECT_TRUE(slept.load());
  EXPECT_EQ(static_cast<unsigned char*>(p)[(1 << 16) - 1], 9);
  ex.deallocate(ok::memory_kind::pinned, p, 1 << 16);
}

TEST(HostExecutor, ManyHostThreadsUseOneExecutorAtOnce) {
  ok::host_executor ex(small_options());
  ok::stream shared(ex);
  ok::event shared_event(ex);
  constexpr int threads = 4;
  constexpr int rounds = 30;
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const int device = t % 2;
      ok::stream own(ex, device);
      for (int r = 0; r < rounds; ++r) {
        const std::size_t rows = 64 + 16 * static_cast<std::size_t>(r);
        const std::size_t bytes = rows * sizeof(int);
        ok::buffer count(ex, ok::memory_kind::device, sizeof(int), device);
        ok::buffer d(ex, ok::memory_kind::device, bytes, device);
        ok::buffer h(ex, ok::memory_kind::pinned, bytes);
        ok::buffer back(ex, ok::memory_kind::pageable, bytes);
        ok::buffer host_count(ex, ok::memory_kind::pinned, sizeof(int));
        *host_count.as<int>() = r;
        ex.copy(count.data(), host_count.data(), sizeof(int), own);
        ok::launch(ex, rows, mark_first_rows{count.as<int>(), d.as<int>()}, own);
        ex.copy(h.data(), d.data(), bytes, own);
        if (device == 0) {
          ex.record(shared_event, own);
          ex.wait(shared_event, shared);
        }
        ok::event done(ex, device);
        ex.record(done, own);
        ex.wait(done, own);
        ex.copy(back.data(), h.data(), bytes, own);
        own.synchronize();
        if (sum_of(back.as<int>(), rows) != r) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : pool) th.join();
  shared.synchronize();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(ex.device_memory(0).free, ex.device_memory(0).total);
  EXPECT_EQ(ex.device_memory(1).free, ex.device_memory(1).total);
}

// ---- a model of the capacity ------------------------------------------------------------------

RC_GTEST_PROP(HostExecutorCapacity, FreeMemoryFollowsAModelOfAllocationsAndPhysicalMemory, ()) {
  ok::host_executor_options o = small_options();
  o.launch_threads = 1;
  ok::host_executor ex(o);
  struct live {
    bool physical;
    void* p;
    ok::physical_handle h;
    std::size_t bytes;
  };
  std::vector<live> alive;
  std::size_t used = 0;
  const int steps = *rc::gen::inRange(1, 40);
  for (int i = 0; i < steps; ++i) {
    const int action = *rc::gen::inRange(0, 3);
    if (action == 0) {
      const std::size_t bytes = *rc::gen::inRange<std::size_t>(0, 300 * kib);
      if (used + bytes <= o.device_capacity) {
        alive.push_back({false, ex.allocate(ok::memory_kind::device, bytes), {}, bytes});
        used += bytes;
      } else {
        RC_ASSERT_THROWS_AS((void)ex.allocate(ok::memory_kind::device, bytes), ok::out_of_memory);
      }
    } else if (action == 1) {
      const std::size_t bytes = granule * *rc::gen::inRange<std::size_t>(1, 6);
      if (used + bytes <= o.device_capacity) {
        alive.push_back({true, nullptr, ex.create_physical(bytes), bytes});
        used += bytes;
      } else {
        RC_ASSERT_THROWS_AS((void)ex.create_physical(bytes), ok::out_of_memory);
      }
    } else if (!alive.empty()) {
      const std::size_t k = *rc::gen::inRange<std::size_t>(0, alive.size());
      const live l = alive[k];
      alive.erase(alive.begin() + static_cast<std::ptrdiff_t>(k));
      if (l.physical) {
        ex.release_physical(l.h);
      } else {
        ex.deallocate(ok::memory_kind::device, l.p, l.bytes);
      }
      used -= l.bytes;
    }
    RC_ASSERT(ex.device_memory(0).free == o.device_capacity - used);
  }
}

// ---- managed memory -----------------------------------------------------------------------------

TEST(HostExecutor, ManagedMemoryIsHostMemoryThatClassifiesAsManaged) {
  ok::host_executor ex(small_options());
  const std::size_t free1 = ex.device_memory(1).free;
  auto* p = static_cast<unsigned char*>(ex.allocate_managed(1000, 1));
  const ok::pointer_info info = ex.classify(p + 999);
  EXPECT_EQ(info.kind, ok::pointer_kind::managed);
  EXPECT_EQ(info.device, 1);
  const ok::allocation_extent e = ex.extent_of(p + 500);
  EXPECT_EQ(e.base, p);
  EXPECT_EQ(e.bytes, 1000u);
  // Host memory: the host reads and writes it directly, and no device's capacity pays for it.
  std::memset(p, 3, 1000);
  EXPECT_EQ(p[999], 3);
  EXPECT_EQ(ex.device_memory(1).free, free1);
  void* zero = ex.allocate_managed(0, 0);
  void* zero2 = ex.allocate_managed(0, 0);
  EXPECT_NE(zero, nullptr);
  EXPECT_NE(zero, zero2);
  ex.deallocate_managed(zero2, 0);
  ex.deallocate_managed(zero, 0);
  ex.deallocate_managed(p, 1000);
  EXPECT_EQ(ex.classify(p).kind, ok::pointer_kind::pageable);  // gone from the registry
  const std::string m = message_of<ok::out_of_range>([&] { (void)ex.allocate_managed(8, 2); });
  EXPECT_NE(m.find("device = 2 is outside [0, 2)"), std::string::npos) << m;
}

TEST(HostExecutor, PrefetchRunsInStreamOrderBehindEarlierWork) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::event e(ex);
  void* p = ex.allocate_managed(4096, 0);
  gate g;
  ex.host_function([f = g.future] { f.wait(); }, s);
  // Returns at once, queued behind the blocked host function like any other stream operation.
  ex.prefetch(p, 4096, 1, s);
  ex.prefetch(p, 4096, ok::host_location, s);
  ex.record(e, s);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(ex.ready(e));
  g.open();
  ex.synchronize(e);
  EXPECT_TRUE(ex.ready(e));
  // A capture records it, and a replay issues it again.
  ex.begin_capture(s);
  ex.prefetch(p, 4096, 0, s);
  const ok::graph_ref graph = ex.end_capture(s);
  ex.replay(graph, s);
  s.synchronize();
  ex.destroy_graph(graph);
  ex.deallocate_managed(p, 4096);
}

TEST(HostExecutor, PrefetchRejectsBadArgumentsClearly) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  void* p = ex.allocate_managed(4096, 0);
  ok::buffer d(ex, ok::memory_kind::device, 4096);
  std::string m = message_of<ok::logic_error>([&] { ex.prefetch(d.data(), 4096, 0, s); });
  EXPECT_NE(m.find("is device memory; only managed memory"), std::string::npos) << m;
  m = message_of<ok::out_of_range>([&] { ex.prefetch(p, 4097, 0, s); });
  EXPECT_NE(m.find("runs past the end of its managed memory"), std::string::npos) << m;
  m = message_of<ok::out_of_range>([&] { ex.prefetch(p, 4096, 2, s); });
  EXPECT_NE(m.find("device = 2 is outside [0, 2) and is not host_location (-1)"), std::string::npos)
      << m;
  EXPECT_THROW(ex.prefetch(p, 4096, -2, s), ok::out_of_range);
  ex.prefetch(p, 0, 0, s);  // nothing to move
  s.synchronize();
  ex.deallocate_managed(p, 4096);
}

TEST(HostExecutor, ManagedMemoryGoesThroughTheAdaptors) {
  ok::host_executor host(small_options());
  ok::counting_adaptor counting(host);
  ok::fault_injection_adaptor ex(counting);
  ok::stream s(ex);
  ex.arm({ok::op_kind::allocate_managed}, 0);
  EXPECT_THROW((void)ex.allocate_managed(64, 0), ok::out_of_memory);
  void* p = ex.allocate_managed(64, 0);
  ex.arm({ok::op_kind::prefetch}, 1);
  ex.prefetch(p, 64, 1, s);
  EXPECT_THROW(ex.prefetch(p, 64, 0, s), ok::injected_fault);
  ex.disarm();
  s.synchronize();
  const ok::counting_adaptor::counts c = counting.snapshot();
  EXPECT_EQ(c.calls_of(ok::op_kind::allocate_managed), 1u);  // the failed one never got there
  EXPECT_EQ(c.calls_of(ok::op_kind::prefetch), 1u);
  ex.deallocate_managed(p, 64);
}

TEST(HostExecutor, DeallocateManagedWaitsForQueuedWorkLikeCudaFree) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  void* p = ex.allocate_managed(1 << 16, 0);
  std::atomic<bool> slept{false};
  ex.host_function(
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        slept.store(true);
      },
      s);
  ex.prefetch(p, 1 << 16, 1, s);
  ex.fill(p, 9, 1 << 16, s);
  ex.deallocate_managed(p, 1 << 16);
  EXPECT_TRUE(slept.load());
}
