// Tests of the host back end's memory: stale virtual addresses fault, simulated device capacity
// (with a model of it) and physical-memory accounting, adjacent allocations, pointer
// classification, bad arguments, and managed memory. Streams, events, capture and threads are
// host_executor_test.cpp; the checks shared by both back ends are the executor battery in
// core/tests/.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "host_executor_test_support.hpp"
#include "offloadkit/adaptors.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/launch.hpp"
#include "offloadkit/resources.hpp"

namespace ok = offloadkit;

namespace {

using namespace ::offloadkit::testing::host_executor_test;

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
