// What the arena properties share inside the battery library: random set shapes, comparisons,
// the descriptor's promises checked against the instance, and each property's declaration (the
// bodies are in this folder's *_properties.cpp, listed by battery.cpp).
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
#include "offloadkit/testing/arena_battery.hpp"
#include "offloadkit/testing/arena_battery_support.hpp"
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

// ---- properties (arena_battery() lists them) ---------------------------------------------------

/// offload then reload restores every byte, in place and into other buffers of the same sizes.
void prop_round_trip(executor& ex, const arena_implementation& impl);

/// Cycles of changing shapes, chained through the returned events across two streams with
/// random delays: the event of offload() must not complete before the host copy is whole, and
/// reload() must wait for the offload() it reloads.
void prop_event_chain(executor& base, const arena_implementation& impl);

/// After the first cycle of a shape, more cycles allocate no host memory, copy no byte through
/// pageable memory, and issue at most one copy per run of device-contiguous tensors.
void prop_steady_state(executor& base, const arena_implementation& impl);

/// release() frees all host memory; every use after it is a state_error saying so; destroying
/// an offloader without release() frees too; an arena-backed offloader never holds two host
/// buffers, also when it grows, and does not allocate for a set that fits.
void prop_lifetime(executor& base, const arena_implementation& impl);

/// Host allocation fails at every point of offload(): the error is out_of_memory naming the
/// offload, the device tensors are untouched, and a retry round-trips every byte.
void prop_fault_allocation(executor& base, const arena_implementation& impl);

/// A copy fails at every tensor of offload() and of reload(): the error names the tensor and the
/// direction, offload() leaves the device untouched, reload() keeps the host copy, and a retry
/// restores every byte.
void prop_fault_copy(executor& base, const arena_implementation& impl);

/// For N = 0, 1, 2, ... the Nth allocation, copy, fill, launch, host function, event record or
/// wait the offloader makes fails, in an offload of a smaller set (so that the next one grows the
/// host memory), an offload, a reload in place and one into other buffers, on a fresh offloader
/// each run. Each failure reaches the caller as a typed error; after a failed offload() the
/// device tensors are untouched and no copy is held (reload() is a state_error); after a failed
/// reload() the host copy is still held; the failed call, retried once on the same offloader,
/// succeeds and every byte comes back. Once the offloader is released (or, in half the cases,
/// destroyed without release()) it holds nothing: no allocation, stream or event (the resource
/// ledger), and nothing it freed was freed twice.
void prop_fault_countdown(executor& base, const arena_implementation& impl);

/// Offload of set A and reload of set B at once on two streams, with delays injected on both,
/// then A reloaded on the other stream without a host wait: always correct.
void prop_concurrent(executor& base, const arena_implementation& impl);

/// The caller's last write of the set is late on the caller's stream: a long hold, then the write,
/// then offload() on that stream at once. offload() copies in stream order on the stream it is
/// given (asynchronous or not), so the host copy must hold the late write; an offloader that
/// copies on a stream of its own without waiting for the caller's copies what the set held before
/// it. The hold (300 to 400 ms, drawn per case) outlasts any bounded wait shorter than that (the
/// other properties' writes, large ones on a loaded machine included, land well within it). The
/// set has at least 64 bytes, so that the two patterns differ.
void prop_caller_writes_late(executor& base, const arena_implementation& impl);

/// Random sequences of offload, reload (same or other shape), overwrite, release and failing
/// copies, run against a plain model: which copy is held, what each set holds, whether released.
/// After every step the implementation agrees with the model; no failure loses the host copy.
///
/// One command crosses streams: a reload on a second stream, held back by an injected delay, and
/// at once, with no host wait, an offload of another set on the first stream. The offload must
/// not overwrite the host copy before the reload has read it.
void prop_model_sequence(executor& base, const arena_implementation& impl);

/// Deterministic edge cases beside the random ones: every boundary shape round-trips, in place and
/// into buffers grouped differently, through one offloader that grows from nothing to the largest
/// shape and shrinks back, then on a fresh offloader each; after release() nothing is held.
void prop_boundary_shapes(executor& ex, const arena_implementation& impl);

/// An offloader made for a device other than the first (d >= 1) moves tensor sets of d on a stream
/// of d, with work issued on device 0 right before each of its calls: over cycles every byte comes
/// back, in place and into other buffers; the events it returns are d's; it never moves another
/// device's memory (device 0's free memory stays put) and d's is back once it is released and
/// gone; where a pinned steady state is promised, cycles after the first allocate no host memory
/// (the arena is reused). On a GPU the figures hold within two granules.
void prop_multi_device(executor& base, const arena_implementation& impl);

}  // namespace offloadkit::arena::testing
