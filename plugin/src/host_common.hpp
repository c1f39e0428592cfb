// Shared by the host-side wrappers: the object a plugin table created, destroyed with it, and the
// library kept loaded while it lives.
#pragma once

#include <memory>
#include <string>

#include "offloadkit/plugin/abi.hpp"
#include "offloadkit/plugin/host.hpp"
#include "offloadkit/teardown.hpp"

namespace offloadkit::plugin::detail {

/// The table's implementation name, or the plugin's name where the table gives none.
std::string implementation_name(const library& lib, const char* declared);

/// What every wrapper holds: the library (kept loaded), the executor table lent to the object,
/// and the object itself, torn down before the table and the library go: through `close` where
/// the table has it (ABI 1.2), whose failure is recorded as a teardown error (teardown.hpp) for the
/// case that destroyed the wrapper, or through `destroy`, which cannot fail.
struct plugin_object {
  plugin_object(std::shared_ptr<const library> l, executor& ex, const std::string& feature)
      : lib(std::move(l)), table(ex), context(lib->context(feature)) {}
  plugin_object(const plugin_object&) = delete;
  plugin_object& operator=(const plugin_object&) = delete;
  ~plugin_object() {
    if (self == nullptr) return;
    if (close == nullptr) {
      if (destroy != nullptr) destroy(self);
      return;
    }
    okit_error err{};
    const okit_status st = close(self, &err);
    if (st != OKIT_OK) {
      // A destructor cannot throw: the case that destroyed the wrapper reports it.
      record_teardown_error(context + ": close failed (" + status_name(st) + "): " + err.message);
    }
  }

  /// The table's teardown entries: close where `has_close` (the table's OKIT_*_HAS), destroy.
  template <class Table>
  void set_teardown(const Table& t, bool has_close) noexcept {
    destroy = t.destroy;
    close = has_close ? t.close : nullptr;
  }

  std::shared_ptr<const library> lib;
  executor_table table;
  std::string context;
  void* self = nullptr;
  void (*destroy)(void*) = nullptr;
  okit_status (*close)(void*, okit_error*) = nullptr;
};

}  // namespace offloadkit::plugin::detail
