// The page planner: pages needed per tier, peak bytes and the first overflow of a pool.
#include <cstdint>

#include "offloadkit/traces/replay.hpp"
#include "tier_accounting.hpp"

namespace offloadkit::traces {

replay_result plan(const schedule& s, const std::optional<schedule_pools>& pools) {
  replay_result r;
  r.page_bytes = std::uint64_t{s.page_rows} * detail::max_row_bytes_of(s);
  detail::tier_accounting acc(s, pools ? pools : s.pools);
  for (std::size_t i = 0; i < s.steps.size(); ++i) acc.apply(i, r);
  r.peak_paged_bytes = r.peak_pages * r.page_bytes;
  return r;
}

}  // namespace offloadkit::traces
