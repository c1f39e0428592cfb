// The region op-sequence interpreter behind the fuzz target fuzz/region_ops_fuzz.cpp and its
// corpus test: bytes choose an implementation, a shape, and a sequence of write / pause /
// pause-discard / resume / replay / read / armed-fault ops, each checked against a plain model.
#include "offloadkit/testing/region_ops.hpp"

#include <cstdint>
#include <cstring>
#include <memory>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/detail/byte_reader.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/region/reference_region.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/workloads/region_patterns.hpp"

namespace offloadkit::region {
namespace {

using offloadkit::detail::concat;

host_executor& ops_executor() {
  static host_executor ex(host_executor_options{2, std::size_t{1} << 30, std::size_t{2} << 20, 2});
  return ex;
}

/// The whole region holds pattern(seed) updated `k` times, or unspecified contents.
struct contents_model {
  bool known = true;
  std::uint32_t seed = 0;
  int k = 0;
};

}  // namespace

std::string region_ops_run(const std::uint8_t* data, std::size_t size) {
  offloadkit::detail::byte_reader in{data, size};
  executor& host = ops_executor();
  fault_injection_adaptor fx(host);
  const std::size_t gran = fx.granularity(0);
  const bool optimized = in.next() % 2 == 0;
  const std::size_t granules = 1 + in.next() % 3;
  const std::size_t chunk = in.next() % 2 == 0 ? gran : 0;
  const std::size_t words = granules * gran / 4 - std::size_t{in.next()} * 7;
  stream s(fx, 0);
  const std::size_t free0 = fx.device_memory(0).free;
  std::unique_ptr<offload_region> r;
  if (optimized) {
    r = std::make_unique<vmm_region>(fx, region_config{words * 4, 0, chunk});
  } else {
    r = std::make_unique<reference_region>(fx, region_config{words * 4, 0, chunk});
  }
  void* const address = r->data();
  write_pattern(fx, r->data(), words, 0, s);
  const graph_id g = r->register_graph(
      [&fx, words](void* base, stream_ref st) { apply_affine(fx, base, words, st); }, s);
  s.synchronize();
  const std::size_t free_active = fx.device_memory(0).free;
  const std::vector<op_kind> kinds{op_kind::allocate_device,
                                   op_kind::allocate_pinned,
                                   op_kind::allocate_pageable,
                                   op_kind::create_physical,
                                   op_kind::map,
                                   op_kind::set_access,
                                   op_kind::copy,
                                   op_kind::begin_capture,
                                   op_kind::end_capture};
  contents_model m;
  buffer readback(fx, memory_kind::pinned, words * 4);

  for (int step = 0; in.n > 0 && step < 64; ++step) {
    const std::uint8_t op = in.next() % 7;
    const region_state before = r->state();
    const bool active = before == region_state::active;
    bool armed = false;
    try {
      switch (op) {
        case 0:  // write the whole region
          if (!active) break;
          m = contents_model{true, in.next(), 0};
          write_pattern(fx, r->data(), words, m.seed, s);
          break;
        case 1:
        case 2: {  // pause, preserving or discarding
          const pause_mode mode = op == 1 ? pause_mode::preserve : pause_mode::discard;
          if (before == region_state::paused) {
            try {
              r->pause(mode, s);
              return "pause of a paused region did not throw";
            } catch (const state_error&) {
            }
            break;
          }
          if (mode == pause_mode::discard) m.known = false;
          r->pause(mode, s);
          break;
        }
        case 3:  // resume
          if (active) {
            try {
              r->resume(s);
              return "resume of an active region did not throw";
            } catch (const state_error&) {
            }
            break;
          }
          r->resume(s);
          break;
        case 4:  // replay the registered graph
          if (!active) {
            try {
              r->replay(g, s);
              return "replay on a non-active region did not throw";
            } catch (const state_error&) {
            }
            break;
          }
          r->replay(g, s);
          ++m.k;
          break;
        case 5: {  // read and compare
          if (!active || !m.known) break;
          fx.copy(readback.data(), r->data(), words * 4, s);
          fx.synchronize(s);
          const auto* got = readback.as<std::uint32_t>();
          for (std::size_t i = 0; i < words; ++i) {
            std::uint32_t w = pattern_word(m.seed, i);
            for (int j = 0; j < m.k; ++j) w = affine_word(w);
            if (got[i] != w)
              return concat("step ", step, ": word ", i, " is ", got[i], ", expected ", w);
          }
          break;
        }
        case 6: {  // the next transition fails at its n-th instrumented call
          const std::size_t n = in.next() % 24;
          const bool to_pause = before != region_state::paused && in.next() % 2 == 0;
          fx.arm(kinds, n);
          armed = true;
          if (to_pause) {
            r->pause(s);
          } else if (!active) {
            r->resume(s);
          }
          fx.disarm();
          break;
        }
      }
    } catch (const injected_fault&) {
      if (!armed) return concat("step ", step, ": injected fault while nothing was armed");
    } catch (const out_of_memory& e) {
      if (!armed)
        return concat("step ", step, ": out of memory while nothing was armed: ", e.what());
    } catch (const std::exception& e) {
      return concat("step ", step, " (op ", int(op), "): unexpected ", e.what());
    }
    fx.disarm();
    // Invariants after every op.
    const region_state st = r->state();
    if (r->address_stable() && r->data() != address)
      return concat("step ", step, ": the address moved");
    if (!optimized && st == region_state::partial) return "the reference region reported partial";
    s.synchronize();
    const std::size_t f = fx.device_memory(0).free;
    if (st == region_state::active && f != free_active)
      return concat("step ", step, ": active with ", f, " bytes free, expected ", free_active);
    if (st == region_state::paused && f != free0)
      return concat("step ", step, ": paused with ", f, " bytes free, expected ", free0);
    if (st == region_state::partial && (f < free_active || f > free0)) {
      return concat("step ", step, ": partial with ", f, " bytes free, outside [", free_active,
                    ", ", free0, "]");
    }
  }
  s.synchronize();
  r.reset();
  if (fx.device_memory(0).free != free0)
    return "destroying the region did not free its device memory";
  return {};
}

}  // namespace offloadkit::region
