// arena_checks(): the arena battery for every shipped implementation, for `offloadkit check`.
#include "offloadkit/arena/battery.hpp"

#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"

namespace offloadkit::arena {

std::vector<check_case> arena_checks() {
  std::vector<check_case> all = testing::arena_battery<reference_offloader>("reference");
  for (check_case& c : testing::arena_battery<coalesced_offloader>("optimized")) {
    all.push_back(std::move(c));
  }
  return all;
}

}  // namespace offloadkit::arena
