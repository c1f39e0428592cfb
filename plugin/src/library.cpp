// Opening and validating a plugin library: everything a plugin declares is checked once, at load,
// so that a broken plugin is reported by name and entry before any property runs.
#include <dlfcn.h>

#include <string>
#include <utility>
#include <vector>

#include "host_common.hpp"

namespace offloadkit::plugin {
namespace {

/// Names every null entry among `entries` (pairs of name and pointer).
void expect_entries(const std::string& context,
                    const std::vector<std::pair<const char*, const void*>>& entries) {
  std::string missing;
  for (const auto& [name, fn] : entries) {
    if (fn == nullptr) missing += missing.empty() ? name : std::string(", ") + name;
  }
  if (!missing.empty()) {
    throw plugin_error(context + ": the table has null entries: " + missing +
                       " (every entry of a provided table is required)");
  }
}

template <class Table>
void expect_table_header(const std::string& context, const Table& t, const char* type,
                         std::size_t v1_size) {
  if (t.struct_size < v1_size) {
    throw plugin_error(context + ": " + type + ".struct_size is " + std::to_string(t.struct_size) +
                       ", expected at least " + std::to_string(v1_size) +
                       " (the size of the ABI version " + std::to_string(OKIT_ABI_VERSION) +
                       " table)");
  }
  const std::uint64_t executors = OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR;
  if ((t.capabilities & executors) == 0) {
    throw plugin_error(context +
                       ": capabilities declare neither OKIT_CAP_CUDA_EXECUTOR nor "
                       "OKIT_CAP_HOST_EXECUTOR; at least one is required");
  }
}

template <class Fn>
const void* p(Fn* f) {
  return reinterpret_cast<const void*>(f);
}

}  // namespace

library::library(std::string path, void* handle, const okit_plugin* plugin)
    : path_(std::move(path)), handle_(handle), plugin_(plugin) {}

library::~library() {
  // Objects made from the plugin hold this library alive; by now none remains. The library stays
  // mapped (RTLD_NODELETE); a failing dlclose changes nothing more.
  if (handle_ != nullptr) dlclose(handle_);
}

std::string library::name() const {
  return plugin_->name != nullptr && plugin_->name[0] != '\0' ? plugin_->name : path_;
}

std::string library::context(const std::string& feature) const {
  return "plugin '" + name() + "' (" + path_ + ")" + (feature.empty() ? "" : " " + feature);
}

bool library::release_cached_memory() const {
  if (!OKIT_PLUGIN_HAS(plugin_, release_cached_memory)) return false;
  okit_error err{};
  if (plugin_->release_cached_memory(&err) != OKIT_OK) {
    throw_error(err, context("") + ": release_cached_memory");
  }
  return true;
}

std::shared_ptr<const library> library::open(const std::string& path) {
  const std::string where = "plugin " + path;
  // RTLD_LOCAL: two plugins (or a plugin and offloadkit) may carry the same symbols.
  // RTLD_NODELETE: a plugin that links the CUDA runtime statically registers its kernels and exit
  // handlers with the driver; unmapping it would leave those pointing into freed code.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw plugin_error(where + ": cannot be loaded: " + (why != nullptr ? why : "dlopen failed") +
                       " (give the path of a shared library, e.g. ./libmy_plugin.so)");
  }
  auto close_on_error = [handle](const std::string& message) {
    dlclose(handle);
    throw plugin_error(message);
  };
  dlerror();
  void* sym = dlsym(handle, OKIT_PLUGIN_ENTRY_SYMBOL);
  if (sym == nullptr) {
    close_on_error(where + ": does not export the entry point " OKIT_PLUGIN_ENTRY_SYMBOL
                           " (declare it extern \"C\" OKIT_PLUGIN_EXPORT const okit_plugin* "
                           "okit_plugin_entry(uint32_t))");
  }
  auto entry = reinterpret_cast<okit_plugin_entry_fn>(sym);
  const okit_plugin* desc = entry(OKIT_ABI_VERSION);
  if (desc == nullptr) {
    close_on_error(where + ": " OKIT_PLUGIN_ENTRY_SYMBOL "(" + std::to_string(OKIT_ABI_VERSION) +
                   ") returned NULL: the plugin cannot serve ABI version " +
                   std::to_string(OKIT_ABI_VERSION) +
                   " or could not start (a plugin says why in its own output, above)");
  }
  if (desc->abi_version != OKIT_ABI_VERSION) {
    close_on_error(where + ": built for ABI version " + std::to_string(desc->abi_version) +
                   ", this offloadkit speaks version " + std::to_string(OKIT_ABI_VERSION) +
                   " (rebuild the plugin against this offloadkit's plugin.h)");
  }
  if (desc->struct_size < OKIT_PLUGIN_V1_SIZE) {
    close_on_error(where + ": okit_plugin.struct_size is " + std::to_string(desc->struct_size) +
                   ", expected at least " + std::to_string(OKIT_PLUGIN_V1_SIZE) +
                   " (the version-1.0 size)");
  }
  std::shared_ptr<const library> lib(new library(path, handle, desc));
  const std::string name = lib->context("");
  if (desc->stash == nullptr && desc->region == nullptr && desc->arena == nullptr &&
      desc->activation == nullptr) {
    throw plugin_error(name +
                       ": provides no feature (stash, region, arena and activation are all "
                       "NULL)");
  }
  if (const auto* t = desc->stash) {
    const std::string c = lib->context("stash");
    expect_table_header(c, *t, "okit_stash_vtable", OKIT_STASH_V1_SIZE);
    expect_entries(c, {{"create", p(t->create)},
                       {"destroy", p(t->destroy)},
                       {"stash", p(t->stash)},
                       {"restore", p(t->restore)},
                       {"reset", p(t->reset)},
                       {"clear_status", p(t->clear_status)},
                       {"snapshot", p(t->snapshot)}});
  }
  if (const auto* t = desc->region) {
    const std::string c = lib->context("region");
    expect_table_header(c, *t, "okit_region_vtable", OKIT_REGION_V1_SIZE);
    expect_entries(c, {{"create", p(t->create)},
                       {"destroy", p(t->destroy)},
                       {"info", p(t->info)},
                       {"pause", p(t->pause)},
                       {"resume", p(t->resume)}});
    // Graph entries are the table's own unless it declares it keeps none.
    if ((t->capabilities & OKIT_REGION_CAP_NO_GRAPHS) == 0) {
      expect_entries(c, {{"register_graph", p(t->register_graph)},
                         {"replay", p(t->replay)},
                         {"unregister_graph", p(t->unregister_graph)}});
    }
  }
  if (const auto* t = desc->arena) {
    const std::string c = lib->context("arena");
    expect_table_header(c, *t, "okit_arena_vtable", OKIT_ARENA_V1_SIZE);
    expect_entries(c, {{"create", p(t->create)},
                       {"destroy", p(t->destroy)},
                       {"offload", p(t->offload)},
                       {"reload", p(t->reload)},
                       {"release", p(t->release)},
                       {"info", p(t->info)}});
  }
  if (const auto* t = desc->activation) {
    const std::string c = lib->context("activation");
    expect_table_header(c, *t, "okit_activation_vtable", OKIT_ACTIVATION_V1_SIZE);
    expect_entries(c, {{"create", p(t->create)},
                       {"destroy", p(t->destroy)},
                       {"pack", p(t->pack)},
                       {"unpack", p(t->unpack)},
                       {"forward_layer_end", p(t->forward_layer_end)},
                       {"backward_layer_begin", p(t->backward_layer_begin)},
                       {"synchronize", p(t->synchronize)},
                       {"keep_threshold", p(t->keep_threshold)},
                       {"stats", p(t->stats)}});
  }
  return lib;
}

namespace {
bool has(std::uint64_t bits, std::uint64_t bit) noexcept { return (bits & bit) != 0; }
}  // namespace

testing::executor_support support_of(std::uint64_t bits) noexcept {
  testing::executor_support s;
  s.cuda = has(bits, OKIT_CAP_CUDA_EXECUTOR);
  s.host = has(bits, OKIT_CAP_HOST_EXECUTOR);
  s.executor_allocations = has(bits, OKIT_CAP_EXECUTOR_ALLOCATIONS);
  return s;
}

testing::stash_capabilities stash_capabilities_of(std::uint64_t bits) noexcept {
  testing::stash_capabilities c;
  c.capturable = has(bits, OKIT_STASH_CAP_CAPTURABLE);
  c.page_ids = has(bits, OKIT_STASH_CAP_PAGE_IDS);
  c.overflow = has(bits, OKIT_STASH_CAP_STICKY_FLAG) ? testing::stash_overflow_report::sticky_flag
               : has(bits, OKIT_STASH_CAP_OVERFLOW_EXCEPTION)
                   ? testing::stash_overflow_report::exception
                   : testing::stash_overflow_report::status_word;
  const bool device_only = has(bits, OKIT_STASH_CAP_DEVICE_TIER_ONLY);
  const bool pinned_only = has(bits, OKIT_STASH_CAP_PINNED_TIER_ONLY);
  c.placement = device_only || pinned_only ? testing::stash_placement::single_tier
                : has(bits, OKIT_STASH_CAP_WHOLE_KEY_PER_TIER)
                    ? testing::stash_placement::whole_key_per_tier
                    : testing::stash_placement::split_within_key;
  c.tier = pinned_only && !device_only ? testing::stash_tier::pinned : testing::stash_tier::device;
  c.unknown_restore = has(bits, OKIT_STASH_CAP_UNKNOWN_RESTORE_ERROR)
                          ? testing::stash_unknown_restore::error
                          : testing::stash_unknown_restore::status_word;
  c.validation = has(bits, OKIT_STASH_CAP_CONFIG_AT_FIRST_USE)
                     ? testing::stash_config_validation::first_use
                     : testing::stash_config_validation::construction;
  return c;
}

testing::stash_capabilities stash_capabilities_of(const okit_stash_vtable& t) {
  testing::stash_capabilities c = stash_capabilities_of(t.capabilities);
  OFFLOADKIT_EXPECTS(
      !has(t.capabilities, OKIT_STASH_CAP_STICKY_FLAG) ||
          !has(t.capabilities, OKIT_STASH_CAP_OVERFLOW_EXCEPTION),
      out_of_range, "stash table '", t.implementation != nullptr ? t.implementation : "",
      "' declares two overflow reports (sticky_flag and overflow_exception); declare one or none");
  const int placements = static_cast<int>(has(t.capabilities, OKIT_STASH_CAP_WHOLE_KEY_PER_TIER)) +
                         static_cast<int>(has(t.capabilities, OKIT_STASH_CAP_DEVICE_TIER_ONLY)) +
                         static_cast<int>(has(t.capabilities, OKIT_STASH_CAP_PINNED_TIER_ONLY));
  OFFLOADKIT_EXPECTS(placements <= 1, out_of_range, "stash table '",
                     t.implementation != nullptr ? t.implementation : "", "' declares ", placements,
                     " placements (of whole_key_per_tier, device_tier_only, pinned_tier_only); "
                     "declare one or none");
  if (!OKIT_STASH_HAS_KEY_LIMITS(&t)) return c;
  const std::pair<const char*, std::uint32_t*> fields[] = {
      {"vp_limit", &c.vp_limit},
      {"layer_limit", &c.layer_limit},
      {"microbatch_limit", &c.microbatch_limit}};
  const std::uint32_t declared[] = {t.vp_limit, t.layer_limit, t.microbatch_limit};
  for (std::size_t i = 0; i < 3; ++i) {
    if (declared[i] == 0) continue;  // the codec's
    OFFLOADKIT_EXPECTS(declared[i] <= *fields[i].second, out_of_range, "stash table ",
                       fields[i].first, " = ", declared[i], " is outside [1, ", *fields[i].second,
                       "] (the key codec's limit; 0 for that limit)");
    *fields[i].second = declared[i];
  }
  return c;
}

testing::region_capabilities region_capabilities_of(std::uint64_t bits) noexcept {
  testing::region_capabilities c;
  c.address_stable = has(bits, OKIT_REGION_CAP_ADDRESS_STABLE);
  c.releases_memory = has(bits, OKIT_REGION_CAP_RELEASES_MEMORY);
  c.multi_device = has(bits, OKIT_REGION_CAP_MULTI_DEVICE);
  c.managed_memory = has(bits, OKIT_REGION_CAP_MANAGED_MEMORY);
  c.pause_modes = has(bits, OKIT_REGION_CAP_FIXED_PAUSE_MODE)
                      ? testing::region_pause_modes::fixed_per_allocation
                      : testing::region_pause_modes::both;
  c.streams = has(bits, OKIT_REGION_CAP_SYNCHRONOUS) ? testing::region_streams::synchronous
                                                     : testing::region_streams::stream_ordered;
  c.graphs = has(bits, OKIT_REGION_CAP_NO_GRAPHS) ? testing::region_graphs::none
                                                  : testing::region_graphs::own;
  return c;
}

arena::offload_promises arena_promises_of(std::uint64_t bits) noexcept {
  arena::offload_promises p;
  p.asynchronous = has(bits, OKIT_ARENA_CAP_ASYNCHRONOUS);
  p.pinned_steady_state = has(bits, OKIT_ARENA_CAP_PINNED_STEADY_STATE);
  p.single_host_buffer = has(bits, OKIT_ARENA_CAP_SINGLE_HOST_BUFFER);
  return p;
}

testing::activation_capabilities activation_capabilities_of(std::uint64_t bits) noexcept {
  testing::activation_capabilities c;
  c.return_device = has(bits, OKIT_ACTIVATION_CAP_ORIGIN_DEVICE)
                        ? testing::activation_return_device::origin
                        : testing::activation_return_device::current;
  c.prefetch_bound = has(bits, OKIT_ACTIVATION_CAP_PREFETCH_BOUND);
  c.pending_bound = has(bits, OKIT_ACTIVATION_CAP_PENDING_BOUND);
  c.backward_prefetch = has(bits, OKIT_ACTIVATION_CAP_BACKWARD_PREFETCH);
  c.decision = has(bits, OKIT_ACTIVATION_CAP_OPAQUE_PREDICATE)
                   ? testing::activation_offload_decision::opaque_predicate
                   : testing::activation_offload_decision::size_threshold;
  c.dedup = has(bits, OKIT_ACTIVATION_CAP_DEDUP_BY_STORAGE) ? testing::activation_dedup::by_storage
                                                            : testing::activation_dedup::none;
  return c;
}

namespace detail {
std::string implementation_name(const library& lib, const char* declared) {
  return declared != nullptr && declared[0] != '\0' ? std::string(declared) : lib.name();
}

}  // namespace detail

}  // namespace offloadkit::plugin
