// Memory: pinned steady state over repeated shapes, and an offloader on a second device.
#include "arena_properties.hpp"

namespace offloadkit::arena::testing {

/// After the first cycle of a shape, more cycles allocate no host memory, copy no byte through
/// pageable memory, and issue at most one copy per run of device-contiguous tensors.
void prop_steady_state(executor& base, const arena_implementation& impl) {
  counting_adaptor ex(base);
  auto off = make_offloader(impl, ex);
  const set_spec spec = *gen_set_spec();
  stream s(base);
  device_set a = make_device_set(base, spec);
  fill_pattern(base, a.view(), *rc::gen::arbitrary<std::uint64_t>(), s);
  const snapshot expected = read_set(base, a.view(), s);
  ex.synchronize(off->offload(a.view(), s).ref());
  ex.synchronize(off->reload(a.view(), s).ref());
  ex.reset();
  // The same rule for what the code creates through CUDA itself, where the interposer counts it.
  const auto driver_before = offloadkit::testing::read_driver_counts();
  const std::size_t cycles = 3;
  for (std::size_t c = 0; c < cycles; ++c) {
    ex.synchronize(off->offload(a.view(), s).ref());
    ex.synchronize(off->reload(a.view(), s).ref());
  }
  if (const auto now = offloadkit::testing::read_driver_counts(); driver_before && now) {
    const std::string grew = offloadkit::testing::driver_growth(*driver_before, *now);
    if (!grew.empty()) RC_FAIL("steady-state cycles: " + grew);
  }
  const counting_adaptor::counts n = ex.snapshot();
  RC_ASSERT(n.allocations_of(memory_kind::pinned) == 0u);
  RC_ASSERT(n.allocations_of(memory_kind::pageable) == 0u);
  RC_ASSERT(n.pageable_bytes() == 0u);
  RC_ASSERT(n.calls_of(op_kind::copy) <= std::size_t{2} * cycles * contiguous_runs(a));
  assert_same(expected, read_set(base, a.view(), s), "steady-state cycles");
}

/// An offloader made for a device other than the first (d >= 1) moves tensor sets of d on a stream
/// of d, with work issued on device 0 right before each of its calls: over cycles every byte comes
/// back, in place and into other buffers; the events it returns are d's; it never moves another
/// device's memory (device 0's free memory stays put) and d's is back once it is released and
/// gone; where a pinned steady state is promised, cycles after the first allocate no host memory
/// (the arena is reused). On a GPU the figures hold within two granules.
void prop_multi_device(executor& base, const arena_implementation& impl) {
  const int devices = base.device_count();
  if (devices < 2) RC_SUCCEED("one device: nothing to check");
  const int d = *rc::gen::inRange(1, devices);
  RC_TAG(offloadkit::detail::concat("device ", d));
  host_memory_tracker ex(base);
  const set_spec spec = *gen_set_spec(std::size_t{1} << 20, 100);
  stream s(base, d), other(base, 0);
  device_set a = make_device_set(base, spec, d);
  device_set b = make_device_set(base, *gen_regrouped(spec), d);
  buffer busy(base, memory_kind::device, 4096, 0);
  const offloadkit::testing::sync_on_exit guard(base, {s, other});
  fill_pattern(base, a.view(), *rc::gen::arbitrary<std::uint64_t>(), s);
  const snapshot expected = read_set(base, a.view(), s);
  // Work on device 0, as the rest of a program issues it between the offloader's calls.
  int busy_value = 0;
  const auto device_0_work = [&] {
    base.fill(busy.data(), ++busy_value & 0xff, busy.size(), other);
  };
  const std::vector<std::size_t> before = offloadkit::testing::free_per_device(base);
  const auto check_devices = [&](const char* after) {
    const std::string moved = offloadkit::testing::other_devices_moved(base, before, d);
    if (!moved.empty()) RC_FAIL(std::string("after ") + after + ": " + moved);
  };
  auto off = impl.make_for_device(ex, d);
  expect_declared_promises(impl, *off);
  check_devices("making the offloader");
  const auto expect_own_device = [d](const event& e, const char* call) {
    if (e.ref().device != d) {
      RC_FAIL(offloadkit::detail::concat(call, " of a set of device ", d,
                                         " returned an event of device ", e.ref().device));
    }
  };
  const int cycles = *rc::gen::inRange(2, 5);
  std::size_t allocations_after_first = 0;
  for (int c = 0; c < cycles; ++c) {
    device_0_work();
    event out = off->offload(a.view(), s);
    expect_own_device(out, "offload()");
    ex.synchronize(out.ref());
    check_devices("offload()");
    scribble(base, a.view(), 0x5a, s);
    device_0_work();
    event back = off->reload(a.view(), s);
    expect_own_device(back, "reload()");
    ex.synchronize(back.ref());
    assert_same(expected, read_set(base, a.view(), s), "reload in place on the second device");
    check_devices("reload() in place");
    scribble(base, b.view(), 0xa5, s);
    device_0_work();
    ex.synchronize(off->reload(b.view(), s).ref());
    assert_same(expected, read_set(base, b.view(), s), "reload into other buffers of the device");
    check_devices("reload() into other buffers");
    if (c == 0) {
      allocations_after_first = ex.host().allocations;
    } else if (impl.caps.pinned_steady_state) {
      RC_ASSERT(ex.host().allocations == allocations_after_first);
    }
  }
  off->release();
  RC_ASSERT(off->host_bytes() == 0u);
  off.reset();
  base.synchronize(other);
  for (int dev = 0; dev < devices; ++dev) {
    const auto i = static_cast<std::size_t>(dev);
    if (!offloadkit::testing::free_memory_settles_near(
            base, dev, before[i], offloadkit::testing::memory_slack(base, dev))) {
      RC_FAIL(offloadkit::detail::concat("with the offloader gone, device ", dev, " has ",
                                         base.device_memory(dev).free, " bytes free, ", before[i],
                                         " before"));
    }
  }
}

}  // namespace offloadkit::arena::testing
