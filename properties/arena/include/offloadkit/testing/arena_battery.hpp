// The arena battery: every property of an offloader, written once against the interface and
// listed for an implementation descriptor (testing::arena_implementation) by what it declares:
// each promise in its caps is checked (and the instance's promises() must agree with them), and
// fault injection applies only when its allocations and copies go through the executor, and the
// second-device property only where the descriptor can make an offloader for that device. Run by
// the generated ctest suites on both executors and by `offloadkit check` through arena_checks().
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/arena/offloader.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/testing/arena_battery_support.hpp"
#include "offloadkit/testing/arena_checks.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/device_memory.hpp"
#include "offloadkit/testing/driver_instruments.hpp"
#include "offloadkit/testing/fault_countdown.hpp"
#include "offloadkit/testing/implementation.hpp"
#include "offloadkit/testing/sync_on_exit.hpp"

namespace offloadkit::arena::testing {

using offloadkit::testing::arena_implementation;

/// Host bytes the ctest-sized sets stay under.
inline constexpr std::size_t battery_max_bytes = std::size_t{3} << 20;

/// Random shapes: the empty set, zero-byte tensors, 1-byte and odd sizes, many small tensors, a
/// few large ones, and mixtures; tensors share allocations (contiguous or with gaps) at random.
inline rc::Gen<set_spec> gen_set_spec(std::size_t max_total = battery_max_bytes,
                                      std::size_t max_tensors = 400) {
  return rc::gen::exec([max_total, max_tensors] {
    using rc::gen::inRange;
    set_spec s;
    const int shape = *inRange(0, 6);
    std::size_t n = 0;
    std::size_t lo = 0, hi = 1;
    switch (shape) {
      case 0:  // empty set
        break;
      case 1:  // zero-byte tensors among 1-byte ones
        n = *inRange<std::size_t>(1, 10);
        lo = 0, hi = 2;
        break;
      case 2:  // tiny and odd sizes
        n = *inRange<std::size_t>(1, 40);
        lo = 1, hi = 300;
        break;
      case 3:  // many small tensors
        n = *inRange<std::size_t>(50, std::max<std::size_t>(51, max_tensors));
        lo = 1, hi = 4096;
        break;
      case 4:  // a few large ones
        n = *inRange<std::size_t>(1, 4);
        lo = max_total / 8, hi = max_total / 3;
        break;
      default:  // a mixture
        n = *inRange<std::size_t>(1, 60);
        lo = 0, hi = 65536;
        break;
    }
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      tensor_spec t;
      t.bytes = *inRange<std::size_t>(lo, hi);
      if (shape == 5 && *inRange(0, 4) == 0)
        t.bytes = *rc::gen::element<std::size_t>(0, 1, 3, 255, 257);
      t.bytes = std::min(t.bytes, max_total - total);
      total += t.bytes;
      t.joins = i > 0 && *rc::gen::arbitrary<bool>();
      t.gap = t.joins ? *rc::gen::element<std::size_t>(0, 0, 0, 1, 7, 256) : 0;
      t.null_if_empty = *rc::gen::arbitrary<bool>();
      s.tensors.push_back(t);
    }
    s.lead = *rc::gen::element<std::size_t>(0, 0, 1, 3, 8, 255);
    return s;
  });
}

/// The same sizes, grouped into allocations differently (other addresses, other adjacency).
inline rc::Gen<set_spec> gen_regrouped(const set_spec& base) {
  return rc::gen::exec([base] {
    set_spec s = base;
    for (std::size_t i = 0; i < s.tensors.size(); ++i) {
      s.tensors[i].joins = i > 0 && *rc::gen::arbitrary<bool>();
      s.tensors[i].gap = s.tensors[i].joins ? *rc::gen::element<std::size_t>(0, 0, 5) : 0;
    }
    s.lead = *rc::gen::element<std::size_t>(0, 2, 64);
    return s;
  });
}

inline void assert_same(const snapshot& expected, const snapshot& actual, const char* what) {
  const std::string diff = first_difference(expected, actual);
  if (!diff.empty()) RC_FAIL(std::string(what) + ": " + diff);
}

inline bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

/// Runs `fn`, which must throw an exception of type E; returns its message.
template <class E, class Fn>
std::string expect_throw(Fn&& fn, const char* what) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  RC_FAIL(std::string(what) + ": no exception of the expected type");
  return {};
}

/// An offloader from the descriptor's factory. The promises the instance makes agree with the
/// ones its descriptor declares, which are the ones the properties below check.
inline void expect_declared_promises(const arena_implementation& impl, const offloader& off) {
  const offload_promises made = off.promises();
  if (made.asynchronous != impl.caps.asynchronous ||
      made.pinned_steady_state != impl.caps.pinned_steady_state ||
      made.single_host_buffer != impl.caps.single_host_buffer) {
    RC_FAIL(offloadkit::detail::concat(
        impl.name, ": promises() says asynchronous=", made.asynchronous, " pinned_steady_state=",
        made.pinned_steady_state, " single_host_buffer=", made.single_host_buffer,
        ", the descriptor declares ", impl.caps.asynchronous, " ", impl.caps.pinned_steady_state,
        " ", impl.caps.single_host_buffer));
  }
}

inline std::unique_ptr<offloader> make_offloader(const arena_implementation& impl, executor& ex) {
  auto off = impl.make(ex);
  expect_declared_promises(impl, *off);
  return off;
}

// ---- the properties ---------------------------------------------------------------------------

/// offload then reload restores every byte, in place and into other buffers of the same sizes.
inline void prop_round_trip(executor& ex, const arena_implementation& impl) {
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
inline void prop_event_chain(executor& base, const arena_implementation& impl) {
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

/// After the first cycle of a shape, more cycles allocate no host memory, copy no byte through
/// pageable memory, and issue at most one copy per run of device-contiguous tensors.
inline void prop_steady_state(executor& base, const arena_implementation& impl) {
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

/// release() frees all host memory; every use after it is a state_error saying so; destroying
/// an offloader without release() frees too; an arena-backed offloader never holds two host
/// buffers, also when it grows, and does not allocate for a set that fits.
inline void prop_lifetime(executor& base, const arena_implementation& impl) {
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

/// Host allocation fails at every point of offload(): the error is out_of_memory naming the
/// offload, the device tensors are untouched, and a retry round-trips every byte.
inline void prop_fault_allocation(executor& base, const arena_implementation& impl) {
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
    ex.arm({op_kind::allocate_pinned, op_kind::allocate_pageable}, n);
    bool threw = false;
    try {
      ex.synchronize(off->offload(a.view(), s).ref());
    } catch (const out_of_memory& e) {
      threw = true;
      RC_ASSERT(contains(e.what(), "offload"));
      RC_ASSERT(contains(e.what(), "alloc"));
    }
    const bool fired = ex.fired();
    ex.disarm();
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
inline void prop_fault_copy(executor& base, const arena_implementation& impl) {
  fault_injection_adaptor ex(base);
  stream s(base);
  const set_spec spec = *gen_set_spec(std::size_t{256} << 10, 12);
  device_set a = make_device_set(base, spec);
  fill_pattern(base, a.view(), *rc::gen::arbitrary<std::uint64_t>(), s);
  const snapshot expected = read_set(base, a.view(), s);
  auto off = make_offloader(impl, ex);
  for (std::size_t n = 0; n < 64; ++n) {  // offload
    ex.arm({op_kind::copy}, n);
    bool threw = false;
    try {
      ex.synchronize(off->offload(a.view(), s).ref());
    } catch (const injected_fault& e) {
      threw = true;
      RC_ASSERT(contains(e.what(), "offload"));
      RC_ASSERT(contains(e.what(), "tensor"));
    }
    const bool fired = ex.fired();
    ex.disarm();
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
    ex.arm({op_kind::copy}, n);
    bool threw = false;
    try {
      ex.synchronize(off->reload(a.view(), s).ref());
    } catch (const injected_fault& e) {
      threw = true;
      RC_ASSERT(contains(e.what(), "reload"));
      RC_ASSERT(contains(e.what(), "tensor"));
    }
    const bool fired = ex.fired();
    ex.disarm();
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
inline void prop_fault_countdown(executor& base, const arena_implementation& impl) {
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

/// Offload of set A and reload of set B at once on two streams, with delays injected on both,
/// then A reloaded on the other stream without a host wait: always correct.
inline void prop_concurrent(executor& base, const arena_implementation& impl) {
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
inline void prop_caller_writes_late(executor& base, const arena_implementation& impl) {
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

/// Random sequences of offload, reload (same or other shape), overwrite, release and failing
/// copies, run against a plain model: which copy is held, what each set holds, whether released.
/// After every step the implementation agrees with the model; no failure loses the host copy.
///
/// One command crosses streams: a reload on a second stream, held back by an injected delay, and
/// at once, with no host wait, an offload of another set on the first stream. The offload must
/// not overwrite the host copy before the reload has read it.
inline void prop_model_sequence(executor& base, const arena_implementation& impl) {
  fault_injection_adaptor ex(base);
  delay_adaptor delays(ex);
  stream s(base), s2(base);
  const set_spec shape_a = *gen_set_spec(std::size_t{128} << 10, 24);
  const set_spec shape_b = *gen_set_spec(std::size_t{128} << 10, 24);
  std::vector<device_set> sets;
  sets.push_back(make_device_set(base, shape_a));
  sets.push_back(make_device_set(base, *gen_regrouped(shape_a)));
  sets.push_back(make_device_set(base, shape_b));
  sets.push_back(make_device_set(base, *gen_regrouped(shape_b)));
  std::vector<snapshot> content;  // the model: what each set holds
  for (std::size_t k = 0; k < sets.size(); ++k) {
    fill_pattern(base, sets[k].view(), 1000 + k, s);
    content.push_back(read_set(base, sets[k].view(), s));
  }
  auto sizes_of = [&sets](std::size_t k) {
    std::vector<std::size_t> out;
    for (const device_tensor& t : sets[k].tensors) out.push_back(t.bytes);
    return out;
  };
  bool released = false, held = false;
  std::vector<std::size_t> held_sizes;
  std::size_t held_k = 0;  // the set the arena's copy came from
  snapshot held_copy;
  auto off = make_offloader(impl, delays);
  // The cross-stream command: the held set k reloaded on s2, held back, then another set offloaded
  // on s without a host wait; the model then holds the other set.
  auto cross_stream = [&](std::size_t k) {
    const std::size_t m = (k + *rc::gen::inRange<std::size_t>(1, sets.size())) % sets.size();
    const auto hold = std::chrono::microseconds(*rc::gen::element(300, 1000, 3000));
    const tensor_set_view view = sets[k].view();
    delays.delay_next(hold, s2);
    event back = off->reload(view, s2);
    event out = off->offload(sets[m].view(), s);
    ex.synchronize(back.ref());
    ex.synchronize(out.ref());
    delays.clear();
    base.synchronize(s2);
    base.synchronize(s);
    content[k] = held_copy;
    held_sizes = sizes_of(m);
    held_k = m;
    held_copy = content[m];
    assert_same(content[k], read_set(base, view, s), "a set reloaded on another stream");
    ex.synchronize(off->reload(sets[m].view(), s).ref());
    assert_same(content[m], read_set(base, sets[m].view(), s),
                "the set offloaded while a reload on another stream was pending");
  };
  // Every case runs the cross-stream command once first, on a set just offloaded: with random
  // steps alone, the planted offload_ignores_reload escaped every case of some seeds
  // (11374557001324320862 among them).
  {
    const std::size_t k = *rc::gen::inRange<std::size_t>(0, sets.size());
    ex.synchronize(off->offload(sets[k].view(), s).ref());
    held = true;
    held_sizes = sizes_of(k);
    held_k = k;
    held_copy = content[k];
    cross_stream(k);
  }
  const int steps = *rc::gen::inRange(1, 40);
  for (int step = 0; step < steps; ++step) {
    // At full size: rapidcheck scales inRange by the case's size, which would leave the last
    // commands to the last cases only.
    const int op = *rc::gen::resize(100, rc::gen::inRange(0, 14));
    std::size_t k = *rc::gen::inRange<std::size_t>(0, sets.size());
    // The cross-stream command reloads the set the arena holds, whichever was drawn.
    if (op >= 12 && held && !released) k = held_k;
    const tensor_set_view view = sets[k].view();
    const bool fail = op >= 9 && op <= 11;  // arm a copy failure at a random point of this step
    if (fail) ex.arm({op_kind::copy}, *rc::gen::inRange<std::size_t>(0, 4));
    if (op >= 12) {  // reload k on s2, held back, then offload another set on s without a wait
      if (released || !held || sizes_of(k) != held_sizes) continue;
      cross_stream(k);
    } else if (op == 0 || op == 1) {  // overwrite
      ex.disarm();
      scribble(base, view, step, s);
      for (auto& t : content[k]) std::fill(t.begin(), t.end(), static_cast<unsigned char>(step));
    } else if (op == 2 && *rc::gen::inRange(0, 4) == 0) {  // rare: it ends the sequence's use
      off->release();
      released = true;
      held = false;
      RC_ASSERT(off->host_bytes() == 0u);
    } else if (op <= 5 || op == 9 || op == 10) {  // offload
      if (released) {
        expect_throw<state_error>([&] { off->offload(view, s); }, "offload after release");
      } else {
        bool threw = false;
        try {
          ex.synchronize(off->offload(view, s).ref());
        } catch (const injected_fault&) {
          threw = true;
        }
        RC_ASSERT(threw == (fail && ex.fired()));  // fired() keeps its value until the next arm
        base.synchronize(s);
        held = !threw;
        if (held) {
          held_sizes = sizes_of(k);
          held_k = k;
          held_copy = content[k];
        }
      }
    } else {  // reload
      if (released || !held) {
        expect_throw<state_error>([&] { off->reload(view, s); }, "reload without a copy");
      } else if (sizes_of(k) != held_sizes) {
        expect_throw<out_of_range>([&] { off->reload(view, s); }, "reload of another shape");
      } else {
        bool threw = false;
        try {
          ex.synchronize(off->reload(view, s).ref());
        } catch (const injected_fault&) {
          threw = true;
        }
        RC_ASSERT(threw == (fail && ex.fired()));  // fired() keeps its value until the next arm
        base.synchronize(s);
        content[k] = threw ? read_set(base, view, s) : held_copy;
      }
    }
    ex.disarm();
    RC_ASSERT(off->released() == released);
    RC_ASSERT(off->holds_copy() == held);
    for (std::size_t j = 0; j < sets.size(); ++j) {
      assert_same(content[j], read_set(base, sets[j].view(), s), "a set after a step");
    }
  }
}

/// The largest tensor boundary_shapes offloads: past the random shapes' total, and past the
/// 4 and 8 MiB marks where copies are commonly chunked.
inline constexpr std::size_t boundary_large_bytes = (std::size_t{8} << 20) + 3;

/// The deterministic shapes at the edges of the arena's sizes, in the order boundary_shapes runs
/// them: empty, zero-byte (null and not), one byte, runs of odd sizes around the host alignment,
/// tensors just below, at and above a 4 MiB chunk, the largest, many one-byte tensors, and empty
/// again after the largest.
inline std::vector<set_spec> boundary_set_specs() {
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

/// Deterministic edge cases beside the random ones: every boundary shape round-trips, in place and
/// into buffers grouped differently, through one offloader that grows from nothing to the largest
/// shape and shrinks back, then on a fresh offloader each; after release() nothing is held.
inline void prop_boundary_shapes(executor& ex, const arena_implementation& impl) {
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

/// An offloader made for a device other than the first (d >= 1) moves tensor sets of d on a stream
/// of d, with work issued on device 0 right before each of its calls: over cycles every byte comes
/// back, in place and into other buffers; the events it returns are d's; it never moves another
/// device's memory (device 0's free memory stays put) and d's is back once it is released and
/// gone; where a pinned steady state is promised, cycles after the first allocate no host memory
/// (the arena is reused). On a GPU the figures hold within two granules.
inline void prop_multi_device(executor& base, const arena_implementation& impl) {
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
