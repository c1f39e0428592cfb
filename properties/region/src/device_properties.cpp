// Regions on a device other than the first, and two regions on two devices at once.
#include "region_properties.hpp"

namespace offloadkit::region::testing {

namespace {

/// A region on a device other than the first stays there across pause and resume, refuses another
/// device's stream, and its pause never moves another device's memory.
void one_region_on_another_device(executor& ex, const region_implementation& impl, int device) {
  const std::size_t gran = ex.granularity(device);
  const std::size_t words = *rc::gen::inRange<std::size_t>(1, 3) * gran / word - 3;
  const std::uint32_t seed = *rc::gen::arbitrary<std::uint32_t>();
  const std::size_t slack = memory_slack(ex, 0);
  stream s(ex, device);
  auto r = make_region(impl, ex, region_config{words * word, device, gran});
  RC_ASSERT(r->device() == device);
  write_pattern(ex, r->data(), words, seed, s);
  const std::size_t other_free = ex.device_memory(0).free;
  const std::size_t free_active = ex.device_memory(device).free;
  r->pause(s);
  if (impl.caps.releases_memory) {
    RC_ASSERT(ex.device_memory(device).free >= free_active + r->size() - memory_slack(ex, device));
  }
  // Pausing a region on one device never moves another device's memory.
  RC_ASSERT(free_memory_settles_near(ex, 0, other_free, slack));
  // Work on another device in between, then resume: the region still comes back on its own.
  stream other(ex, 0);
  RC_ASSERT_THROWS_AS(r->resume(other), out_of_range);
  RC_ASSERT(r->state() == region_state::paused);
  buffer scratch(ex, memory_kind::device, gran, 0);
  ex.fill(scratch.data(), 0, gran, other);
  other.synchronize();
  r->resume(s);
  RC_ASSERT(ex.classify(r->data()).device == device);
  assert_contents(ex, *r, words, seed, 0, s);
}

/// One region on device 0 and one on `other`, paused (in either mode) and resumed interleaved from
/// one thread: after every step each device's free memory is what its own region's state says
/// (the other region's steps never move it), and after every resume a replay of the region's graph
/// runs on it and its contents are right (until its first discarding pause: what pause modes do
/// to the contents is model_based's to check).
void two_regions_at_once(executor& ex, const region_implementation& impl, int other) {
  const std::array<int, 2> device{0, other};
  // On a GPU, whose free memory is compared within two granules, regions of four granules or more,
  // so that a paused region shows; any size on the host back end, which accounts exactly.
  const bool gpu = ex.kind() == backend::cuda;
  std::array<shape, 2> sh{};
  std::array<std::uint32_t, 2> seed{};
  for (std::size_t i = 0; i < 2; ++i) {
    sh[i] = gen_shape(ex, device[i], gpu ? 8 : 2);
    const std::size_t gran = ex.granularity(device[i]);
    if (gpu && sh[i].words * word < 4 * gran) sh[i] = {4 * gran / word - 1, gran};
    // A partial last granule: what a paused region keeps beyond its size is release_is_real's.
    if (sh[i].words * word % gran == 0) --sh[i].words;
    seed[i] = *rc::gen::arbitrary<std::uint32_t>();
  }
  // One untimed round per device first: a GPU loads kernels (and their device memory) on each
  // device at their first use there, which would read as memory a region holds.
  for (std::size_t i = 0; i < 2; ++i) {
    stream s(ex, device[i]);
    auto warm = make_region(impl, ex, region_config{sh[i].words * word, device[i], 0});
    write_pattern(ex, warm->data(), sh[i].words, seed[i], s);
    warm->replay(warm->register_graph(affine_graph(ex, sh[i].words), s), s);
    warm->pause(s);
    warm->resume(s);
    s.synchronize();
  }
  std::array<stream, 2> s{stream(ex, device[0]), stream(ex, device[1])};
  std::array<std::size_t, 2> slack{memory_slack(ex, device[0]), memory_slack(ex, device[1])};
  const std::vector<std::size_t> before = offloadkit::testing::free_per_device(ex);
  // Made in a random order; making one never moves the other device's memory.
  std::array<std::unique_ptr<offload_region>, 2> r;
  const std::array<pause_mode, 2> fixed_mode{gen_region_mode(impl), gen_region_mode(impl)};
  const std::size_t first = *rc::gen::inRange<std::size_t>(0, 2);
  for (const std::size_t i : {first, 1 - first}) {
    const std::vector<std::size_t> prior = offloadkit::testing::free_per_device(ex);
    r[i] = make_region(impl, ex, region_config{sh[i].words * word, device[i], sh[i].chunk_bytes},
                       fixed_mode[i]);
    RC_ASSERT(r[i]->device() == device[i]);
    const std::string moved = offloadkit::testing::other_devices_moved(ex, prior, device[i]);
    if (!moved.empty())
      RC_FAIL(offloadkit::detail::concat("making the region on device ", device[i], ": ", moved));
  }
  // A failed check unwinds: queued work on the regions must end before they go.
  const offloadkit::testing::sync_on_exit guard(ex, {s[0], s[1]});
  std::array<graph_id, 2> g{};
  std::array<int, 2> replays{0, 0};
  // False after a discarding pause: what pause modes do to the contents is model_based's.
  std::array<bool, 2> known{true, true};
  for (std::size_t i = 0; i < 2; ++i) {
    write_pattern(ex, r[i]->data(), sh[i].words, seed[i], s[i]);
    g[i] = r[i]->register_graph(affine_graph(ex, sh[i].words), s[i]);
    s[i].synchronize();
  }
  std::array<std::size_t, 2> active{};
  for (std::size_t i = 0; i < 2; ++i) {
    active[i] = ex.device_memory(device[i]).free;
    // Each region's memory is its own device's.
    RC_ASSERT(before[static_cast<std::size_t>(device[i])] + slack[i] >= active[i] + r[i]->size());
  }
  // Each device's free memory follows its own region's state: as measured with both active while
  // its region is active; while paused, at least its size more and no more than before it existed.
  const auto check_devices = [&](const std::string& after) {
    for (std::size_t i = 0; i < 2; ++i) {
      const bool paused = r[i]->state() == region_state::paused && impl.caps.releases_memory;
      const std::size_t least = paused ? active[i] + r[i]->size() : active[i];
      const std::size_t most = paused ? before[static_cast<std::size_t>(device[i])] : active[i];
      const auto within = [&] {
        const std::size_t f = ex.device_memory(device[i]).free;
        return f + slack[i] >= least && f <= most + slack[i];
      };
      bool ok = within();
      for (int k = 0; !ok && ex.kind() == backend::cuda && k < 50; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ok = within();
      }
      if (!ok) {
        RC_FAIL(offloadkit::detail::concat(
            "after ", after, ": device ", device[i], " (its region ", paused ? "paused" : "active",
            ") has ", ex.device_memory(device[i]).free, " bytes free, expected [", least, ", ",
            most, "] within ", slack[i]));
      }
    }
  };
  // Both regions paused and resumed first (in random orders), then random steps.
  struct step {
    std::size_t region;
    int op;  // 0 pause preserving, 1 pause discarding, 2 resume, 3 write, 4 replay
  };
  std::vector<step> steps;
  const std::size_t pause_first = *rc::gen::inRange<std::size_t>(0, 2);
  const std::size_t resume_first = *rc::gen::inRange<std::size_t>(0, 2);
  steps.push_back({pause_first, *rc::gen::inRange(0, 2)});
  steps.push_back({1 - pause_first, *rc::gen::inRange(0, 2)});
  steps.push_back({resume_first, 2});
  steps.push_back({1 - resume_first, 2});
  const int more = *rc::gen::inRange(0, 10);
  for (int k = 0; k < more; ++k) {
    steps.push_back({*rc::gen::inRange<std::size_t>(0, 2), *rc::gen::inRange(0, 5)});
  }
  for (const step& st : steps) {
    const std::size_t i = st.region;
    offload_region& ri = *r[i];
    const bool is_active = ri.state() == region_state::active;
    std::string what;
    if (st.op <= 1 && is_active) {
      const pause_mode mode = !both_modes(impl) ? fixed_mode[i]
                              : st.op == 0      ? pause_mode::preserve
                                                : pause_mode::discard;
      ri.pause(mode, s[i]);
      if (mode == pause_mode::discard) known[i] = false;
      what = offloadkit::detail::concat("pause(", to_string(mode), ") of the region on device ",
                                        device[i]);
    } else if (st.op == 2 && !is_active) {
      ri.resume(s[i]);
      RC_ASSERT(ex.classify(ri.data()).device == device[i]);
      what = offloadkit::detail::concat("resume of the region on device ", device[i]);
      if (known[i]) assert_contents(ex, ri, sh[i].words, seed[i], replays[i], s[i]);
      // Its graph replays on the contents the resume brought back.
      ri.replay(g[i], s[i]);
      ++replays[i];
      if (known[i]) assert_contents(ex, ri, sh[i].words, seed[i], replays[i], s[i]);
    } else if (st.op == 3 && is_active) {
      seed[i] = *rc::gen::arbitrary<std::uint32_t>();
      replays[i] = 0;
      write_pattern(ex, ri.data(), sh[i].words, seed[i], s[i]);
      s[i].synchronize();
      what = offloadkit::detail::concat("a write to the region on device ", device[i]);
    } else if (st.op == 4 && is_active) {
      ri.replay(g[i], s[i]);
      ++replays[i];
      if (known[i]) assert_contents(ex, ri, sh[i].words, seed[i], replays[i], s[i]);
      what = offloadkit::detail::concat("a replay on the region on device ", device[i]);
    } else {
      continue;  // not valid in the region's state
    }
    RC_LOG() << what << "\n";
    check_devices(what);
  }
  for (std::size_t i = 0; i < 2; ++i) {
    if (r[i]->state() != region_state::active) r[i]->resume(s[i]);
    if (known[i]) assert_contents(ex, *r[i], sh[i].words, seed[i], replays[i], s[i]);
  }
}

}  // namespace

/// A region on a device d other than the first on its own, then beside a region on device 0.
void multi_device(executor& ex, const region_implementation& impl) {
  const int devices = ex.device_count();
  if (devices < 2) RC_SUCCEED("one device: nothing to check");
  const int device = *rc::gen::inRange(1, devices);
  one_region_on_another_device(ex, impl, device);
  two_regions_at_once(ex, impl, device);
}

}  // namespace offloadkit::region::testing
