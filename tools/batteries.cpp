// The registry of property batteries. A battery is registered by calling its typed function below,
// never by looking a name up: a battery left out is visible here, not a string that silently
// matches nothing. Adding one is its #include and one add() line; tools/CMakeLists.txt links every
// offloadkit_<feature>_battery target that exists.
#include "batteries.hpp"

#include <iterator>
#include <utility>

#include "offloadkit/activation/battery.hpp"
#include "offloadkit/arena/arena_checks.hpp"
#include "offloadkit/executor_battery.hpp"
#include "offloadkit/region/battery.hpp"
#include "offloadkit/stash/battery.hpp"
#include "offloadkit/traces/battery.hpp"

namespace offloadkit::tools {

std::vector<check_case> all_check_cases(const std::string& executor_name) {
  std::vector<check_case> all;
  auto add = [&all](std::vector<check_case> cases) {
    all.insert(all.end(), std::make_move_iterator(cases.begin()),
               std::make_move_iterator(cases.end()));
  };

  add(executor_battery(executor_name));
  add(stash::stash_checks());
  add(region::region_checks());
  add(arena::arena_checks());
  add(activation::activation_checks());
  add(traces::traces_checks());

  return all;
}

}  // namespace offloadkit::tools
