// Direct checks of the region implementations' mechanics that the battery sees only from
// outside: chunk layout, the order of a pipelined pause, the partial state a failure leaves, the
// reference's re-capture, and the errors' wording.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/region/reference_region.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/workloads/region_patterns.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::region;

constexpr std::size_t mib = std::size_t{1} << 20;

/// Records the order of copies and unmaps, with the offset they touch.
class order_log final : public executor_adaptor {
 public:
  order_log(executor& up, const void* base)
      : executor_adaptor(up), base_(static_cast<const char*>(base)) {}
  void set_base(const void* base) { base_ = static_cast<const char*>(base); }
  std::vector<std::string> events;

 private:
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override {
    events.push_back("copy@" + std::to_string((static_cast<const char*>(src) - base_) / (2 * mib)));
    executor_adaptor::do_copy(dst, src, bytes, s);
  }
  void do_unmap(void* va, std::size_t bytes) override {
    events.push_back("unmap@" + std::to_string((static_cast<const char*>(va) - base_) / (2 * mib)));
    executor_adaptor::do_unmap(va, bytes);
  }
  const char* base_;
};

/// Records a swap's copies out of `out`, copies into `in` and unmaps of `out`, with the chunk
/// (of 2 MiB) they touch.
class swap_log final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;
  void watch(const void* out, const void* in) {
    out_ = reinterpret_cast<std::uintptr_t>(out);
    in_ = reinterpret_cast<std::uintptr_t>(in);
    events.clear();
  }
  std::vector<std::string> events;

 private:
  void note(const char* what, std::uintptr_t base, const void* p) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    if (base != 0 && at >= base && at < base + 6 * mib)
      events.push_back(what + std::to_string((at - base) / (2 * mib)));
  }
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override {
    note("out@", out_, src);
    note("in@", in_, dst);
    executor_adaptor::do_copy(dst, src, bytes, s);
  }
  void do_unmap(void* va, std::size_t bytes) override {
    note("unmap@", out_, va);
    executor_adaptor::do_unmap(va, bytes);
  }
  std::uintptr_t out_ = 0, in_ = 0;
};

bool holds_pattern(executor& ex, const offload_region& r, std::uint32_t seed, stream_ref s) {
  const std::size_t words = r.size() / 4;
  buffer pinned(ex, memory_kind::pinned, words * 4);
  ex.copy(pinned.data(), r.data(), words * 4, s);
  ex.synchronize(s);
  for (std::size_t i = 0; i < words; ++i)
    if (pinned.as<std::uint32_t>()[i] != pattern_word(seed, i)) return false;
  return true;
}

TEST(VmmRegion, ChunksAreGranularityMultiplesCoveringTheRegion) {
  host_executor ex;
  vmm_region r(ex, region_config{5 * mib + 3, 1, 3 * mib});
  EXPECT_EQ(r.chunk_bytes(), 4 * mib);  // 3 MiB rounded up to the 2 MiB granularity
  EXPECT_EQ(r.footprint(), 6 * mib);
  EXPECT_EQ(r.device(), 1);
  EXPECT_EQ(r.host_buffer_bytes(), 0u);  // the pinned buffer comes with the first pause
  stream s(ex, 1);
  r.pause(s);
  EXPECT_EQ(r.host_buffer_bytes(), 5 * mib + 3);
}

TEST(VmmRegion, APartialLastChunkRoundTripsOnNeighbouringAllocations) {
  host_executor_options o;
  o.adjacent_allocations = true;
  host_executor ex(o);
  stream s(ex, 0);
  // 5 MiB + 4 bytes in chunks of 4 MiB: the last chunk is one granule, partly used.
  vmm_region r(ex, region_config{5 * mib + 4, 0, 4 * mib - 100});
  EXPECT_EQ(r.chunk_bytes(), 4 * mib);
  EXPECT_EQ(r.footprint(), 6 * mib);
  write_pattern(ex, r.data(), r.size() / 4, 15, s);
  for (int cycle = 0; cycle < 2; ++cycle) {
    r.pause(s);
    // Pinned memory taken now lands right after the region's host buffer.
    buffer neighbour(ex, memory_kind::pinned, 256);
    ex.fill(neighbour.data(), 0xEE, 256, s);
    r.resume(s);
    EXPECT_TRUE(holds_pattern(ex, r, 15, s));
  }
}

TEST(VmmRegion, PauseQueuesTheNextCopyBeforeUnmappingAChunk) {
  host_executor host;
  order_log log(host, nullptr);
  vmm_region r(log, region_config{6 * mib, 0, 2 * mib});
  log.set_base(r.data());
  stream s(log, 0);
  log.events.clear();
  r.pause(s);
  const std::vector<std::string> expected{"copy@0", "copy@1",  "unmap@0",
                                          "copy@2", "unmap@1", "unmap@2"};
  EXPECT_EQ(log.events, expected);
}

TEST(VmmRegion, AFailedResumeLeavesPartialAndARetryCompletes) {
  host_executor host;
  fault_injection_adaptor fx(host);
  stream s(fx, 0);
  const std::size_t free0 = fx.device_memory(0).free;
  vmm_region r(fx, region_config{6 * mib, 0, 2 * mib});
  write_pattern(fx, r.data(), r.size() / 4, 11, s);
  r.pause(s);
  fx.arm({op_kind::create_physical}, 1);  // the second chunk's physical memory
  EXPECT_THROW(r.resume(s), out_of_memory);
  EXPECT_EQ(r.state(), region_state::partial);
  EXPECT_EQ(fx.device_memory(0).free, free0 - 2 * mib);  // exactly the first chunk, nothing leaked
  fx.disarm();
  r.resume(s);
  EXPECT_EQ(r.state(), region_state::active);
  EXPECT_TRUE(holds_pattern(fx, r, 11, s));
}

TEST(VmmRegion, AFailedPauseLeavesPartialAndAnyPauseCompletes) {
  host_executor host;
  fault_injection_adaptor fx(host);
  stream s(fx, 0);
  const std::size_t free0 = fx.device_memory(0).free;
  for (const pause_mode retry : {pause_mode::preserve, pause_mode::discard}) {
    vmm_region r(fx, region_config{6 * mib, 0, 2 * mib});
    write_pattern(fx, r.data(), r.size() / 4, 12, s);
    fx.arm({op_kind::copy}, 2);  // the third chunk's copy: two chunks are out already
    EXPECT_THROW(r.pause(s), injected_fault);
    fx.disarm();
    EXPECT_EQ(r.state(), region_state::partial);
    EXPECT_EQ(fx.device_memory(0).free,
              free0 - 4 * mib);  // chunk 1 stays until its copy is known done
    r.pause(retry, s);
    EXPECT_EQ(r.state(), region_state::paused);
    EXPECT_EQ(fx.device_memory(0).free, free0);
    r.resume(s);
    if (retry == pause_mode::preserve) {
      EXPECT_TRUE(holds_pattern(fx, r, 12, s));
    }
  }
}

TEST(ReferenceRegion, ResumeReallocatesAndRecapturesEveryGraph) {
  host_executor ex;
  stream s(ex, 0);
  reference_region r(ex, region_config{mib, 0, 0});
  write_pattern(ex, r.data(), r.size() / 4, 13, s);
  const graph_id g1 =
      r.register_graph([&](void* base, stream_ref st) { apply_affine(ex, base, mib / 4, st); }, s);
  const graph_id g2 =
      r.register_graph([&](void* base, stream_ref st) { apply_affine(ex, base, mib / 4, st); }, s);
  EXPECT_EQ(r.captures(), 2u);
  EXPECT_FALSE(r.address_stable());
  for (int cycle = 1; cycle <= 3; ++cycle) {
    r.pause(s);
    r.resume(s);
    EXPECT_EQ(r.captures(), 2u + 2u * cycle);
  }
  r.unregister_graph(g2);
  r.pause(s);
  r.resume(s);
  EXPECT_EQ(r.captures(), 9u);
  r.replay(g1, s);
  r.unregister_graph(g1);
  r.unregister_graph(g1);  // unknown ids are ignored
}

TEST(RegionErrors, NameTheStateAndTheWayOut) {
  host_executor ex;
  stream s(ex, 0), other(ex, 1);
  vmm_region r(ex, region_config{mib, 0, 0});
  try {
    r.resume(s);
    ADD_FAILURE() << "resume of an active region did not throw";
  } catch (const state_error& e) {
    EXPECT_NE(std::string(e.what()).find("active; pause() it first"), std::string::npos)
        << e.what();
  }
  try {
    r.pause(other);
    ADD_FAILURE() << "pause with another device's stream did not throw";
  } catch (const out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("stream of device 1 given to a region on device 0"),
              std::string::npos)
        << e.what();
  }
  r.pause(s);
  try {
    r.pause(pause_mode::discard, s);
    ADD_FAILURE() << "a second pause did not throw";
  } catch (const state_error& e) {
    EXPECT_NE(std::string(e.what()).find("already paused"), std::string::npos) << e.what();
  }
  try {
    vmm_region bad(ex, region_config{mib, 7, 0});
    ADD_FAILURE() << "device 7 was accepted";
  } catch (const out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("device = 7 is outside [0, 2)"), std::string::npos)
        << e.what();
  }
}

TEST(VmmRegion, ResumeOnItsDeviceWhateverStreamsOtherDevicesUse) {
  host_executor ex;
  stream s1(ex, 1);
  vmm_region r(ex, region_config{4 * mib, 1, 2 * mib});
  write_pattern(ex, r.data(), r.size() / 4, 14, s1);
  const std::size_t free1 = ex.device_memory(1).free;
  r.pause(s1);
  EXPECT_EQ(ex.device_memory(1).free, free1 + 4 * mib);
  stream s0(ex, 0);  // the most recently used device is now 0
  buffer scratch(ex, memory_kind::device, mib, 0);
  r.resume(s1);
  EXPECT_EQ(ex.device_memory(1).free, free1);
  EXPECT_EQ(ex.classify(r.data()).device, 1);
  EXPECT_TRUE(holds_pattern(ex, r, 14, s1));
}

TEST(RegionSwap, RefusesItselfAnotherDeviceAndAPairWithNothingLeftNamingWhy) {
  host_executor ex;  // two devices
  stream s(ex, 0);
  const std::size_t gran = ex.granularity(0);
  vmm_region a(ex, region_config{gran, 0, 0}), b(ex, region_config{gran, 0, 0});
  vmm_region other_device(ex, region_config{gran, 1, 0});
  const auto what = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const logic_error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(what([&] { a.swap_with(a, pause_mode::preserve, s); }).find("is this region"),
            std::string::npos);
  stream s1(ex, 1);
  other_device.pause(s1);
  EXPECT_NE(what([&] { a.swap_with(other_device, pause_mode::preserve, s); }).find("on device 1"),
            std::string::npos);
  // Both active: the pause is left, so the swap pauses `a` and finds `b` already active.
  a.swap_with(b, pause_mode::preserve, s);
  EXPECT_EQ(a.state(), region_state::paused);
  EXPECT_EQ(b.state(), region_state::active);
  EXPECT_NE(what([&] { a.swap_with(b, pause_mode::preserve, s); }).find("nothing is left to swap"),
            std::string::npos);
  b.swap_with(a, pause_mode::preserve, s);
  EXPECT_EQ(a.state(), region_state::active);
  EXPECT_EQ(b.state(), region_state::paused);
}

/// Swaps a 6 MiB region `a` out while `b` (paused, 6 MiB) comes in, in chunks of 2 MiB, on a
/// device of `capacity` bytes; returns the order of the swap's copies and unmaps.
std::vector<std::string> swap_order(std::size_t capacity) {
  host_executor_options o;
  o.device_capacity = capacity;
  host_executor host(o);
  swap_log log(host);
  stream s(log, 0);
  vmm_region b(log, region_config{6 * mib, 0, 2 * mib});
  write_pattern(log, b.data(), b.size() / 4, 21, s);
  b.pause(s);
  vmm_region a(log, region_config{6 * mib, 0, 2 * mib});
  write_pattern(log, a.data(), a.size() / 4, 22, s);
  log.synchronize(s);
  log.watch(a.data(), b.data());
  a.swap_with(b, pause_mode::preserve, s);
  EXPECT_EQ(a.state(), region_state::paused);
  EXPECT_EQ(b.state(), region_state::active);
  EXPECT_TRUE(holds_pattern(log, b, 21, s));
  auto order = log.events;
  b.swap_with(a, pause_mode::preserve, s);
  EXPECT_TRUE(holds_pattern(log, a, 22, s));
  return order;
}

TEST(RegionSwap, CopiesInRunAChunkAheadOfTheReleasesWhereTheDeviceHasRoom) {
  const std::vector<std::string> ahead{"in@0", "out@0", "in@1",    "out@1",  "unmap@0",
                                       "in@2", "out@2", "unmap@1", "unmap@2"};
  EXPECT_EQ(swap_order(std::size_t{64} << 20), ahead);
}

TEST(RegionSwap, WithOneChunkFreeTheCopiesInFollowTheReleasesAndTheSwapFits) {
  // 8 MiB: the active region's 6 MiB and one chunk more, not two.
  const std::vector<std::string> behind{"out@0", "in@0",    "out@1", "unmap@0", "in@1",
                                        "out@2", "unmap@1", "in@2",  "unmap@2"};
  EXPECT_EQ(swap_order(8 * mib), behind);
}

}  // namespace
