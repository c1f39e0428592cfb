// Round trips: random tensor sets, event chains, lifetimes, concurrent offloaders, the caller's
// late writes and the boundary shapes.
#include "arena_properties.hpp"

namespace offloadkit::arena::testing {

// ---- the properties ---------------------------------------------------------------------------

/// offload then reload restores every byte, in place and into other buffers of the same sizes.
void prop_round_trip(executor& ex, const arena_implementation& impl) {
  const set_spec spec = *gen_set_spec();
  const std::uint64_t seed = *rc::gen::arbitrary<std::uint64_t>();
  stream s(ex);
  device_set a = make_device_set(ex, spec);
  device_set b = make_device_set(ex, *gen_regrouped(spec));
  fill_pattern(ex, a.view(), seed, s);
  const snapshot expected = read_set(ex, a.view(), s);
  auto off = make_offloader(impl, ex);
  ex.synchronize(off->offload(a.view(), s).ref());
  RC_ASSERT(off->holds_copy());
  scribble(ex, a.view(), 0x5a, s);
  ex.synchronize(off->reload(a.view(), s).ref());
  assert_same(expected, read_set(ex, a.view(), s), "reload in place");
  ex.synchronize(off->reload(b.view(), s).ref());
  assert_same(expected, read_set(ex, b.view(), s), "reload into other buffers");
  RC_ASSERT(off->host_bytes() >= spec.total());
  off->release();
  RC_ASSERT(off->host_bytes() == 0u);
}

/// Cycles of changing shapes, chained through the returned events across two streams with
/// random delays: the event of offload() must not complete before the host copy is whole, and
/// reload() must wait for the offload() it reloads.
void prop_event_chain(executor& base, const arena_implementation& impl) {
  delay_adaptor ex(base);
  stream s1(base), s2(base);
  ex.delay_randomly(s1, std::chrono::microseconds(*rc::gen::inRange(0, 400)),
                    *rc::gen::arbitrary<std::uint64_t>());
  auto off = make_offloader(impl, ex);
  const int cycles = *rc::gen::inRange(1, 5);
  for (int c = 0; c < cycles; ++c) {
    const set_spec spec = *gen_set_spec(std::size_t{1} << 20, 100);
    device_set a = make_device_set(base, spec);
    device_set b = make_device_set(base, *gen_regrouped(spec));
    fill_pattern(base, a.view(), *rc::gen::arbitrary<std::uint64_t>(), s1);
    const snapshot expected = read_set(base, a.view(), s1);
    event done = off->offload(a.view(), s1);
    // Chain: overwrite the source on s2 once the offload's event completes, then reload on s2.
    ex.wait(done, s2);
    for (const device_tensor& t : a.tensors) {
      if (t.bytes != 0) ex.fill(t.data, 0xc3, t.bytes, s2);
    }
    event back = off->reload(b.view(), s2);
    ex.synchronize(back.ref());
    assert_same(expected, read_set(base, b.view(), s2), "reload after chained overwrite");
    ex.synchronize(s1);
    ex.synchronize(s2);
  }
}

/// release() frees all host memory; every use after it is a state_error saying so; destroying
/// an offloader without release() frees too; an arena-backed offloader never holds two host
/// buffers, also when it grows, and does not allocate for a set that fits.
void prop_lifetime(executor& base, const arena_implementation& impl) {
  host_memory_tracker ex(base);
  stream s(base);
  const set_spec small = *gen_set_spec(std::size_t{1} << 19, 100);
  set_spec large = *gen_set_spec(std::size_t{2} << 20, 200);
  // Larger: the small shape followed by more tensors.
  large.tensors.insert(large.tensors.begin(), small.tensors.begin(), small.tensors.end());
  if (!large.tensors.empty()) large.tensors[0].joins = false;
  if (small.tensors.size() < large.tensors.size())
    large.tensors[small.tensors.size()].joins = false;
  large.lead = small.lead;
  device_set a = make_device_set(base, small);
  device_set b = make_device_set(base, large);
  device_set c = make_device_set(base, small);  // the small shape again, after growth
  fill_pattern(base, a.view(), 1, s);
  fill_pattern(base, b.view(), 2, s);
  fill_pattern(base, c.view(), 3, s);
  const snapshot expect_c = read_set(base, c.view(), s);
  {
    auto off = make_offloader(impl, ex);
    const bool single = impl.caps.single_host_buffer;
    ex.synchronize(off->offload(a.view(), s).ref());
    ex.synchronize(off->offload(b.view(), s).ref());
    const std::size_t after_growth = ex.host().allocations;
    ex.synchronize(off->offload(c.view(), s).ref());
    scribble(base, c.view(), 0, s);
    ex.synchronize(off->reload(c.view(), s).ref());
    assert_same(expect_c, read_set(base, c.view(), s), "after growth");
    if (single) {
      RC_ASSERT(ex.host().peak_allocations <= 1u);
      RC_ASSERT(ex.host().allocations == after_growth);
    }
    off->release();
    RC_ASSERT(off->released());
    RC_ASSERT(off->host_bytes() == 0u);
    RC_ASSERT(ex.host().live_bytes == 0u);
    RC_ASSERT(ex.host().live_allocations == 0u);
    const std::string m1 =
        expect_throw<state_error>([&] { off->offload(a.view(), s); }, "offload after release");
    RC_ASSERT(contains(m1, "release"));
    const std::string m2 =
        expect_throw<state_error>([&] { off->reload(a.view(), s); }, "reload after release");
    RC_ASSERT(contains(m2, "release"));
    off->release();  // idempotent
  }
  {
    auto off = make_offloader(impl, ex);
    ex.synchronize(off->offload(b.view(), s).ref());
  }
  RC_ASSERT(ex.host().live_allocations == 0u);
  {
    auto off = make_offloader(impl, ex);  // reload before any offload: a state_error, not garbage
    expect_throw<state_error>([&] { off->reload(a.view(), s); }, "reload before offload");
  }
}

/// Offload of set A and reload of set B at once on two streams, with delays injected on both,
/// then A reloaded on the other stream without a host wait: always correct.
void prop_concurrent(executor& base, const arena_implementation& impl) {
  delay_adaptor ex(base);
  stream s1(base), s2(base);
  const set_spec spec_a = *gen_set_spec(std::size_t{1} << 20, 100);
  const set_spec spec_b = *gen_set_spec(std::size_t{1} << 20, 100);
  device_set a = make_device_set(base, spec_a);
  device_set a2 = make_device_set(base, *gen_regrouped(spec_a));
  device_set b = make_device_set(base, spec_b);
  fill_pattern(base, a.view(), *rc::gen::arbitrary<std::uint64_t>(), s1);
  fill_pattern(base, b.view(), *rc::gen::arbitrary<std::uint64_t>(), s2);
  const snapshot expect_a = read_set(base, a.view(), s1);
  const snapshot expect_b = read_set(base, b.view(), s2);
  auto off_a = make_offloader(impl, ex);
  auto off_b = make_offloader(impl, ex);
  ex.synchronize(off_b->offload(b.view(), s2).ref());
  scribble(base, b.view(), 0x77, s2);
  // The offload starts late (0.5 ms at least, so that every case has the window), so a reload
  // that does not wait for it reads a stale arena.
  ex.delay_next(std::chrono::microseconds(*rc::gen::element(500, 2000, 5000)), s1);
  ex.delay_randomly(s1, std::chrono::microseconds(*rc::gen::inRange(0, 300)),
                    *rc::gen::arbitrary<std::uint64_t>());
  ex.delay_randomly(s2, std::chrono::microseconds(*rc::gen::inRange(0, 300)),
                    *rc::gen::arbitrary<std::uint64_t>());
  event ea = off_a->offload(a.view(), s1);
  event eb = off_b->reload(b.view(), s2);
  event ea2 = off_a->reload(a2.view(), s2);
  ex.synchronize(ea.ref());
  ex.synchronize(eb.ref());
  ex.synchronize(ea2.ref());
  ex.clear();
  base.synchronize(s1);
  base.synchronize(s2);
  assert_same(expect_b, read_set(base, b.view(), s2), "set B reloaded during A's offload");
  assert_same(expect_a, read_set(base, a2.view(), s2), "set A reloaded on the other stream");
}

/// The caller's last write of the set is late on the caller's stream: a long hold, then the write,
/// then offload() on that stream at once. offload() copies in stream order on the stream it is
/// given (asynchronous or not), so the host copy must hold the late write; an offloader that
/// copies on a stream of its own without waiting for the caller's copies what the set held before
/// it. The hold (300 to 400 ms, drawn per case) outlasts any bounded wait shorter than that (the
/// other properties' writes, large ones on a loaded machine included, land well within it). The
/// set has at least 64 bytes, so that the two patterns differ.
void prop_caller_writes_late(executor& base, const arena_implementation& impl) {
  set_spec spec = *gen_set_spec(std::size_t{256} << 10, 24);
  if (spec.total() < 64) {
    tensor_spec t;
    t.bytes = *rc::gen::inRange<std::size_t>(64, 4096);
    spec.tensors.push_back(t);
  }
  const std::uint64_t before = *rc::gen::arbitrary<std::uint64_t>();
  const std::uint64_t late = *rc::gen::distinctFrom(before);
  const int delay_us = *rc::gen::inRange(300000, 400000);
  delay_adaptor ex(base);
  stream s(base);
  device_set a = make_device_set(base, spec);
  fill_pattern(base, a.view(), before, s);
  const snapshot expected = pattern_of(a.view(), late);
  auto off = make_offloader(impl, ex);
  // A failed check unwinds: the late write must land before the set and its data go.
  const offloadkit::testing::sync_on_exit guard(base, {s});
  RC_LOG() << "hold of " << delay_us << " us on the caller's stream, then its last write\n";
  ex.delay_next(std::chrono::microseconds(delay_us), 1, s);
  write_set(ex, a.view(), expected, s);
  event done = off->offload(a.view(), s);
  ex.clear();
  ex.synchronize(done.ref());
  base.synchronize(s);
  scribble(base, a.view(), 0x5a, s);
  ex.synchronize(off->reload(a.view(), s).ref());
  assert_same(expected, read_set(base, a.view(), s), "reload of a set written late");
}

namespace {

/// The largest tensor boundary_shapes offloads: past the random shapes' total, and past the
/// 4 and 8 MiB marks where copies are commonly chunked.
constexpr std::size_t boundary_large_bytes = (std::size_t{8} << 20) + 3;

/// The deterministic shapes at the edges of the arena's sizes, in the order boundary_shapes runs
/// them: empty, zero-byte (null and not), one byte, runs of odd sizes around the host alignment,
/// tensors just below, at and above a 4 MiB chunk, the largest, many one-byte tensors, and empty
/// again after the largest.
std::vector<set_spec> boundary_set_specs() {
  auto one = [](std::size_t bytes, bool null_if_empty = false) {
    tensor_spec t;
    t.bytes = bytes;
    t.null_if_empty = null_if_empty;
    return t;
  };
  auto joined = [](std::size_t bytes, std::size_t gap = 0) {
    tensor_spec t;
    t.bytes = bytes;
    t.joins = true;
    t.gap = gap;
    return t;
  };
  const std::size_t mib4 = std::size_t{4} << 20;
  std::vector<set_spec> out;
  out.push_back({});
  out.push_back({{one(0, true)}, 0});
  out.push_back({{one(0), one(0, true), one(0)}, 1});
  out.push_back({{one(1)}, 0});
  out.push_back({{one(1)}, 255});
  out.push_back({{one(255), joined(256), joined(257), one(1), joined(0), joined(1, 7)}, 3});
  out.push_back({{one(mib4 - 1), one(mib4), joined(1)}, 1});
  out.push_back({{one(mib4 + 1)}, 8});
  out.push_back({{one(1), joined(boundary_large_bytes)}, 0});
  set_spec many;
  for (std::size_t i = 0; i < 2048; ++i) many.tensors.push_back(i % 3 == 0 ? one(1) : joined(1));
  out.push_back(many);
  out.push_back({});
  return out;
}

}  // namespace

/// Deterministic edge cases beside the random ones: every boundary shape round-trips, in place and
/// into buffers grouped differently, through one offloader that grows from nothing to the largest
/// shape and shrinks back, then on a fresh offloader each; after release() nothing is held.
void prop_boundary_shapes(executor& ex, const arena_implementation& impl) {
  stream s(ex);
  auto grown = make_offloader(impl, ex);
  std::uint64_t seed = 77;
  for (const set_spec& spec : boundary_set_specs()) {
    set_spec apart = spec;
    for (tensor_spec& t : apart.tensors) t.joins = false;
    apart.lead = 0;
    device_set a = make_device_set(ex, spec);
    device_set b = make_device_set(ex, apart);
    fill_pattern(ex, a.view(), ++seed, s);
    const snapshot expected = read_set(ex, a.view(), s);
    std::ostringstream shape;
    showValue(spec, shape);
    auto fresh = make_offloader(impl, ex);
    for (offloader* off : {grown.get(), fresh.get()}) {
      ex.synchronize(off->offload(a.view(), s).ref());
      RC_ASSERT(off->holds_copy());
      scribble(ex, a.view(), 0x3c, s);
      scribble(ex, b.view(), 0xc3, s);
      ex.synchronize(off->reload(a.view(), s).ref());
      assert_same(expected, read_set(ex, a.view(), s), ("in place, " + shape.str()).c_str());
      ex.synchronize(off->reload(b.view(), s).ref());
      assert_same(expected, read_set(ex, b.view(), s), ("other buffers, " + shape.str()).c_str());
    }
    fresh->release();
    RC_ASSERT(fresh->host_bytes() == 0u);
  }
  grown->release();
  RC_ASSERT(grown->host_bytes() == 0u);
}

}  // namespace offloadkit::arena::testing
