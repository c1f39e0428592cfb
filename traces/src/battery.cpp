// The traces battery: rapidcheck properties over random schedules, pools and timelines.
#include "offloadkit/traces/battery.hpp"

#include <rapidcheck.h>

#include <cstdint>

#include "offloadkit/resources.hpp"
#include "offloadkit/traces/export.hpp"
#include "offloadkit/traces/replay.hpp"
#include "offloadkit/traces/schedule_format.hpp"
#include "offloadkit/traces/stash_bridge.hpp"

namespace offloadkit::traces {
namespace {

/// A random valid schedule: each microbatch stashes its keys in (vp, layer) order and restores
/// them in reverse; microbatches interleave at random.
schedule gen_schedule(bool uniform_rows) {
  schedule s;
  s.virtual_stages = *rc::gen::inRange(1, 4);
  s.layers = *rc::gen::inRange(1, 4);
  s.microbatches = *rc::gen::inRange(1, 7);
  const auto b = *rc::gen::inRange<std::uint64_t>(1, 200);
  s.row_bytes.assign(static_cast<std::size_t>(s.layers), b);
  if (!uniform_rows) {
    for (auto& r : s.row_bytes) r = *rc::gen::inRange<std::uint64_t>(1, 200);
  }
  s.max_rows = *rc::gen::inRange<std::uint32_t>(0, 150);
  s.page_rows = *rc::gen::inRange<std::uint32_t>(1, 40);
  s.rows = *rc::gen::container<std::vector<std::uint32_t>>(
      s.key_count(), rc::gen::inRange<std::uint32_t>(0, s.max_rows + 1));
  const int per_mb = s.virtual_stages * s.layers;
  std::vector<int> done(static_cast<std::size_t>(s.microbatches), 0);
  std::vector<int> open;
  for (int m = 0; m < s.microbatches; ++m) open.push_back(m);
  while (!open.empty()) {
    const auto pick = *rc::gen::inRange<std::size_t>(0, open.size());
    const int mb = open[pick];
    const int e = done[static_cast<std::size_t>(mb)]++;
    const int pos = e < per_mb ? e : 2 * per_mb - 1 - e;
    s.steps.push_back({e < per_mb ? schedule_op::stash : schedule_op::restore,
                       {pos / s.layers, pos % s.layers, mb},
                       s.steps.size()});
    if (e + 1 == 2 * per_mb) open.erase(open.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return s;
}

schedule_pools gen_pools(const schedule& s) {
  const std::uint64_t need = plan(s, std::nullopt).peak_pages;
  return {*rc::gen::inRange<std::uint64_t>(0, need + 2),
          *rc::gen::inRange<std::uint64_t>(0, need + 2)};
}

void model_replay(executor& ex) {
  const schedule s = gen_schedule(false);
  replay_options o;
  o.pools = gen_pools(s);
  const replay_result r = replay_model(s, ex, o);
  RC_ASSERT(r.mismatches == 0u);
  RC_ASSERT(r.overflow.has_value() == plan(s, o.pools).overflow.has_value());
}

void stash_replay(executor& ex, const char* impl) {
  const schedule s = gen_schedule(true);
  const schedule_pools pools = gen_pools(s);
  stash::stash_config cfg;
  cfg.row_bytes = s.row_bytes.front();
  cfg.rows_per_page = s.page_rows;
  cfg.max_rows = s.max_rows;
  cfg.device_pages = pools.device_pages;
  cfg.pinned_pages = pools.pinned_pages;
  cfg.max_keys = s.key_count();
  stream st(ex);
  auto impl_ptr = make_stash(impl, ex, cfg, st);
  st.synchronize();
  const replay_result r = replay_stash(s, *impl_ptr, ex, {});
  if (r.mismatches != 0u) RC_FAIL(std::string(impl) + ": " + r.first_mismatch);
}

void schedule_round_trip(executor&) {
  const schedule s = gen_schedule(false);
  const schedule back = parse_schedule(to_json(s));
  RC_ASSERT(back.rows == s.rows);
  RC_ASSERT(back.row_bytes == s.row_bytes);
  RC_ASSERT(back.steps.size() == s.steps.size());
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    RC_ASSERT(back.steps[i].op == s.steps[i].op);
    RC_ASSERT(back.steps[i].key == s.steps[i].key);
  }
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
  v.push_back({"traces", "model", "replay_restores_every_byte", model_replay, 50});
  v.push_back({"traces", "reference", "replay_restores_every_byte",
               [](executor& ex) { stash_replay(ex, "reference"); }, 30});
  v.push_back({"traces", "optimized", "replay_restores_every_byte",
               [](executor& ex) { stash_replay(ex, "optimized"); }, 30});
  v.push_back({"traces", "format", "schedule_round_trip", schedule_round_trip, 100});
  v.push_back({"traces", "format", "timeline_round_trip", timeline_round_trip, 100});
  return v;
}

}  // namespace offloadkit::traces
