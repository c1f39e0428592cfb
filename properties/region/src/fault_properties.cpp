// Fault countdowns over pause, resume and swap_with: every executor call failed in turn.
#include "region_properties.hpp"

namespace offloadkit::region::testing {

namespace {

/// What a countdown runs in: a region of 2-4 granules less up to 100 words, in chunks of one
/// granule or of two (a partial last chunk in an odd region), on a fault adaptor over a ledger of
/// managed memory, with the calls it may fail (graph capture among them where asked).
struct countdown_rig {
  std::size_t words = 0, chunk = 0, slack;
  managed_ledger ledger;
  fault_injection_adaptor fx;
  stream s;
  std::vector<op_kind> kinds{op_kind::allocate_device,
                             op_kind::allocate_pinned,
                             op_kind::allocate_pageable,
                             op_kind::create_physical,
                             op_kind::map,
                             op_kind::set_access,
                             op_kind::copy,
                             op_kind::allocate_managed,
                             op_kind::prefetch};
  std::size_t free0;

  countdown_rig(executor& ex, bool capture)
      : slack(memory_slack(ex, 0)),
        ledger(ex),
        fx(ledger),
        s(fx, 0),
        free0(fx.device_memory(0).free) {
    const std::size_t gran = ex.granularity(0);
    const auto granules = static_cast<std::size_t>(*rc::gen::inRange(2, 5));
    words = granules * gran / word - *rc::gen::inRange<std::size_t>(0, 100);
    chunk = gran * *rc::gen::inRange<std::size_t>(1, 3);
    if (capture) kinds.insert(kinds.end(), {op_kind::begin_capture, op_kind::end_capture});
  }

  /// Runs `op` with the Nth call of `kinds` armed to fail; asserts that it threw exactly when the
  /// fault fired, and returns whether it did.
  template <class Op>
  bool armed(std::size_t n, Op&& op) {
    const offloadkit::testing::armed_outcome o =
        offloadkit::testing::run_armed(fx, kinds, n, std::forward<Op>(op));
    RC_ASSERT(o.threw == o.fired);
    return o.fired;
  }
};

}  // namespace

/// Fault injection in a swap: for N = 0, 1, 2, ... the Nth allocation, mapping or copy of a swap
/// fails. The swap throws exactly when a fault fired and leaves
/// the region going out active, partial or paused and the region coming in paused, partial or
/// active, both at their addresses, within the memory of the two ends; a retry of the swap
/// succeeds, the resumed region holds its contents and replays its graph, and once both are gone
/// nothing is left allocated.
void fault_countdown_swap(executor& ex, const region_implementation& impl) {
  countdown_rig rig(ex, false);
  const std::size_t words = rig.words, chunk = rig.chunk, slack = rig.slack, free0 = rig.free0;
  const std::uint32_t seed_out = *rc::gen::arbitrary<std::uint32_t>();
  const std::uint32_t seed_in = *rc::gen::arbitrary<std::uint32_t>();
  managed_ledger& ledger = rig.ledger;
  fault_injection_adaptor& fx = rig.fx;
  stream& s = rig.s;
  for (std::size_t n = 0;; ++n) {
    RC_ASSERT(n < 10000u);
    auto out = make_region(impl, fx, region_config{words * word, 0, chunk});
    auto in = make_region(impl, fx, region_config{words * word, 0, chunk});
    void* const address_out = out->data();
    void* const address_in = in->data();
    write_pattern(fx, out->data(), words, seed_out, s);
    write_pattern(fx, in->data(), words, seed_in, s);
    const graph_id g = in->register_graph(affine_graph(fx, words), s);
    in->pause(s);
    s.synchronize();
    const std::size_t free_one = fx.device_memory(0).free;

    const bool fired = rig.armed(n, [&] { out->swap_with(*in, pause_mode::preserve, s); });
    if (fired) {
      const region_state so = out->state(), si = in->state();
      RC_LOG() << "fault at call " << n << " left the regions " << to_string(so) << " and "
               << to_string(si) << "\n";
      if (impl.caps.address_stable) {
        RC_ASSERT(same_address(out->data(), address_out));
        RC_ASSERT(same_address(in->data(), address_in));
      }
      // Both ends held one region's memory; a failed swap holds no more than both regions.
      const std::size_t f = fx.device_memory(0).free;
      RC_ASSERT(f + slack >= free_one - out->footprint() - in->footprint());
      if (so != region_state::paused || si != region_state::active) {
        out->swap_with(*in, pause_mode::preserve, s);  // the retry finishes the job
      }
    }
    RC_ASSERT(out->state() == region_state::paused);
    RC_ASSERT(in->state() == region_state::active);
    in->replay(g, s);
    assert_contents(fx, *in, words, seed_in, 1, s);
    if (impl.caps.releases_memory) RC_ASSERT(free_memory_settles_near(fx, 0, free_one, slack));
    in.reset();
    out.reset();
    RC_ASSERT(ledger.live_bytes() == 0u);
    if (impl.caps.releases_memory || ex.kind() == backend::host) {
      RC_ASSERT(free_memory_settles_near(fx, 0, free0, slack));
    }
    if (!fired) break;  // the swap ran to its end without reaching call n
  }
}

void fault_countdown(executor& ex, const region_implementation& impl, phase which) {
  countdown_rig rig(ex, true);
  const std::size_t words = rig.words, chunk = rig.chunk, slack = rig.slack, free0 = rig.free0;
  const std::uint32_t seed = *rc::gen::arbitrary<std::uint32_t>();
  managed_ledger& ledger = rig.ledger;
  fault_injection_adaptor& fx = rig.fx;
  stream& s = rig.s;
  for (std::size_t n = 0;; ++n) {
    RC_ASSERT(n < 10000u);
    auto r = make_region(impl, fx, region_config{words * word, 0, chunk});
    void* const address = r->data();
    write_pattern(fx, r->data(), words, seed, s);
    const graph_id g = r->register_graph(affine_graph(fx, words), s);
    s.synchronize();
    const std::size_t free_active = fx.device_memory(0).free;
    if (which == phase::resume) r->pause(s);

    const bool fired = rig.armed(n, [&] {
      if (which == phase::pause) {
        r->pause(s);
      } else {
        r->resume(s);
      }
    });

    if (fired) {
      // A defined state, on the same address, within the memory the two ends of the transition
      // hold.
      const region_state st = r->state();
      RC_LOG() << "fault at call " << n << " left the region " << to_string(st) << "\n";
      if (which == phase::pause) {
        RC_ASSERT(st == region_state::active || st == region_state::partial);
      } else {
        RC_ASSERT(st == region_state::paused || st == region_state::partial);
      }
      if (impl.caps.address_stable) RC_ASSERT(same_address(r->data(), address));
      const std::size_t f = fx.device_memory(0).free;
      RC_ASSERT(f + slack >= free_active && f <= free0 + slack);
      // The retry succeeds.
      if (which == phase::pause) {
        r->pause(s);
      } else {
        r->resume(s);
      }
    }
    // From here on the region must behave as if nothing had failed: nothing leaked, nothing lost.
    if (which == phase::pause) {
      RC_ASSERT(r->state() == region_state::paused);
      if (impl.caps.releases_memory) RC_ASSERT(free_memory_settles_near(fx, 0, free0, slack));
      r->resume(s);
    }
    RC_ASSERT(r->state() == region_state::active);
    s.synchronize();
    // A region that releases nothing on pause (managed memory) leaves residency to the driver,
    // which may keep or drop device pages across a migration; its leaks show once it is gone.
    if (impl.caps.releases_memory) RC_ASSERT(free_memory_settles_near(fx, 0, free_active, slack));
    r->replay(g, s);
    assert_contents(fx, *r, words, seed, 1, s);
    r->pause(s);
    if (impl.caps.releases_memory) RC_ASSERT(free_memory_settles_near(fx, 0, free0, slack));
    r.reset();
    RC_ASSERT(ledger.live_bytes() == 0u);
    if (impl.caps.releases_memory || ex.kind() == backend::host) {
      RC_ASSERT(free_memory_settles_near(fx, 0, free0, slack));
    }
    if (!fired) break;  // the operation ran to its end without reaching call n
  }
}

}  // namespace offloadkit::region::testing
