// The registry of property batteries. A battery is registered by calling its typed function below,
// never by looking a name up: a battery left out is visible here, not a string that silently
// matches nothing. Adding one is its #include and one add() line; tools/CMakeLists.txt links every
// offloadkit_<feature>_battery target that exists.
#include "batteries.hpp"

#include <iterator>
#include <utility>

#include "offloadkit/testing/activation_battery.hpp"
#include "offloadkit/testing/arena_battery.hpp"
#include "offloadkit/testing/executor_battery.hpp"
#include "offloadkit/testing/region_battery.hpp"
#include "offloadkit/testing/stash_battery.hpp"
#include "offloadkit/traces/battery.hpp"

namespace offloadkit::tools {

std::vector<check_case> all_check_cases(const std::string& executor_name) {
  std::vector<check_case> all;
  auto add = [&all](std::vector<check_case> cases) {
    all.insert(all.end(), std::make_move_iterator(cases.begin()),
               std::make_move_iterator(cases.end()));
  };

  add(testing::executor_battery(executor_name));
  add(testing::stash_checks());
  add(testing::region_checks());
  add(testing::arena_checks());
  add(testing::activation_checks());
  add(traces::traces_checks());

  return all;
}

}  // namespace offloadkit::tools
