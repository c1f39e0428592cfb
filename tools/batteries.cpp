// The registry of property batteries. A battery is registered by calling its typed function below,
// never by looking a name up: a battery left out is visible here, not a string that silently
// matches nothing. Adding one is its #include and one add() line; tools/CMakeLists.txt links every
// offloadkit_<feature>_battery target that exists.
#include "batteries.hpp"

#include <iterator>
#include <utility>

#include "offloadkit/plugin/checks.hpp"
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

std::vector<check_case> plugin_check_cases(const std::string& path,
                                           const std::string& executor_name,
                                           std::vector<std::string>& notes) {
  const auto lib = plugin::library::open(path);
  plugin::plugin_checks checks =
      plugin::plugin_check_cases(lib, executor_name == "cuda" ? backend::cuda : backend::host);
  notes = std::move(checks.not_run);
  return std::move(checks.cases);
}

interpose::fault_subjects plugin_fault_subjects(const std::string& path) {
  const auto lib = plugin::library::open(path);
  interpose::fault_subjects s;
  s.stash = plugin::stash_of(lib);
  s.region = plugin::region_of(lib);
  s.arena = plugin::arena_of(lib);
  s.activation = plugin::activation_of(lib);
  s.release_cached_memory = [lib] { return lib->release_cached_memory(); };
  return s;
}

}  // namespace offloadkit::tools
