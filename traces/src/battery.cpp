// The traces battery: rapidcheck properties over random schedules, pools and timelines.
#include "offloadkit/traces/battery.hpp"

#include <rapidcheck.h>

#include <cstdint>
#include <random>

#include "offloadkit/resources.hpp"
#include "offloadkit/traces/export.hpp"
#include "offloadkit/traces/replay.hpp"
#include "offloadkit/traces/schedule_format.hpp"

namespace offloadkit::traces {
namespace {

/// A random valid schedule file, drawn from a seed rapidcheck picks (so it shrinks by seed).
schedule_file gen_file(bool uniform_rows) {
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  return random_schedule_file(rng, uniform_rows);
}

void stash_replay(executor& ex, const char* impl) {
  const schedule_file f = gen_file(false);
  const std::uint64_t need = stash::plan(f.work, f.page_rows).peak_pages;
  const stash::tier_pools pools{*rc::gen::inRange<std::uint64_t>(0, need + 2),
                                *rc::gen::inRange<std::uint64_t>(0, need + 2)};
  stream st(ex);
  auto impl_ptr = make_stash(impl, ex, config_for(f, pools), st);
  st.synchronize();
  const data_check r = replay_stash(f, *impl_ptr, ex);
  if (r.mismatches != 0u) RC_FAIL(std::string(impl) + ": " + r.first_mismatch);
}

void schedule_round_trip(executor&) {
  const schedule_file f = gen_file(false);
  const schedule_file back = parse_schedule(to_json(f));
  RC_ASSERT(stash::dense_rows(back.work) == stash::dense_rows(f.work));
  RC_ASSERT(back.work.row_bytes == f.work.row_bytes);
  RC_ASSERT(back.work.layer_row_bytes == f.work.layer_row_bytes);
  RC_ASSERT(back.work.sched.steps == f.work.sched.steps);
}

void timeline_round_trip(executor&) {
  timeline t;
  const int n = *rc::gen::inRange(0, 20);
  for (int i = 0; i < n; ++i) {
    const auto start = *rc::gen::inRange<std::int64_t>(0, std::int64_t{1} << 50);
    const auto end = start + *rc::gen::inRange<std::int64_t>(0, 1 << 20);
    switch (*rc::gen::inRange(0, 3)) {
      case 0:
        t.add_kernel(*rc::gen::element<std::string>("k", "a<b>&\"c\""), start, end, 7);
        break;
      case 1:
        t.add_copy(*rc::gen::element(memory_location::pinned, memory_location::pageable,
                                     memory_location::device),
                   memory_location::device, *rc::gen::arbitrary<std::uint64_t>(), start, end, 3);
        break;
      default:
        t.add_api(api_kind::pinned_alloc, "cudaHostAlloc", start, end, 1, 9);
        break;
    }
  }
  const timeline back = parse_chrome_trace(to_chrome_trace(t));
  RC_ASSERT(back.records.size() == t.records.size());
  for (std::size_t i = 0; i < t.records.size(); ++i) {
    RC_ASSERT(back.records[i].name == t.records[i].name);
    RC_ASSERT(back.records[i].start_ns == t.records[i].start_ns);
    RC_ASSERT(back.records[i].end_ns == t.records[i].end_ns);
    RC_ASSERT(back.records[i].bytes == t.records[i].bytes);
    RC_ASSERT(back.records[i].src == t.records[i].src);
  }
}

}  // namespace

std::vector<check_case> traces_checks() {
  std::vector<check_case> v;
  v.push_back({"traces", "reference", "replay_restores_every_byte",
               [](executor& ex) { stash_replay(ex, "reference"); }, 30});
  v.push_back({"traces", "optimized", "replay_restores_every_byte",
               [](executor& ex) { stash_replay(ex, "optimized"); }, 30});
  v.push_back({"traces", "format", "schedule_round_trip", schedule_round_trip, 100});
  v.push_back({"traces", "format", "timeline_round_trip", timeline_round_trip, 100});
  return v;
}

}  // namespace offloadkit::traces
