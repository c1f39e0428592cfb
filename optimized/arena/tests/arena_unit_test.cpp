// Unit tests of the arena's parts: tensor-set validation and the coalesced offloader's plan reuse,
// batching and error messages (the layout and the pinned arena have their own tests beside them,
// arena_layout_test.cpp). Host executor only: nothing here is GPU-specific.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/testing/arena_battery_support.hpp"
#include "testing.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::arena;
using arena::testing::set_spec;

TEST(ArenaTensorSet, NullPointerWithBytesIsOutOfRange) {
  std::vector<device_tensor> bad{{nullptr, 0}, {nullptr, 5}};
  try {
    validate(bad, "offload");
    FAIL() << "no exception";
  } catch (const out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 1"), std::string::npos) << e.what();
  }
}

TEST(ArenaCoalesced, PlansOnceAndCopiesOncePerContiguousRun) {
  host_executor ex;
  stream s(ex);
  set_spec spec;
  for (int i = 0; i < 50; ++i) spec.tensors.push_back({std::size_t(17 + i), i % 10 != 0, 0, false});
  auto set = arena::testing::make_device_set(ex, spec);
  arena::testing::fill_pattern(ex, set.view(), 42, s);
  const auto expected = arena::testing::read_set(ex, set.view(), s);
  coalesced_offloader off(ex);
  for (int cycle = 0; cycle < 3; ++cycle) {
    ex.synchronize(off.offload(set.view(), s).ref());
    EXPECT_EQ(off.last_copy_calls(), 5u);
    arena::testing::scribble(ex, set.view(), 0, s);
    ex.synchronize(off.reload(set.view(), s).ref());
    EXPECT_EQ(off.last_copy_calls(), 5u);
  }
  EXPECT_EQ(off.plans_built(), 1u);
  EXPECT_EQ(off.pinned_allocations(), 1u);
  EXPECT_EQ(arena::testing::first_difference(expected, arena::testing::read_set(ex, set.view(), s)),
            "");
}

TEST(ArenaCoalesced, ReloadOfAnotherShapeIsOutOfRange) {
  host_executor ex;
  stream s(ex);
  set_spec a, b;
  a.tensors = {{16, false, 0, false}, {8, false, 0, false}};
  b.tensors = {{16, false, 0, false}, {9, false, 0, false}};
  auto da = arena::testing::make_device_set(ex, a);
  auto db = arena::testing::make_device_set(ex, b);
  coalesced_offloader off(ex);
  ex.synchronize(off.offload(da.view(), s).ref());
  try {
    off.reload(db.view(), s);
    FAIL() << "no exception";
  } catch (const out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 1 has 9 bytes"), std::string::npos) << e.what();
  }
}

TEST(ArenaCoalesced, CopyErrorNamesTheTensor) {
  host_executor host;
  fault_injection_adaptor ex(host);
  stream s(host);
  set_spec spec;
  spec.tensors = {{16, false, 0, false}, {8, false, 0, false}, {8, false, 0, false}};
  auto d = arena::testing::make_device_set(host, spec);
  coalesced_offloader off(ex);
  ex.arm({op_kind::copy}, 2);
  try {
    off.offload(d.view(), s);
    FAIL() << "no exception";
  } catch (const injected_fault& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("offload"), std::string::npos) << m;
    EXPECT_NE(m.find("tensor 2 of 3"), std::string::npos) << m;
  }
  ex.disarm();
  EXPECT_FALSE(off.holds_copy());
  EXPECT_THROW(off.reload(d.view(), s), state_error);
  host.synchronize(s);
}

/// Ten separate tensors: ten runs, so ten copies each way.
set_spec separate_tensors() {
  set_spec spec;
  for (int i = 0; i < 10; ++i) spec.tensors.push_back({std::size_t(24 + 8 * i), false, 0, false});
  return spec;
}

TEST(ArenaCoalesced, SpreadsTheCopiesOfManyRunsOverSideStreams) {
  host_executor ex;
  stream s(ex);
  auto set = arena::testing::make_device_set(ex, separate_tensors());
  arena::testing::fill_pattern(ex, set.view(), 7, s);
  const auto expected = arena::testing::read_set(ex, set.view(), s);
  for (const auto& [per_stream, most, streams] :
       std::vector<std::array<std::size_t, 3>>{{512, 8, 1}, {3, 8, 4}, {3, 2, 2}, {1, 64, 10}}) {
    coalesced_options o;
    o.copies_per_stream = per_stream;
    o.max_copy_streams = most;
    coalesced_offloader off(ex, o);
    for (int cycle = 0; cycle < 2; ++cycle) {
      ex.synchronize(off.offload(set.view(), s).ref());
      EXPECT_EQ(off.last_copy_streams(), streams) << per_stream << " per stream, " << most;
      EXPECT_EQ(off.last_copy_calls(), 10u);
      arena::testing::scribble(ex, set.view(), 0, s);
      ex.synchronize(off.reload(set.view(), s).ref());
      EXPECT_EQ(off.last_copy_streams(), streams);
      EXPECT_EQ(
          arena::testing::first_difference(expected, arena::testing::read_set(ex, set.view(), s)),
          "");
    }
    EXPECT_EQ(off.pinned_allocations(), 1u);
  }
}

/// Ten separate tensors filled from `seed` on a host executor, and an offloader of 3 copies per
/// stream (4 streams) that calls the executor through a fault adaptor.
struct faulty_lanes {
  host_executor host;
  fault_injection_adaptor ex{host};
  stream s{host};
  arena::testing::device_set set = arena::testing::make_device_set(host, separate_tensors());
  arena::testing::snapshot expected;
  coalesced_offloader off{ex, three_per_stream()};

  explicit faulty_lanes(std::uint64_t seed) {
    arena::testing::fill_pattern(host, set.view(), seed, s);
    expected = arena::testing::read_set(host, set.view(), s);
  }
  static coalesced_options three_per_stream() {
    coalesced_options o;
    o.copies_per_stream = 3;
    return o;
  }
  /// Clears the tensors, reloads them and checks that they hold what was offloaded.
  void expect_reload() {
    arena::testing::scribble(host, set.view(), 0, s);
    ex.synchronize(off.reload(set.view(), s).ref());
    EXPECT_EQ(
        arena::testing::first_difference(expected, arena::testing::read_set(host, set.view(), s)),
        "");
  }
};

TEST(ArenaCoalesced, AFailedForkIsReportedAndARetrySucceeds) {
  faulty_lanes t(9);
  t.ex.arm({op_kind::record, op_kind::wait}, 0);  // the fork: the first record
  try {
    t.off.offload(t.set.view(), t.s);
    FAIL() << "no exception";
  } catch (const injected_fault& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("coalesced offload: forking 4 copy streams for 10 copies failed"),
              std::string::npos)
        << m;
  }
  t.ex.disarm();
  EXPECT_EQ(t.off.last_copy_calls(), 0u);
  EXPECT_FALSE(t.off.holds_copy());
  t.ex.synchronize(t.off.offload(t.set.view(), t.s).ref());
  t.ex.arm({op_kind::wait}, 1);  // reload: a side stream's wait for the fork
  EXPECT_THROW(t.off.reload(t.set.view(), t.s), injected_fault);
  t.ex.disarm();
  EXPECT_TRUE(t.off.holds_copy());
  t.expect_reload();
}

TEST(ArenaCoalesced, AFailedJoinWaitsForTheSideStreamInstead) {
  faulty_lanes t(11);
  t.ex.arm({op_kind::record}, 1);  // after the fork's record: the first join
  t.ex.synchronize(t.off.offload(t.set.view(), t.s).ref());
  EXPECT_TRUE(t.ex.fired());
  t.ex.disarm();
  EXPECT_TRUE(t.off.holds_copy());
  t.expect_reload();
}

TEST(ArenaCoalesced, OptionsOutOfRangeAreRefused) {
  host_executor ex;
  coalesced_options o;
  o.copies_per_stream = 0;
  try {
    coalesced_offloader off(ex, o);
    FAIL() << "no exception";
  } catch (const out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("copies_per_stream = 0 is out of range: valid range 1 or "
                                         "more"),
              std::string::npos)
        << e.what();
  }
  o.copies_per_stream = 1;
  o.max_copy_streams = 65;
  EXPECT_THROW(coalesced_offloader(ex, o), out_of_range);
  o.max_copy_streams = 0;
  EXPECT_THROW(coalesced_offloader(ex, o), out_of_range);
}

}  // namespace
