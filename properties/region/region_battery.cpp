// The region battery's properties and the list of them for an implementation descriptor.
// Contents are written and updated on the device with the pattern kernels (patterns.hpp) and read
// back through a pinned buffer; device memory is judged by the executor's device_memory(), which
// is the driver's figure on the cuda back end. What a property checks follows the descriptor's
// capabilities, never the implementation's name.
#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/testing/battery_list.hpp"
#include "offloadkit/testing/device_memory.hpp"
#include "offloadkit/testing/driver_instruments.hpp"
#include "offloadkit/testing/fixed_cases.hpp"
#include "offloadkit/testing/region_battery_impls.hpp"
#include "offloadkit/testing/sync_on_exit.hpp"
#include "offloadkit/workloads/region_patterns.hpp"

namespace offloadkit::region {
namespace {

using testing::region_implementation;

constexpr std::size_t word = sizeof(std::uint32_t);

/// A region from the descriptor's factory, to be paused in `mode`: created with that mode where
/// the profile fixes the mode per allocation, and given offloadkit's graphs where the profile says
/// the implementation keeps none. What the instance says of its address agrees with what the
/// descriptor declares, which is what the address checks below go by.
std::unique_ptr<offload_region> make_region(const region_implementation& impl, executor& ex,
                                            region_config c,
                                            pause_mode mode = pause_mode::preserve) {
  if (impl.caps.pause_modes == testing::region_pause_modes::fixed_per_allocation) {
    c.fixed_mode = mode;
  }
  auto r = impl.make(ex, c);
  RC_ASSERT(r->address_stable() == impl.caps.address_stable);
  if (impl.caps.graphs == testing::region_graphs::none) r = with_executor_graphs(ex, std::move(r));
  return r;
}

/// Whether one region may be paused in both modes.
bool both_modes(const region_implementation& impl) {
  return impl.caps.pause_modes == testing::region_pause_modes::both;
}

/// The mode of a region whose pauses the case draws: drawn once per region where the profile
/// fixes it per allocation; `preserve` otherwise (the draws are then per pause).
pause_mode gen_region_mode(const region_implementation& impl) {
  if (both_modes(impl)) return pause_mode::preserve;
  return *rc::gen::element(pause_mode::preserve, pause_mode::discard);
}

using testing::driver_counts;
using testing::driver_delays;
using testing::driver_growth;
using testing::free_memory_settles_near;
using testing::memory_slack;
using testing::near;
using testing::read_driver_counts;

bool same_address(const void* a, const void* b) { return a == b; }

std::vector<std::uint32_t> read_words(executor& ex, const void* p, std::size_t words,
                                      stream_ref s) {
  buffer pinned(ex, memory_kind::pinned, words * word);
  ex.copy(pinned.data(), p, words * word, s);
  ex.synchronize(s);
  std::vector<std::uint32_t> out(words);
  std::memcpy(out.data(), pinned.data(), words * word);
  return out;
}

/// Index of the first word that differs from affine^k(pattern(seed)), or words when none does.
std::size_t first_mismatch(const std::vector<std::uint32_t>& got, std::uint32_t seed, int k) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    std::uint32_t w = pattern_word(seed, i);
    for (int j = 0; j < k; ++j) w = affine_word(w);
    if (got[i] != w) return i;
  }
  return got.size();
}

void assert_contents(executor& ex, const offload_region& r, std::size_t words, std::uint32_t seed,
                     int k, stream_ref s) {
  const auto got = read_words(ex, r.data(), words, s);
  const std::size_t bad = first_mismatch(got, seed, k);
  if (bad != words) {
    RC_FAIL(offloadkit::detail::concat("word ", bad, " of ", words, " is ", got[bad],
                                       ", expected pattern seed ", seed, " after ", k, " replays"));
  }
}

capture_fn affine_graph(executor& ex, std::size_t words) {
  return [&ex, words](void* base, stream_ref s) { apply_affine(ex, base, words, s); };
}

/// Region sizes: from one word to a few granules, with a chunk of one granule, of the whole
/// region, or of several granules that does not divide the region (a partial last chunk, whose
/// size is given a little under its granules so that the rounding up happens too). Single- and
/// multi-chunk regions, a partial last granule and a partial last chunk all occur.
struct shape {
  std::size_t words;
  std::size_t chunk_bytes;
};

shape gen_shape(executor& ex, int device, int max_granules) {
  const std::size_t gran = ex.granularity(device);
  const int granules = *rc::gen::inRange(1, max_granules + 1);
  const std::size_t tail = *rc::gen::inRange<std::size_t>(0, gran / word);
  std::size_t words = (granules * gran) / word - tail;
  if (*rc::gen::inRange(0, 8) == 0) words = *rc::gen::inRange<std::size_t>(1, 64);
  words = std::max<std::size_t>(words, 1);
  const int chunking = *rc::gen::inRange(0, 3);
  if (chunking == 0) return {words, gran};
  if (chunking == 1) return {words, 0};
  // k granules per chunk with k not dividing the region's granules where there are three or more.
  const std::size_t region_granules = (words * word + gran - 1) / gran;
  std::size_t k = 2;
  while (k < region_granules && region_granules % k == 0) ++k;
  return {words, k * gran - *rc::gen::inRange<std::size_t>(0, gran)};
}

// ---- model-based --------------------------------------------------------------------------------

/// A run of words written by one write_pattern and updated by `k` replays since; unknown after a
/// discarding pause.
struct segment {
  std::size_t begin, end;
  std::size_t origin;
  std::uint32_t seed;
  int k;
  bool known;
};

struct region_model {
  bool active = true;
  std::size_t words = 0;
  std::vector<segment> segments;  // sorted, covering [0, words)
  /// The region's one pause mode, where the profile fixes it per allocation.
  std::optional<pause_mode> fixed_mode;
};

/// The region under test driven from two streams of its device. The harness orders what the
/// caller must order, as a caller would: its own work (writes, replays, reads) before anything on
/// the other stream, and a resume before the caller's own work on the other stream ("work issued
/// to s afterwards sees" the contents, on s only). A pause or resume on the other stream after a
/// resume it leaves unordered: that is the region's own work, which the region must order. Delays
/// on a resume's stream keep that work pending while the next command runs.
struct region_sut {
  executor* ex;
  delay_adaptor* dx;
  std::unique_ptr<offload_region> region;
  stream streams[2];
  event user_done[2];    ///< recorded after the caller's own work on each stream
  event resume_done[2];  ///< recorded after a resume on each stream
  bool user_pending[2] = {false, false};
  bool resume_pending[2] = {false, false};
  void* address;
  graph_id graph;
  bool address_stable;  ///< declared by the descriptor
  /// Declared synchronous: the caller does not order its work on the other stream after a resume.
  bool synchronous;

  /// The stream a command runs on, ordered after what the caller must order before it.
  stream_ref on(int i, bool region_call) {
    const int other = 1 - i;
    if (user_pending[other]) {
      ex->wait(user_done[other].ref(), streams[i].ref());
      user_pending[other] = false;
    }
    if (!region_call && resume_pending[other]) {
      ex->wait(resume_done[other].ref(), streams[i].ref());
      resume_pending[other] = false;
    }
    return streams[i].ref();
  }
  /// Marks the end of the caller's own work on stream i.
  void user_work_done(int i) {
    ex->record(user_done[i].ref(), streams[i].ref());
    user_pending[i] = true;
  }
  void resumed_on(int i) {
    ex->record(resume_done[i].ref(), streams[i].ref());
    resume_pending[i] = true;
  }
};

using region_command = rc::state::Command<region_model, region_sut>;

int gen_stream() { return *rc::gen::inRange(0, 2); }

void show_stream(std::ostream& os, int i) { os << " on stream " << (i == 0 ? 'a' : 'b'); }

struct write_cmd final : region_command {
  std::size_t begin = 0, end = 0;
  std::uint32_t seed = 0;
  int stream_index = gen_stream();
  explicit write_cmd(const region_model& m) {
    begin = *rc::gen::inRange<std::size_t>(0, m.words);
    end = *rc::gen::inRange<std::size_t>(begin + 1, m.words + 1);
    seed = *rc::gen::arbitrary<std::uint32_t>();
  }
  void checkPreconditions(const region_model& m) const override {
    RC_PRE(m.active && end <= m.words);
  }
  void apply(region_model& m) const override {
    std::vector<segment> out;
    for (const auto& g : m.segments) {
      if (g.end <= begin || g.begin >= end) {
        out.push_back(g);
        continue;
      }
      if (g.begin < begin) out.push_back({g.begin, begin, g.origin, g.seed, g.k, g.known});
      if (g.end > end) out.push_back({end, g.end, g.origin, g.seed, g.k, g.known});
    }
    out.push_back({begin, end, begin, seed, 0, true});
    std::sort(out.begin(), out.end(),
              [](const segment& a, const segment& b) { return a.begin < b.begin; });
    m.segments = std::move(out);
  }
  void run(const region_model&, region_sut& sut) const override {
    const stream_ref s = sut.on(stream_index, false);
    write_pattern(*sut.dx, static_cast<char*>(sut.region->data()) + begin * word, end - begin, seed,
                  s);
    sut.user_work_done(stream_index);
  }
  void show(std::ostream& os) const override {
    os << "write [" << begin << ", " << end << ") seed " << seed;
    show_stream(os, stream_index);
  }
};

struct pause_cmd final : region_command {
  pause_mode mode;
  int stream_index = gen_stream();
  explicit pause_cmd(const region_model& m)
      : mode(m.fixed_mode                   ? *m.fixed_mode
             : *rc::gen::inRange(0, 2) == 1 ? pause_mode::discard
                                            : pause_mode::preserve) {}
  void apply(region_model& m) const override {
    if (!m.active) return;
    m.active = false;
    if (mode == pause_mode::discard)
      for (auto& g : m.segments) g.known = false;
  }
  void run(const region_model& m, region_sut& sut) const override {
    const stream_ref s = sut.on(stream_index, true);
    if (!m.active) {
      RC_ASSERT_THROWS_AS(sut.region->pause(mode, s), state_error);
      RC_ASSERT(sut.region->state() == region_state::paused);
      return;
    }
    sut.region->pause(mode, s);
    RC_ASSERT(sut.region->state() == region_state::paused);
    if (sut.address_stable) RC_ASSERT(same_address(sut.region->data(), sut.address));
  }
  void show(std::ostream& os) const override {
    os << "pause(" << to_string(mode) << ")";
    show_stream(os, stream_index);
  }
};

/// Resumes, with the resume's own work delayed on its stream by up to half a millisecond so that
/// it is still pending when the next command runs on the other stream.
struct resume_cmd final : region_command {
  int stream_index = gen_stream();
  int delay_us =
      *rc::gen::weightedOneOf<int>({{1, rc::gen::just(0)}, {3, rc::gen::inRange(50, 500)}});
  void apply(region_model& m) const override { m.active = true; }
  void run(const region_model& m, region_sut& sut) const override {
    const stream_ref s = sut.on(stream_index, true);
    if (m.active) {
      RC_ASSERT_THROWS_AS(sut.region->resume(s), state_error);
      RC_ASSERT(sut.region->state() == region_state::active);
      return;
    }
    if (delay_us > 0) sut.dx->delay_next(std::chrono::microseconds(delay_us), 1, s);
    sut.region->resume(s);
    sut.dx->clear();
    // A synchronous resume has finished its work: the caller's next work on either stream sees
    // the contents without waiting for it.
    if (!sut.synchronous) sut.resumed_on(stream_index);
    RC_ASSERT(sut.region->state() == region_state::active);
    if (sut.address_stable) {
      RC_ASSERT(same_address(sut.region->data(), sut.address));
      RC_ASSERT(sut.region->captures() == 1u);
    }
  }
  void show(std::ostream& os) const override {
    os << "resume";
    show_stream(os, stream_index);
    if (delay_us > 0) os << " delayed " << delay_us << " us";
  }
};

struct replay_cmd final : region_command {
  int stream_index = gen_stream();
  void apply(region_model& m) const override {
    if (!m.active) return;
    for (auto& g : m.segments) ++g.k;
  }
  void run(const region_model& m, region_sut& sut) const override {
    const stream_ref s = sut.on(stream_index, false);
    if (!m.active) {
      RC_ASSERT_THROWS_AS(sut.region->replay(sut.graph, s), state_error);
      return;
    }
    sut.region->replay(sut.graph, s);
    sut.user_work_done(stream_index);
  }
  void show(std::ostream& os) const override {
    os << "replay graph";
    show_stream(os, stream_index);
  }
};

struct read_cmd final : region_command {
  int stream_index = gen_stream();
  void checkPreconditions(const region_model& m) const override { RC_PRE(m.active); }
  void run(const region_model& m, region_sut& sut) const override {
    const stream_ref s = sut.on(stream_index, false);
    const auto got = read_words(*sut.dx, sut.region->data(), m.words, s);
    for (const auto& g : m.segments) {
      if (!g.known) continue;
      for (std::size_t i = g.begin; i < g.end; ++i) {
        std::uint32_t w = pattern_word(g.seed, i - g.origin);
        for (int j = 0; j < g.k; ++j) w = affine_word(w);
        if (got[i] != w) {
          RC_FAIL(offloadkit::detail::concat("word ", i, " is ", got[i], ", the model says ", w,
                                             " (segment [", g.begin, ", ", g.end, ") seed ", g.seed,
                                             ", ", g.k, " replays)"));
        }
      }
    }
  }
  void show(std::ostream& os) const override {
    os << "read";
    show_stream(os, stream_index);
  }
};

/// The owner reuses the device memory a paused region gave back: it allocates as much, writes it
/// on one stream and frees it. A pause that returned with its own copies still in flight would
/// have them read the owner's bytes.
struct reuse_cmd final : region_command {
  int stream_index = gen_stream();
  void checkPreconditions(const region_model& m) const override { RC_PRE(!m.active); }
  void run(const region_model&, region_sut& sut) const override {
    const stream_ref s = sut.on(stream_index, false);
    buffer reused(*sut.dx, memory_kind::device, sut.region->footprint(), sut.region->device());
    sut.dx->fill(reused.data(), 0xEE, reused.size(), s);
    sut.dx->synchronize(s);
  }
  void show(std::ostream& os) const override {
    os << "reuse the released memory";
    show_stream(os, stream_index);
  }
};

/// A discarding pause, then new contents kept through a preserving pause: a sequence of five
/// steps that the random sequences below hold only by chance.
void discard_then_preserve(executor& ex, const region_implementation& impl, const shape& sh) {
  stream s(ex, 0);
  auto r = make_region(impl, ex, region_config{sh.words * word, 0, sh.chunk_bytes});
  write_pattern(ex, r->data(), sh.words, 1, s);
  r->pause(pause_mode::discard, s);
  r->resume(s);
  write_pattern(ex, r->data(), sh.words, 2, s);
  r->pause(pause_mode::preserve, s);
  r->resume(s);
  assert_contents(ex, *r, sh.words, 2, 0, s);
  s.synchronize();
}

/// Model-based: random writes of sub-ranges, pauses in both modes, resumes, graph replays, reads
/// and reuse of released memory, each on one of two streams, against a model of which words hold
/// which pattern.
void model_based(executor& ex, const region_implementation& impl) {
  const shape sh = gen_shape(ex, 0, 4);
  // The first case of every run checks the fixed sequence too, so that a region whose preserving
  // pause stops copying after a discard fails every run.
  if (*offloadkit::testing::fixed_then_random("region.model_based.discard_then_preserve",
                                              std::vector<int>{1}, rc::gen::just(0)) == 1 &&
      both_modes(impl)) {
    discard_then_preserve(ex, impl, sh);
  }
  region_model m;
  if (!both_modes(impl)) m.fixed_mode = gen_region_mode(impl);
  // The region's own CUDA work (a black box's streams) is held back too, where interposed.
  const driver_delays own_work_delays;
  delay_adaptor dx(ex);
  auto region = make_region(impl, dx, region_config{sh.words * word, 0, sh.chunk_bytes},
                            m.fixed_mode.value_or(pause_mode::preserve));
  region_sut sut{&dx,
                 &dx,
                 std::move(region),
                 {stream(dx, 0), stream(dx, 0)},
                 {event(dx, 0), event(dx, 0)},
                 {event(dx, 0), event(dx, 0)},
                 {false, false},
                 {false, false},
                 nullptr,
                 0,
                 impl.caps.address_stable,
                 impl.caps.streams == testing::region_streams::synchronous};
  sut.address = sut.region->data();
  // Fresh device memory is unspecified: start from a known pattern.
  write_pattern(dx, sut.region->data(), sh.words, 0, sut.streams[0]);
  sut.graph = sut.region->register_graph(affine_graph(dx, sh.words), sut.streams[0]);
  sut.streams[0].synchronize();
  m.words = sh.words;
  m.segments.push_back({0, sh.words, 0, 0, 0, true});
  rc::state::check(m, sut,
                   rc::state::gen::execOneOfWithArgs<write_cmd, pause_cmd, resume_cmd, replay_cmd,
                                                     read_cmd, reuse_cmd>());
  dx.clear();
  sut.streams[0].synchronize();
  sut.streams[1].synchronize();
}

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
        const std::string grew =
            driver_growth(*driver_after_first, *now,
                          testing::driver_pinned_allocations | testing::driver_reservations);
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

/// The managed memory live through it: where a region's memory is managed, the driver decides
/// when freed pages leave the device, so its leaks are counted here rather than read from the
/// device's free memory.
class managed_ledger final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;
  [[nodiscard]] std::size_t live_bytes() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }

 private:
  void* do_allocate_managed(std::size_t bytes, int device) override {
    void* p = executor_adaptor::do_allocate_managed(bytes, device);
    const std::lock_guard<std::mutex> lock(mutex_);
    live_ += bytes;
    return p;
  }
  void do_deallocate_managed(void* p, std::size_t bytes) noexcept override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      live_ -= bytes;
    }
    executor_adaptor::do_deallocate_managed(p, bytes);
  }
  mutable std::mutex mutex_;
  std::size_t live_ = 0;
};

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
  const std::vector<std::size_t> before = testing::free_per_device(ex);
  // Made in a random order; making one never moves the other device's memory.
  std::array<std::unique_ptr<offload_region>, 2> r;
  const std::array<pause_mode, 2> fixed_mode{gen_region_mode(impl), gen_region_mode(impl)};
  const std::size_t first = *rc::gen::inRange<std::size_t>(0, 2);
  for (const std::size_t i : {first, 1 - first}) {
    const std::vector<std::size_t> prior = testing::free_per_device(ex);
    r[i] = make_region(impl, ex, region_config{sh[i].words * word, device[i], sh[i].chunk_bytes},
                       fixed_mode[i]);
    RC_ASSERT(r[i]->device() == device[i]);
    const std::string moved = testing::other_devices_moved(ex, prior, device[i]);
    if (!moved.empty())
      RC_FAIL(offloadkit::detail::concat("making the region on device ", device[i], ": ", moved));
  }
  // A failed check unwinds: queued work on the regions must end before they go.
  const testing::sync_on_exit guard(ex, {s[0], s[1]});
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

/// A region on a device d other than the first on its own, then beside a region on device 0.
void multi_device(executor& ex, const region_implementation& impl) {
  const int devices = ex.device_count();
  if (devices < 2) RC_SUCCEED("one device: nothing to check");
  const int device = *rc::gen::inRange(1, devices);
  one_region_on_another_device(ex, impl, device);
  two_regions_at_once(ex, impl, device);
}

/// A resume's copies are the region's own work: a pause issued right after it on another stream
/// must not copy out (or unmap) before they land. Delays on the resume's stream widen the window
/// past any bounded wait shorter than 60 ms, however fast or slow the build runs.
void cross_stream_order(executor& ex, const region_implementation& impl) {
  const shape sh = gen_shape(ex, 0, 3);
  const std::uint32_t seed = *rc::gen::arbitrary<std::uint32_t>();
  const int delay_us = *rc::gen::inRange(60000, 100000);
  const driver_delays own_work_delays;  // the region's own CUDA work, where interposed
  delay_adaptor dx(ex);
  stream a(dx, 0), b(dx, 0);
  auto r = make_region(impl, dx, region_config{sh.words * word, 0, sh.chunk_bytes});
  write_pattern(dx, r->data(), sh.words, seed, a);
  r->pause(a);
  dx.delay_next(std::chrono::microseconds(delay_us), 64, a);
  r->resume(a);
  r->pause(b);
  dx.clear();
  r->resume(b);
  assert_contents(dx, *r, sh.words, seed, 0, b);
  a.synchronize();
}

/// The caller's last write of the contents is late on the caller's stream: a long hold, then the
/// write, then pause() on that stream. A pause (stream-ordered or synchronous alike) waits for the
/// work queued on the stream it is given, so the copy out must hold the late write; one that
/// copies on a stream of its own without waiting for the caller's moves what the region held
/// before it. The hold (300 to 400 ms, drawn per case) outlasts any bounded wait shorter than that
/// (the other properties' writes, large ones on a loaded machine included, land well within it).
void caller_writes_late(executor& ex, const region_implementation& impl) {
  const shape sh = gen_shape(ex, 0, 3);
  const std::uint32_t before = *rc::gen::arbitrary<std::uint32_t>();
  const std::uint32_t late = *rc::gen::distinctFrom(before);
  const int delay_us = *rc::gen::inRange(300000, 400000);
  delay_adaptor dx(ex);
  stream s(dx, 0);
  auto r = make_region(impl, dx, region_config{sh.words * word, 0, sh.chunk_bytes});
  // A failed check unwinds: the late write must land before the region goes.
  const testing::sync_on_exit guard(dx, {s});
  write_pattern(dx, r->data(), sh.words, before, s);
  s.synchronize();
  RC_LOG() << "hold of " << delay_us << " us on the caller's stream, then its last write\n";
  dx.delay_next(std::chrono::microseconds(delay_us), 1, s);
  write_pattern(dx, r->data(), sh.words, late, s);
  r->pause(s);
  dx.clear();
  r->resume(s);
  assert_contents(dx, *r, sh.words, late, 0, s);
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
  const testing::sync_on_exit guard(x, {s});
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

// ---- fault injection ---------------------------------------------------------------------------

enum class phase { pause, resume };

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
    fx.arm(kinds, n);
    bool threw = false;
    try {
      op();
    } catch (const injected_fault&) {
      threw = true;
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    const bool fired = fx.fired();
    fx.disarm();
    RC_ASSERT(threw == fired);
    return fired;
  }
};

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

}  // namespace

}  // namespace offloadkit::region

namespace offloadkit::testing {

std::vector<check_case> region_battery(const region_implementation& impl) {
  const region_capabilities& caps = impl.caps;
  const std::string keeps_memory =
      "profile says pause() keeps the device memory (releases_memory not declared)";
  battery_list<region_implementation> list("region", impl);
  list.add("model_based", &region::model_based, 30);
  list.add_if(caps.releases_memory, "release_is_real", &region::release_is_real, 10, keeps_memory);
  list.add("graph_replay_after_resume", &region::graph_replay_after_resume, 15);
  list.add("swap_keeps_both", &region::swap_keeps_both, 15);
  // The fault adaptor fails only what passes through the executor.
  for (const auto& [name, which] : {std::pair{"fault_countdown_pause", region::phase::pause},
                                    std::pair{"fault_countdown_resume", region::phase::resume}}) {
    list.add_if(
        impl.support.executor_allocations, name,
        [which = which](executor& ex, const region_implementation& i) {
          region::fault_countdown(ex, i, which);
        },
        3, allocations_not_through_executor());
  }
  list.add_if(impl.support.executor_allocations, "fault_countdown_swap",
              &region::fault_countdown_swap, 3, allocations_not_through_executor());
  list.add_if(caps.releases_memory, "many_cycles", &region::many_cycles, 1, keeps_memory);
  list.add("state_errors", &region::state_errors, 10);
  list.add_if(caps.multi_device, "multi_device", &region::multi_device, 5,
              "profile says a region lives on the current device only (multi_device not "
              "declared)")
      .min_devices = 2;
  list.add("cross_stream_order", &region::cross_stream_order, 5);
  list.add("caller_writes_late", &region::caller_writes_late, 5);
  list.add("adjacent_allocations", &region::adjacent_allocations, 10);
  list.add_if(caps.managed_memory, "unified_release_behaviour", &region::unified_release_behaviour,
              10,
              "profile says the region is not one managed allocation (managed_memory not "
              "declared)");
  return std::move(list).take();
}

}  // namespace offloadkit::testing
