// Unit tests of the arena's parts: tensor-set validation and the coalesced offloader's plan reuse,
// batching and error messages (the layout and the pinned arena have their own tests beside them,
// in optimized/arena/tests/). Host executor only: nothing here is GPU-specific.
#include <gtest/gtest.h>

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

}  // namespace
