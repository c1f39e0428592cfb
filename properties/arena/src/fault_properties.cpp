// Injected faults: a failed allocation, a failed copy, and the countdown over every call.
#include "arena_properties.hpp"

namespace offloadkit::arena::testing {

/// Host allocation fails at every point of offload(): the error is out_of_memory naming the
/// offload, the device tensors are untouched, and a retry round-trips every byte.
void prop_fault_allocation(executor& base, const arena_implementation& impl) {
  fault_injection_adaptor ex(base);
  stream s(base);
  const set_spec spec = *gen_set_spec(std::size_t{256} << 10, 12);
  set_spec half = spec;  // offloaded first, so that the failures hit growth, not a first allocation
  half.tensors.resize(spec.tensors.size() / 2);
  device_set h = make_device_set(base, half);
  device_set a = make_device_set(base, spec);
  fill_pattern(base, a.view(), *rc::gen::arbitrary<std::uint64_t>(), s);
  const snapshot expected = read_set(base, a.view(), s);
  auto off = make_offloader(impl, ex);
  if (*rc::gen::arbitrary<bool>()) ex.synchronize(off->offload(h.view(), s).ref());
  for (std::size_t n = 0; n < 64; ++n) {
    const auto [threw, fired, calls, what] = offloadkit::testing::run_armed(
        ex, {op_kind::allocate_pinned, op_kind::allocate_pageable}, n, [&] {
          try {
            ex.synchronize(off->offload(a.view(), s).ref());
          } catch (const out_of_memory& e) {
            RC_ASSERT(contains(e.what(), "offload"));
            RC_ASSERT(contains(e.what(), "alloc"));
            throw;
          }
        });
    base.synchronize(s);
    RC_ASSERT(threw == fired);
    assert_same(expected, read_set(base, a.view(), s), "device tensors after a failed offload");
    if (threw) {  // no half-written copy is ever reloaded
      expect_throw<state_error>([&] { off->reload(a.view(), s); }, "reload after failed offload");
    }
    ex.synchronize(off->offload(a.view(), s).ref());
    scribble(base, a.view(), 0x11, s);
    ex.synchronize(off->reload(a.view(), s).ref());
    assert_same(expected, read_set(base, a.view(), s), "round trip after a failed allocation");
    if (!fired) break;
  }
}

/// A copy fails at every tensor of offload() and of reload(): the error names the tensor and the
/// direction, offload() leaves the device untouched, reload() keeps the host copy, and a retry
/// restores every byte.
void prop_fault_copy(executor& base, const arena_implementation& impl) {
  fault_injection_adaptor ex(base);
  stream s(base);
  const set_spec spec = *gen_set_spec(std::size_t{256} << 10, 12);
  device_set a = make_device_set(base, spec);
  fill_pattern(base, a.view(), *rc::gen::arbitrary<std::uint64_t>(), s);
  const snapshot expected = read_set(base, a.view(), s);
  auto off = make_offloader(impl, ex);
  for (std::size_t n = 0; n < 64; ++n) {  // offload
    const auto [threw, fired, calls, what] =
        offloadkit::testing::run_armed(ex, {op_kind::copy}, n, [&] {
          try {
            ex.synchronize(off->offload(a.view(), s).ref());
          } catch (const injected_fault& e) {
            RC_ASSERT(contains(e.what(), "offload"));
            RC_ASSERT(contains(e.what(), "tensor"));
            throw;
          }
        });
    base.synchronize(s);
    RC_ASSERT(threw == fired);
    assert_same(expected, read_set(base, a.view(), s), "device tensors after a failed offload");
    if (threw) {
      expect_throw<state_error>([&] { off->reload(a.view(), s); }, "reload after failed offload");
    }
    if (!fired) break;
  }
  ex.synchronize(off->offload(a.view(), s).ref());
  for (std::size_t n = 0; n < 64; ++n) {  // reload
    scribble(base, a.view(), 0x22, s);
    const auto [threw, fired, calls, what] =
        offloadkit::testing::run_armed(ex, {op_kind::copy}, n, [&] {
          try {
            ex.synchronize(off->reload(a.view(), s).ref());
          } catch (const injected_fault& e) {
            RC_ASSERT(contains(e.what(), "reload"));
            RC_ASSERT(contains(e.what(), "tensor"));
            throw;
          }
        });
    base.synchronize(s);
    RC_ASSERT(threw == fired);
    if (fired) ex.synchronize(off->reload(a.view(), s).ref());
    assert_same(expected, read_set(base, a.view(), s), "reload after a failed reload");
    if (!fired) break;
  }
}

/// For N = 0, 1, 2, ... the Nth allocation, copy, fill, launch, host function, event record or
/// wait the offloader makes fails, in an offload of a smaller set (so that the next one grows the
/// host memory), an offload, a reload in place and one into other buffers, on a fresh offloader
/// each run. Each failure reaches the caller as a typed error; after a failed offload() the
/// device tensors are untouched and no copy is held (reload() is a state_error); after a failed
/// reload() the host copy is still held; the failed call, retried once on the same offloader,
/// succeeds and every byte comes back. Once the offloader is released (or, in half the cases,
/// destroyed without release()) it holds nothing: no allocation, stream or event (the resource
/// ledger), and nothing it freed was freed twice.
void prop_fault_countdown(executor& base, const arena_implementation& impl) {
  stream s(base);
  const set_spec spec = *gen_set_spec(std::size_t{256} << 10, 12);
  set_spec half = spec;
  half.tensors.resize(spec.tensors.size() / 2);
  device_set h = make_device_set(base, half);
  device_set a = make_device_set(base, spec);
  device_set b = make_device_set(base, *gen_regrouped(spec));
  const std::uint64_t seed = *rc::gen::arbitrary<std::uint64_t>();
  fill_pattern(base, h.view(), seed + 1, s);
  fill_pattern(base, a.view(), seed, s);
  const snapshot expected = read_set(base, a.view(), s);
  const bool release_first = *rc::gen::arbitrary<bool>();
  const offloadkit::testing::sync_on_exit drain(base, {s});
  offloadkit::testing::run_fault_countdown(
      base, offloadkit::testing::offload_fault_kinds(),
      [&](offloadkit::testing::countdown_run run) {
        std::string failed_call;
        // Runs `move` (an offload or reload, waited for); on an injected failure checks the
        // offloader with `after_failure`, disarms and runs it once more, which must succeed.
        const auto retried = [&](const char* what, auto&& move, auto&& after_failure) {
          try {
            run.ex.synchronize(move().ref());
            return;
          } catch (const std::exception& e) {
            offloadkit::testing::expect_injected(e, what);
            if (!failed_call.empty()) {
              RC_FAIL(std::string(what) + " failed after " + failed_call +
                      " had failed, with one fault armed");
            }
            failed_call = what;
          }
          base.synchronize(s);
          after_failure();
          run.faults.disarm();
          run.ex.synchronize(move().ref());
        };
        auto off = make_offloader(impl, run.ex);
        const auto failed_offload = [&](const device_set& set, const char* what) {
          return [&, what] {
            if (off->holds_copy()) {
              RC_FAIL(std::string("holds_copy() after a failed ") + what);
            }
            expect_throw<state_error>([&] { off->reload(set.view(), s); },
                                      "reload after a failed offload");
          };
        };
        retried(
            "offload of the smaller set", [&] { return off->offload(h.view(), s); },
            failed_offload(h, "offload of the smaller set"));
        retried(
            "offload", [&] { return off->offload(a.view(), s); },
            [&] {
              assert_same(expected, read_set(base, a.view(), s),
                          "device tensors after a failed offload");
              failed_offload(a, "offload")();
            });
        const auto still_held = [&] {
          if (!off->holds_copy()) RC_FAIL("a failed reload() dropped the host copy");
        };
        // In place, then into other buffers of the same sizes.
        for (const device_set* into : {&a, &b}) {
          const std::string what = into == &a ? "reload in place" : "reload into other buffers";
          scribble(base, into->view(), into == &a ? 0x3c : 0xc3, s);
          retried(
              what.c_str(), [&] { return off->reload(into->view(), s); }, still_held);
          std::string checked = what;
          if (!failed_call.empty()) checked.append(" after a failed ").append(failed_call);
          assert_same(expected, read_set(base, into->view(), s), checked.c_str());
        }
        run.faults.disarm();  // release() and destruction have no caller to report to
        if (release_first) {
          off->release();
          RC_ASSERT(off->host_bytes() == 0u);
        }
      });
}

}  // namespace offloadkit::arena::testing
