// plugin_check_cases(): each provided feature's descriptor handed to that feature's battery.
#include "offloadkit/plugin/checks.hpp"

#include <iterator>

#include "offloadkit/testing/activation_battery.hpp"
#include "offloadkit/testing/arena_battery.hpp"
#include "offloadkit/testing/region_battery.hpp"
#include "offloadkit/testing/stash_battery.hpp"

namespace offloadkit::plugin {
namespace {

template <class Implementation, class Battery>
void add_feature(plugin_checks& out, const char* feature, const std::optional<Implementation>& impl,
                 backend on, Battery battery) {
  if (!impl) {
    out.not_run.push_back(std::string(feature) + ": not provided by the plugin");
    return;
  }
  if (!impl->support.runs_on(on)) {
    out.not_run.push_back(std::string(feature) +
                          ": not run: the plugin declares no support for the " + to_string(on) +
                          " executor (capability OKIT_CAP_" +
                          (on == backend::cuda ? "CUDA" : "HOST") + "_EXECUTOR)");
    return;
  }
  std::vector<check_case> cases = battery(*impl);
  out.cases.insert(out.cases.end(), std::make_move_iterator(cases.begin()),
                   std::make_move_iterator(cases.end()));
}

}  // namespace

plugin_checks plugin_check_cases(const std::shared_ptr<const library>& lib, backend on) {
  plugin_checks out;
  add_feature(out, "stash", stash_of(lib), on,
              [](const testing::stash_implementation& i) { return testing::stash_battery(i); });
  add_feature(out, "region", region_of(lib), on,
              [](const testing::region_implementation& i) { return testing::region_battery(i); });
  add_feature(out, "arena", arena_of(lib), on,
              [](const testing::arena_implementation& i) { return testing::arena_battery(i); });
  add_feature(
      out, "activation", activation_of(lib), on,
      [](const testing::activation_implementation& i) { return testing::activation_battery(i); });
  return out;
}

}  // namespace offloadkit::plugin
