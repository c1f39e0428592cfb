// The host side of the plugin ABI: open a plugin library with dlopen, validate what it declares
// (ABI version, struct sizes, entries), and put each feature it provides behind offloadkit's C++
// interface as a battery implementation, so that the same batteries check it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "offloadkit/error.hpp"
#include "offloadkit/plugin.h"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::plugin {

/// A plugin could not be loaded or broke the ABI; the message names the plugin, the entry and
/// what was expected.
class plugin_error : public runtime_error {
 public:
  using runtime_error::runtime_error;
};

/// An opened and validated plugin library. Kept alive (shared) by every object made from it.
class library {
 public:
  /// dlopen()s `path` and validates its description. Throws plugin_error naming the path when the
  /// file cannot be loaded, the entry symbol is missing, the entry returns NULL, the ABI version
  /// differs from OKIT_ABI_VERSION, a table is smaller than its version-1 size, a table lacks an
  /// entry or declares neither executor, or no feature is provided.
  static std::shared_ptr<const library> open(const std::string& path);
  ~library();
  library(const library&) = delete;
  library& operator=(const library&) = delete;

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const okit_plugin& description() const noexcept { return *plugin_; }
  /// The plugin's name as it declares it.
  [[nodiscard]] std::string name() const;
  /// "plugin 'NAME' (PATH) FEATURE": the prefix of every message about this plugin.
  [[nodiscard]] std::string context(const std::string& feature) const;
  /// Calls the plugin's release_cached_memory (ABI 1.3): false where it has none; throws the
  /// typed error it returns (abi.hpp throw_error) when it fails.
  bool release_cached_memory() const;

 private:
  library(std::string path, void* handle, const okit_plugin* plugin);
  std::string path_;
  void* handle_ = nullptr;
  const okit_plugin* plugin_ = nullptr;
};

/// Each feature the plugin provides as a battery implementation (its name is the table's
/// `implementation`, or the plugin's name); nullopt when the plugin does not provide it.
std::optional<testing::stash_implementation> stash_of(const std::shared_ptr<const library>& lib);
std::optional<testing::region_implementation> region_of(const std::shared_ptr<const library>& lib);
std::optional<testing::arena_implementation> arena_of(const std::shared_ptr<const library>& lib);
std::optional<testing::activation_implementation> activation_of(
    const std::shared_ptr<const library>& lib);

/// The battery descriptors a table's capabilities word amounts to (each bit of
/// capabilities.hpp's table decoded once, here).
testing::executor_support support_of(std::uint64_t bits) noexcept;
testing::stash_capabilities stash_capabilities_of(std::uint64_t bits) noexcept;
/// A stash table's whole profile: its capabilities word and, where the table carries them (ABI
/// 1.3), its key limits (0: the codec's). Throws out_of_range for a word that declares two
/// overflow reports, or a key limit past the codec's.
testing::stash_capabilities stash_capabilities_of(const okit_stash_vtable& t);
testing::region_capabilities region_capabilities_of(std::uint64_t bits) noexcept;
arena::offload_promises arena_promises_of(std::uint64_t bits) noexcept;
testing::activation_capabilities activation_capabilities_of(std::uint64_t bits) noexcept;

}  // namespace offloadkit::plugin
