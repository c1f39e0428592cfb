// Pause and resume cycles: memory really released, graphs replayed after a resume, swap_with
// keeping both regions, and many cycles creating nothing new.
#include "region_properties.hpp"

namespace offloadkit::region::testing {

// ---- release, graphs, cycles, errors, devices ---------------------------------------------------

void release_is_real(executor& ex, const region_implementation& impl) {
  const int device = ex.device_count() - 1;
  const std::size_t gran = ex.granularity(device);
  const std::size_t words = *rc::gen::inRange<std::size_t>(1, 4) * gran / word;
  const std::uint32_t seed = *rc::gen::arbitrary<std::uint32_t>();
  const std::size_t slack = memory_slack(ex, device);
  stream s(ex, device);
  const std::size_t free0 = ex.device_memory(device).free;
  auto r = make_region(impl, ex, region_config{words * word, device, gran});
  write_pattern(ex, r->data(), words, seed, s);
  s.synchronize();
  const std::size_t free_active = ex.device_memory(device).free;
  RC_ASSERT(free0 >= free_active + r->size() - slack);
  r->pause(s);
  const std::size_t free_paused = ex.device_memory(device).free;
  RC_LOG() << "free: before " << free0 << ", active " << free_active << ", paused " << free_paused
           << "\n";
  RC_ASSERT(free_paused >= free_active + r->size() - slack);
  RC_ASSERT(near(free_paused, free0, slack));
  r->resume(s);
  s.synchronize();
  RC_ASSERT(free_memory_settles_near(ex, device, free_active, slack));
  assert_contents(ex, *r, words, seed, 0, s);
  r.reset();
  RC_ASSERT(free_memory_settles_near(ex, device, free0, slack));
}

/// Graphs survive pause/resume cycles: one registered before the cycles and one registered after
/// them both replay on the region's current contents; after the first is unregistered the second
/// still replays, and the first is refused. An address-stable region never re-captures.
void graph_replay_after_resume(executor& ex, const region_implementation& impl) {
  const shape sh = gen_shape(ex, 0, 3);
  const std::uint32_t seed = *rc::gen::arbitrary<std::uint32_t>();
  const int before = *rc::gen::inRange(0, 3);
  const int after = *rc::gen::inRange(1, 4);
  const int cycles = *rc::gen::inRange(1, 4);
  const int later = *rc::gen::inRange(1, 3);
  stream s(ex, 0);
  auto r = make_region(impl, ex, region_config{sh.words * word, 0, sh.chunk_bytes});
  void* const address = r->data();
  write_pattern(ex, r->data(), sh.words, seed, s);
  const graph_id g = r->register_graph(affine_graph(ex, sh.words), s);
  for (int i = 0; i < before; ++i) r->replay(g, s);
  for (int c = 0; c < cycles; ++c) {
    r->pause(s);
    r->resume(s);
  }
  for (int i = 0; i < after; ++i) r->replay(g, s);
  assert_contents(ex, *r, sh.words, seed, before + after, s);
  if (impl.caps.address_stable) {
    RC_ASSERT(same_address(r->data(), address));
    RC_ASSERT(r->captures() == 1u);  // replayed as captured, never re-captured
  }
  // A second graph, registered after the cycles, outlives the first.
  const graph_id g2 = r->register_graph(affine_graph(ex, sh.words), s);
  RC_ASSERT(g2 != g);
  r->unregister_graph(g);
  bool refused = false;
  try {
    r->replay(g, s);
  } catch (const out_of_range&) {
    refused = true;
  }
  // A replay that was not refused is queued work on the region: it ends before the region does.
  s.synchronize();
  RC_ASSERT(refused);
  r->pause(s);
  r->resume(s);
  for (int i = 0; i < later; ++i) r->replay(g2, s);
  assert_contents(ex, *r, sh.words, seed, before + after + later, s);
}

/// Swap: two regions trade places back and forth (one active, one paused, each with its own
/// pattern and a graph registered before the first swap), preserving. After every swap the resumed
/// region is active at its address, the paused one paused, the device holds what it holds with
/// that region resumed and the other paused by plain resume and pause (where pause releases
/// memory), and work issued to the stream right after the swap (a graph
/// replay, then a read, with no host wait between) sees the resumed region's contents with every
/// replay it has had, across any number of swaps.
void swap_keeps_both(executor& ex, const region_implementation& impl) {
  const shape sa = gen_shape(ex, 0, 3), sb = gen_shape(ex, 0, 3);
  const std::uint32_t seeds[2] = {*rc::gen::arbitrary<std::uint32_t>(),
                                  *rc::gen::arbitrary<std::uint32_t>()};
  const int swaps = *rc::gen::inRange(1, 6);
  const std::size_t slack = memory_slack(ex, 0);
  stream s(ex, 0);
  std::unique_ptr<offload_region> r[2] = {
      make_region(impl, ex, region_config{sa.words * word, 0, sa.chunk_bytes}),
      make_region(impl, ex, region_config{sb.words * word, 0, sb.chunk_bytes})};
  const std::size_t words[2] = {sa.words, sb.words};
  void* const address[2] = {r[0]->data(), r[1]->data()};
  graph_id g[2];
  int replays[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    write_pattern(ex, r[i]->data(), words[i], seeds[i], s);
    g[i] = r[i]->register_graph(affine_graph(ex, words[i]), s);
  }
  // The device memory held with each region active and the other paused, by plain pause and
  // resume: what a swap must leave.
  std::size_t free_with[2];
  r[1]->pause(s);
  s.synchronize();
  free_with[0] = ex.device_memory(0).free;
  r[0]->pause(s);
  r[1]->resume(s);
  s.synchronize();
  free_with[1] = ex.device_memory(0).free;
  r[1]->pause(s);
  r[0]->resume(s);
  int active = 0;
  for (int k = 0; k < swaps; ++k) {
    const int out = active, in = 1 - active;
    RC_LOG() << "swap " << k << ": region " << out << " out, region " << in << " in\n";
    r[out]->swap_with(*r[in], pause_mode::preserve, s);
    RC_ASSERT(r[out]->state() == region_state::paused);
    RC_ASSERT(r[in]->state() == region_state::active);
    if (impl.caps.address_stable) RC_ASSERT(same_address(r[in]->data(), address[in]));
    r[in]->replay(g[in], s);
    ++replays[in];
    assert_contents(ex, *r[in], words[in], seeds[in], replays[in], s);
    if (impl.caps.releases_memory) RC_ASSERT(free_memory_settles_near(ex, 0, free_with[in], slack));
    active = in;
  }
  // The region swapped out last comes back with what it held.
  const int last_out = 1 - active;
  r[active]->swap_with(*r[last_out], pause_mode::preserve, s);
  assert_contents(ex, *r[last_out], words[last_out], seeds[last_out], replays[last_out], s);
  s.synchronize();
}

void many_cycles(executor& ex, const region_implementation& impl) {
  const int cycles = 200;
  counting_adaptor cx(ex);
  const std::size_t gran = ex.granularity(0);
  const std::size_t words = 2 * gran / word - 5;
  const std::size_t slack = memory_slack(ex, 0);
  stream s(cx, 0);
  const std::size_t free0 = cx.device_memory(0).free;
  auto r = make_region(impl, cx, region_config{words * word, 0, gran});
  write_pattern(cx, r->data(), words, 7, s);
  s.synchronize();
  const std::size_t free_active = cx.device_memory(0).free;
  std::optional<counting_adaptor::counts> after_first;
  // The same rule for what the code creates through CUDA itself, where the interposer counts it:
  // pinned allocations and reservations. A region that gives its memory back creates device
  // memory (physical handles, or allocations) on every resume, by its contract.
  std::optional<driver_counts> driver_after_first;
  for (int c = 0; c < cycles; ++c) {
    r->pause(c % 10 == 9 && both_modes(impl) ? pause_mode::discard : pause_mode::preserve, s);
    RC_ASSERT(free_memory_settles_near(cx, 0, free0, slack));
    const auto n = cx.snapshot();
    // Every mapping made is undone while paused.
    RC_ASSERT(n.calls_of(op_kind::map) == n.calls_of(op_kind::unmap));
    if (!after_first) {
      after_first = n;
      driver_after_first = read_driver_counts();
    } else {
      RC_ASSERT(n.allocations_of(memory_kind::pinned) ==
                after_first->allocations_of(memory_kind::pinned));
      RC_ASSERT(n.calls_of(op_kind::reserve) == after_first->calls_of(op_kind::reserve));
      if (const auto now = read_driver_counts(); driver_after_first && now) {
        const std::string grew = driver_growth(*driver_after_first, *now,
                                               offloadkit::testing::driver_pinned_allocations |
                                                   offloadkit::testing::driver_reservations);
        if (!grew.empty()) RC_FAIL("pause of cycle " + std::to_string(c) + ": " + grew);
      }
    }
    r->resume(s);
    if (c % 10 == 9) write_pattern(cx, r->data(), words, 7, s);
    s.synchronize();
    RC_ASSERT(free_memory_settles_near(cx, 0, free_active, slack));
  }
  assert_contents(cx, *r, words, 7, 0, s);
  r.reset();
  RC_ASSERT(free_memory_settles_near(cx, 0, free0, slack));
}

}  // namespace offloadkit::region::testing
