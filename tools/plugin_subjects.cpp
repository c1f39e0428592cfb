#include "plugin_subjects.hpp"

#include <utility>

#include "offloadkit/plugin/checks.hpp"
#include "offloadkit/plugin/host.hpp"

namespace offloadkit::tools {

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
