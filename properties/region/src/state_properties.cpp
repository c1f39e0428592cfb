// Calls in the wrong state, neighbouring allocations left alone, and the managed region's
// release behaviour.
#include "region_properties.hpp"

namespace offloadkit::region::testing {

void state_errors(executor& base, const region_implementation& impl) {
  managed_ledger ex(base);
  const shape sh = gen_shape(ex, 0, 2);
  const std::uint32_t seed = *rc::gen::arbitrary<std::uint32_t>();
  const std::size_t slack = memory_slack(ex, 0);
  stream s(ex, 0);
  RC_ASSERT_THROWS_AS(impl.make(ex, region_config{0, 0, 0}), out_of_range);
  RC_ASSERT_THROWS_AS(impl.make(ex, region_config{word, ex.device_count(), 0}), out_of_range);
  RC_ASSERT_THROWS_AS(impl.make(ex, region_config{word, -1, 0}), out_of_range);
  // One untimed round first: a GPU loads kernels (and their device memory) on first use, which
  // would read as memory the destroyed region kept.
  {
    auto warm = make_region(impl, ex, region_config{sh.words * word, 0, sh.chunk_bytes});
    write_pattern(ex, warm->data(), sh.words, seed, s);
    (void)warm->register_graph(affine_graph(ex, sh.words), s);
    warm->pause(s);
    warm->resume(s);
    assert_contents(ex, *warm, sh.words, seed, 0, s);
    warm->pause(s);
  }
  const std::size_t free0 = ex.device_memory(0).free;
  auto r = make_region(impl, ex, region_config{sh.words * word, 0, sh.chunk_bytes});
  write_pattern(ex, r->data(), sh.words, seed, s);
  const graph_id g = r->register_graph(affine_graph(ex, sh.words), s);
  RC_ASSERT_THROWS_AS(r->resume(s), state_error);
  RC_ASSERT_THROWS_AS(r->replay(g + 100, s), out_of_range);
  RC_ASSERT(r->state() == region_state::active);
  if (!both_modes(impl)) {
    // Created for preserving pauses: a discarding one is not offered, and changes nothing.
    void* const address = r->data();
    RC_ASSERT_THROWS_AS(r->pause(pause_mode::discard, s), unsupported_error);
    RC_ASSERT(r->state() == region_state::active);
    RC_ASSERT(same_address(r->data(), address));
    assert_contents(ex, *r, sh.words, seed, 0, s);
  }
  r->pause(s);
  RC_ASSERT_THROWS_AS(r->pause(s), state_error);
  RC_ASSERT_THROWS_AS(r->pause(pause_mode::discard, s), state_error);
  RC_ASSERT_THROWS_AS(r->replay(g, s), state_error);
  RC_ASSERT_THROWS_AS(r->register_graph(affine_graph(ex, sh.words), s), state_error);
  RC_ASSERT(r->state() == region_state::paused);
  r->resume(s);
  assert_contents(ex, *r, sh.words, seed, 0, s);  // the refused calls changed nothing
  // Destroying a paused region frees everything it held: its managed memory by the ledger, the
  // rest by the device's free memory. The driver's figure cannot judge managed memory on a GPU:
  // it counts managed pages in chunks of its own (64 and 128 MiB on an H100) and gives them back
  // when it decides.
  r->pause(s);
  r.reset();
  RC_ASSERT(ex.live_bytes() == 0u);
  if (!impl.caps.managed_memory || base.kind() == backend::host) {
    RC_ASSERT(free_memory_settles_near(ex, 0, free0, slack));
  }
}

/// Regions whose allocations touch, as cudaMalloc places them: a region's copies stay inside
/// each of its allocations (a copy spanning two touching allocations fails on a GPU and on the
/// host back end), and a pause or resume of one region never changes its neighbours. The host
/// back end's default heap never places allocations next to each other, so there the property
/// runs on a host executor of the same shape with adjacent_allocations. Every case has a region
/// of two to four whole-granule chunks (whose allocations, and staging buffers, touch), and every
/// region is paused and resumed at least once, so that a copy merged across two allocations
/// cannot go unexercised however the rest is drawn.
void adjacent_allocations(executor& ex, const region_implementation& impl) {
  std::unique_ptr<host_executor> adjacent;
  executor* run = &ex;
  if (const auto* host = dynamic_cast<const host_executor*>(&ex);
      host != nullptr && !host->options().adjacent_allocations) {
    host_executor_options o = host->options();
    o.adjacent_allocations = true;
    adjacent = std::make_unique<host_executor>(o);
    run = adjacent.get();
  }
  executor& x = *run;
  const int count = *rc::gen::inRange(2, 4);
  stream s(x, 0);
  std::vector<std::unique_ptr<offload_region>> regions;
  // A failed check unwinds: the patterns queued on `s` must be written before the regions go.
  const offloadkit::testing::sync_on_exit guard(x, {s});
  std::vector<std::size_t> words;
  std::vector<std::uint32_t> seeds;
  const std::size_t gran = x.granularity(0);
  const int several = *rc::gen::inRange(0, count);  // the region of several whole chunks
  for (int i = 0; i < count; ++i) {
    const shape sh = i == several ? shape{*rc::gen::inRange<std::size_t>(2, 5) * gran / word, gran}
                                  : gen_shape(x, 0, 4);
    regions.push_back(make_region(impl, x, region_config{sh.words * word, 0, sh.chunk_bytes}));
    words.push_back(sh.words);
    seeds.push_back(*rc::gen::arbitrary<std::uint32_t>());
    write_pattern(x, regions.back()->data(), sh.words, seeds.back(), s);
  }
  // Every region once, in an order of its own, then regions drawn at random.
  std::vector<std::size_t> order(regions.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (std::size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[*rc::gen::inRange<std::size_t>(0, i)]);
  }
  const int more = *rc::gen::inRange(0, 5);
  for (int k = 0; k < more; ++k) {
    order.push_back(static_cast<std::size_t>(*rc::gen::inRange(0, count)));
  }
  for (std::size_t step = 0; step < order.size(); ++step) {
    const std::size_t i = order[step];
    RC_LOG() << "step " << step << ": pause and resume region " << i << "\n";
    regions[i]->pause(s);
    regions[i]->resume(s);
    for (std::size_t j = 0; j < regions.size(); ++j)
      assert_contents(x, *regions[j], words[j], seeds[j], 0, s);
  }
  s.synchronize();
}

/// A managed region's documented release (unified_region.hpp): the allocation stays, a paused
/// region stays readable (no fault), and on the host back end device memory never moves.
void unified_release_behaviour(executor& ex, const region_implementation& impl) {
  const std::size_t gran = ex.granularity(0);
  const std::size_t words = *rc::gen::inRange<std::size_t>(1, 3) * gran / word - 1;
  const std::uint32_t seed = *rc::gen::arbitrary<std::uint32_t>();
  stream s(ex, 0);
  const std::size_t free0 = ex.device_memory(0).free;
  const pause_mode mode = *rc::gen::arbitrary<bool>() ? pause_mode::discard : pause_mode::preserve;
  auto r = make_region(impl, ex, region_config{words * word, 0, 0}, mode);
  void* const address = r->data();
  write_pattern(ex, r->data(), words, seed, s);
  s.synchronize();
  const std::size_t free_active = ex.device_memory(0).free;
  r->pause(mode, s);
  const std::size_t free_paused = ex.device_memory(0).free;
  RC_LOG() << "free: before " << free0 << ", active " << free_active << ", paused " << free_paused
           << "\n";
  if (ex.kind() == backend::host) {
    RC_ASSERT(free_active == free0);
    RC_ASSERT(free_paused == free0);
  }
  // Paused, yet readable: managed pages migrate on access instead of faulting. Even a discarding
  // pause keeps the contents.
  assert_contents(ex, *r, words, seed, 0, s);
  RC_ASSERT(r->state() == region_state::paused);
  r->resume(s);
  assert_contents(ex, *r, words, seed, 0, s);
  if (impl.caps.address_stable) RC_ASSERT(same_address(r->data(), address));
}

}  // namespace offloadkit::region::testing
