// Unit tests of the coalesced offloader's parts: layout planning and its cache, and the pinned
// arena's lease (paired lifetime, growth without two buffers, failed growth). Host executor only:
// nothing here is GPU-specific.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/arena/layout.hpp"
#include "offloadkit/arena/pinned_arena.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/testing/arena_battery_support.hpp"
#include "testing.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::arena;
using arena::testing::host_memory_tracker;

std::vector<device_tensor> fake_set(std::vector<std::size_t> sizes, std::vector<bool> joined) {
  // Addresses only; layout never dereferences them.
  static unsigned char pool[1 << 16];
  std::vector<device_tensor> out;
  std::size_t at = 8;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0 && !joined[i]) at += 32;
    out.push_back({pool + at, sizes[i]});
    at += sizes[i];
  }
  return out;
}

TEST(ArenaLayout, AlignsRunsAndKeepsContiguousTensorsTogether) {
  auto set = fake_set({3, 5, 0, 7, 256}, {false, true, true, true, false});
  layout_plan p = plan_layout(make_key(set), 256);
  ASSERT_EQ(p.offsets.size(), 5u);
  EXPECT_EQ(p.offsets[0], 0u);
  EXPECT_EQ(p.offsets[1], 3u);  // contiguous on the device: contiguous on the host
  EXPECT_EQ(p.offsets[3], 8u);  // the zero-byte tensor between does not break the run
  EXPECT_EQ(p.offsets[4], 256u);
  EXPECT_EQ(p.total_bytes, 512u);
  ASSERT_EQ(p.runs.size(), 2u);
  EXPECT_EQ(p.runs[0].first, 0u);
  EXPECT_EQ(p.runs[0].count, 4u);
  EXPECT_EQ(p.runs[0].bytes, 15u);
  EXPECT_EQ(p.runs[1].host_offset, 256u);
}

TEST(ArenaLayout, EmptyAndZeroByteSetsNeedNoHostMemory) {
  EXPECT_EQ(plan_layout(make_key(tensor_set_view{})).total_bytes, 0u);
  std::vector<device_tensor> zeros{{nullptr, 0}, {nullptr, 0}};
  layout_plan p = plan_layout(make_key(zeros));
  EXPECT_EQ(p.total_bytes, 0u);
  EXPECT_TRUE(p.runs.empty());
}

TEST(ArenaLayout, CoalesceMergesOnlyWhereBothSidesAreContiguous) {
  auto joined = fake_set({4, 4, 4}, {false, true, true});
  auto apart = fake_set({4, 4, 4}, {false, false, false});
  layout_plan p = plan_layout(make_key(apart), 64);
  EXPECT_EQ(coalesce(p, joined).size(), 3u);  // the host side has gaps
  layout_plan q = plan_layout(make_key(joined), 64);
  EXPECT_EQ(coalesce(q, joined).size(), 1u);
  EXPECT_EQ(coalesce(q, apart).size(), 3u);  // the device side has gaps
}

TEST(ArenaLayout, TouchingTensorsOfTwoAllocationsAreNotMerged) {
  // Separately allocated buffers can touch (cudaMalloc hands out neighbours), and a GPU rejects a
  // copy that spans two allocations: the lookup splits the run where the second allocation starts.
  auto set = fake_set({4, 4, 4, 4}, {false, true, true, true});
  const auto* split = static_cast<const unsigned char*>(set[2].data);
  int lookups = 0;
  const extent_lookup two_allocations = [&](const void* p) {
    ++lookups;
    const auto* q = static_cast<const unsigned char*>(p);
    const auto* first = static_cast<const unsigned char*>(set[0].data);
    return q < split ? allocation_extent{first, static_cast<std::size_t>(split - first)}
                     : allocation_extent{split, 8};
  };
  const layout_key key = make_key(set, two_allocations);
  EXPECT_EQ(key.continues, (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(lookups, 2);  // once per allocation, not once per tensor
  layout_plan p = plan_layout(key, 64);
  ASSERT_EQ(p.runs.size(), 2u);
  EXPECT_EQ(p.runs[0].bytes, 8u);
  EXPECT_EQ(p.runs[1].first, 2u);
  EXPECT_EQ(coalesce(p, set, two_allocations).size(), 2u);
  EXPECT_EQ(coalesce(plan_layout(make_key(set), 64), set, two_allocations).size(), 2u);
  // An address the platform does not know is never merged into its neighbour.
  const extent_lookup unknown = [](const void*) { return allocation_extent{}; };
  EXPECT_EQ(plan_layout(make_key(set, unknown), 64).runs.size(), 4u);
}

TEST(ArenaLayout, RejectsBadAlignment) {
  EXPECT_THROW(plan_layout(layout_key{}, 3), out_of_range);
  EXPECT_THROW(layout_cache(0), out_of_range);
}

TEST(ArenaLayout, CacheBuildsOnePlanPerShape) {
  layout_cache cache;
  auto a = fake_set({10, 20}, {false, true});
  auto b = fake_set({10, 20}, {false, false});
  auto p1 = cache.get(a);
  auto p2 = cache.get(a);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(cache.plans_built(), 1u);
  cache.get(b);
  EXPECT_EQ(cache.plans_built(), 2u);
}

TEST(ArenaLease, PairedLifetimeAndUseAfterRelease) {
  host_executor host;
  host_memory_tracker ex(host);
  pinned_arena arena(ex);
  arena_lease lease = arena.acquire();
  EXPECT_THROW(arena.acquire(), state_error);  // one lease, one buffer
  lease.reserve(1000);
  EXPECT_EQ(ex.pinned().live_bytes, 1000u);
  lease.reserve(10);  // fits: no allocation
  EXPECT_EQ(arena.allocations(), 1u);
  lease.reserve(5000);  // grows: the old buffer is freed before the new one is allocated
  EXPECT_EQ(ex.pinned().peak_allocations, 1u);
  EXPECT_EQ(arena.peak_bytes(), 5000u);
  lease.release();
  EXPECT_EQ(ex.pinned().live_bytes, 0u);
  try {
    (void)lease.data();
    FAIL() << "no exception";
  } catch (const state_error& e) {
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lease.reserve(1), state_error);
  arena_lease again = arena.acquire();  // released: the arena can be leased again
  EXPECT_EQ(again.capacity(), 0u);
}

TEST(ArenaLease, DestructorReleases) {
  host_executor host;
  host_memory_tracker ex(host);
  pinned_arena arena(ex);
  {
    arena_lease lease = arena.acquire();
    lease.reserve(4096);
  }
  EXPECT_EQ(ex.pinned().live_allocations, 0u);
  EXPECT_FALSE(arena.leased());
}

TEST(ArenaLease, FailedGrowthLeavesAnEmptyValidLease) {
  host_executor host;
  fault_injection_adaptor ex(host);
  pinned_arena arena(ex);
  arena_lease lease = arena.acquire();
  lease.reserve(100);
  ex.arm({op_kind::allocate_pinned}, 0);
  try {
    lease.reserve(1 << 20);
    FAIL() << "no exception";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("1048576 bytes"), std::string::npos) << e.what();
  }
  ex.disarm();
  EXPECT_EQ(lease.capacity(), 0u);
  EXPECT_EQ(arena.held_bytes(), 0u);
  lease.reserve(1 << 20);  // retry
  EXPECT_EQ(lease.capacity(), std::size_t{1} << 20);
}

}  // namespace
