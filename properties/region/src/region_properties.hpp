// What the region properties share inside the battery library: making a region as its
// descriptor says, random shapes, reading contents back, and each property's declaration (the
// bodies are in this folder's *_properties.cpp, listed by battery.cpp).
#pragma once

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
#include "offloadkit/testing/fault_countdown.hpp"
#include "offloadkit/testing/fixed_cases.hpp"
#include "offloadkit/testing/region_battery_impls.hpp"
#include "offloadkit/testing/sync_on_exit.hpp"
#include "offloadkit/workloads/region_patterns.hpp"

namespace offloadkit::region::testing {

using offloadkit::testing::region_implementation;

inline constexpr std::size_t word = sizeof(std::uint32_t);

/// A region from the descriptor's factory, to be paused in `mode`: created with that mode where
/// the profile fixes the mode per allocation, and given offloadkit's graphs where the profile says
/// the implementation keeps none. What the instance says of its address agrees with what the
/// descriptor declares, which is what the address checks below go by.
inline std::unique_ptr<offload_region> make_region(const region_implementation& impl, executor& ex,
                                                   region_config c,
                                                   pause_mode mode = pause_mode::preserve) {
  if (impl.caps.pause_modes == offloadkit::testing::region_pause_modes::fixed_per_allocation) {
    c.fixed_mode = mode;
  }
  auto r = impl.make(ex, c);
  RC_ASSERT(r->address_stable() == impl.caps.address_stable);
  if (impl.caps.graphs == offloadkit::testing::region_graphs::none)
    r = with_executor_graphs(ex, std::move(r));
  return r;
}

/// Whether one region may be paused in both modes.
inline bool both_modes(const region_implementation& impl) {
  return impl.caps.pause_modes == offloadkit::testing::region_pause_modes::both;
}

/// The mode of a region whose pauses the case draws: drawn once per region where the profile
/// fixes it per allocation; `preserve` otherwise (the draws are then per pause).
inline pause_mode gen_region_mode(const region_implementation& impl) {
  if (both_modes(impl)) return pause_mode::preserve;
  return *rc::gen::element(pause_mode::preserve, pause_mode::discard);
}

using offloadkit::testing::driver_counts;
using offloadkit::testing::driver_delays;
using offloadkit::testing::driver_growth;
using offloadkit::testing::free_memory_settles_near;
using offloadkit::testing::memory_slack;
using offloadkit::testing::near;
using offloadkit::testing::read_driver_counts;

inline bool same_address(const void* a, const void* b) { return a == b; }

inline std::vector<std::uint32_t> read_words(executor& ex, const void* p, std::size_t words,
                                             stream_ref s) {
  buffer pinned(ex, memory_kind::pinned, words * word);
  ex.copy(pinned.data(), p, words * word, s);
  ex.synchronize(s);
  std::vector<std::uint32_t> out(words);
  std::memcpy(out.data(), pinned.data(), words * word);
  return out;
}

/// Index of the first word that differs from affine^k(pattern(seed)), or words when none does.
inline std::size_t first_mismatch(const std::vector<std::uint32_t>& got, std::uint32_t seed,
                                  int k) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    std::uint32_t w = pattern_word(seed, i);
    for (int j = 0; j < k; ++j) w = affine_word(w);
    if (got[i] != w) return i;
  }
  return got.size();
}

inline void assert_contents(executor& ex, const offload_region& r, std::size_t words,
                            std::uint32_t seed, int k, stream_ref s) {
  const auto got = read_words(ex, r.data(), words, s);
  const std::size_t bad = first_mismatch(got, seed, k);
  if (bad != words) {
    RC_FAIL(offloadkit::detail::concat("word ", bad, " of ", words, " is ", got[bad],
                                       ", expected pattern seed ", seed, " after ", k, " replays"));
  }
}

inline capture_fn affine_graph(executor& ex, std::size_t words) {
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

inline shape gen_shape(executor& ex, int device, int max_granules) {
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

// ---- fault injection ---------------------------------------------------------------------------

enum class phase { pause, resume };

// ---- properties (the battery lists them in battery.cpp) ---------------------------------------

/// Model-based: random writes of sub-ranges, pauses in both modes, resumes, graph replays, reads
/// and reuse of released memory, each on one of two streams, against a model of which words hold
/// which pattern.
void model_based(executor& ex, const region_implementation& impl);

void release_is_real(executor& ex, const region_implementation& impl);

/// Graphs survive pause/resume cycles: one registered before the cycles and one registered after
/// them both replay on the region's current contents; after the first is unregistered the second
/// still replays, and the first is refused. An address-stable region never re-captures.
void graph_replay_after_resume(executor& ex, const region_implementation& impl);

/// Swap: two regions trade places back and forth (one active, one paused, each with its own
/// pattern and a graph registered before the first swap), preserving. After every swap the resumed
/// region is active at its address, the paused one paused, the device holds what it holds with
/// that region resumed and the other paused by plain resume and pause (where pause releases
/// memory), and work issued to the stream right after the swap (a graph
/// replay, then a read, with no host wait between) sees the resumed region's contents with every
/// replay it has had, across any number of swaps.
void swap_keeps_both(executor& ex, const region_implementation& impl);

void many_cycles(executor& ex, const region_implementation& impl);

void state_errors(executor& base, const region_implementation& impl);

/// A region on a device d other than the first on its own, then beside a region on device 0.
void multi_device(executor& ex, const region_implementation& impl);

/// A resume's copies are the region's own work: a pause issued right after it on another stream
/// must not copy out (or unmap) before they land. Delays on the resume's stream (250 to 350 ms)
/// widen the window past any bounded wait shorter than that, however fast or slow the build runs.
void cross_stream_order(executor& ex, const region_implementation& impl);

/// The caller's last write of the contents is late on the caller's stream: a long hold, then the
/// write, then pause() on that stream. A pause (stream-ordered or synchronous alike) waits for the
/// work queued on the stream it is given, so the copy out must hold the late write; one that
/// copies on a stream of its own without waiting for the caller's moves what the region held
/// before it. The hold (300 to 400 ms, drawn per case) outlasts any bounded wait shorter than that
/// (the other properties' writes, large ones on a loaded machine included, land well within it).
void caller_writes_late(executor& ex, const region_implementation& impl);

/// Regions whose allocations touch, as cudaMalloc places them: a region's copies stay inside
/// each of its allocations (a copy spanning two touching allocations fails on a GPU and on the
/// host back end), and a pause or resume of one region never changes its neighbours. The host
/// back end's default heap never places allocations next to each other, so there the property
/// runs on a host executor of the same shape with adjacent_allocations. Every case has a region
/// of two to four whole-granule chunks (whose allocations, and staging buffers, touch), and every
/// region is paused and resumed at least once, so that a copy merged across two allocations
/// cannot go unexercised however the rest is drawn.
void adjacent_allocations(executor& ex, const region_implementation& impl);

/// A managed region's documented release (unified_region.hpp): the allocation stays, a paused
/// region stays readable (no fault), and on the host back end device memory never moves.
void unified_release_behaviour(executor& ex, const region_implementation& impl);

/// Fault injection in a swap: for N = 0, 1, 2, ... the Nth allocation, mapping or copy of a swap
/// fails. The swap throws exactly when a fault fired and leaves
/// the region going out active, partial or paused and the region coming in paused, partial or
/// active, both at their addresses, within the memory of the two ends; a retry of the swap
/// succeeds, the resumed region holds its contents and replays its graph, and once both are gone
/// nothing is left allocated.
void fault_countdown_swap(executor& ex, const region_implementation& impl);

void fault_countdown(executor& ex, const region_implementation& impl, phase which);

}  // namespace offloadkit::region::testing
