// Shared by the host-side wrappers: the object a plugin table created, destroyed with it, and the
// library kept loaded while it lives.
#pragma once

#include <memory>
#include <string>

#include "offloadkit/plugin/abi.hpp"
#include "offloadkit/plugin/host.hpp"

namespace offloadkit::plugin::detail {

/// The table's implementation name, or the plugin's name where the table gives none.
std::string implementation_name(const library& lib, const char* declared);

/// What every wrapper holds: the library (kept loaded), the executor table lent to the object,
/// and the object itself, destroyed through `destroy` before the table and the library go.
struct plugin_object {
  plugin_object(std::shared_ptr<const library> l, executor& ex, const std::string& feature)
      : lib(std::move(l)), table(ex), context(lib->context(feature)) {}
  plugin_object(const plugin_object&) = delete;
  plugin_object& operator=(const plugin_object&) = delete;
  ~plugin_object() {
    if (self != nullptr && destroy != nullptr) destroy(self);
  }

  std::shared_ptr<const library> lib;
  executor_table table;
  std::string context;
  void* self = nullptr;
  void (*destroy)(void*) = nullptr;
};

}  // namespace offloadkit::plugin::detail
