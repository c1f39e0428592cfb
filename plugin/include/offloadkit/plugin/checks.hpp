// The batteries for a plugin: every feature it provides, checked by the same properties as
// offloadkit's own implementations, chosen by the capabilities it declares.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "offloadkit/plugin/host.hpp"
#include "offloadkit/testing/check.hpp"

namespace offloadkit::plugin {

struct plugin_checks {
  /// The cases to run on the executor asked for, feature by feature.
  std::vector<check_case> cases;
  /// One line per feature that yields no case, saying why: "activation: not provided by the
  /// plugin", "region: not run: the plugin declares no support for the host executor".
  std::vector<std::string> not_run;
};

/// The battery cases of every feature `lib` provides that can run on an executor of kind `on`.
plugin_checks plugin_check_cases(const std::shared_ptr<const library>& lib, backend on);

}  // namespace offloadkit::plugin
