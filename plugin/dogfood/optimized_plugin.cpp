// offloadkit's optimized implementations of all four features as a plugin (fused paged stash,
// VMM region, coalesced arena, asynchronous activation offloader), built through the C ABI as an
// outside plugin would be; `offloadkit check --plugin` runs every battery on it.
#include <cstdint>

#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/plugin/export.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/stash/paged_stash.hpp"

namespace {

constexpr std::uint64_t common =
    OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR | OKIT_CAP_EXECUTOR_ALLOCATIONS;

#if defined(OFFLOADKIT_TABLES_V1_0)
/// The close of a 1.0 table, which ends before it: never called by a host that respects
/// struct_size (it would leak the object and fail).
okit_status close_past_struct_size(void* /*self*/, okit_error* err) {
  return okit_set_error(err, OKIT_ERR_LOGIC, "close lies past struct_size");
}
#endif

}  // namespace

extern "C" OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  namespace ok = offloadkit;
  namespace op = offloadkit::plugin;
#if defined(OFFLOADKIT_TABLES_V1_0)
  // Built as a plugin of ABI 1.0 is: the stash table ends before the batch entries (and close).
  // The entries past its struct_size are set to ones that fail, so a host that reads past the size
  // is seen.
  static const okit_stash_vtable stash = [] {
    okit_stash_vtable t = op::stash_vtable<&op::make_stash_as<ok::stash::paged_stash>>(
        "optimized-abi-1.0", common | OKIT_STASH_CAP_CAPTURABLE | OKIT_STASH_CAP_PAGE_IDS);
    t.struct_size = OKIT_STASH_V1_SIZE;
    t.stash_batch = [](void*, okit_error* err, const okit_stash_item*, size_t, okit_stream) {
      return okit_set_error(err, OKIT_ERR_LOGIC, "stash_batch lies past struct_size");
    };
    t.restore_batch = [](void*, okit_error* err, const okit_restore_item*, size_t, okit_stream) {
      return okit_set_error(err, OKIT_ERR_LOGIC, "restore_batch lies past struct_size");
    };
    t.close = close_past_struct_size;
    return t;
  }();
#else
  static const okit_stash_vtable stash =
      op::stash_vtable<&op::make_stash_as<ok::stash::paged_stash>>(
          "optimized", common | OKIT_STASH_CAP_CAPTURABLE | OKIT_STASH_CAP_PAGE_IDS);
#endif
  constexpr std::uint64_t region_caps = common | OKIT_REGION_CAP_ADDRESS_STABLE |
                                        OKIT_REGION_CAP_RELEASES_MEMORY |
                                        OKIT_REGION_CAP_MULTI_DEVICE;
#if defined(OFFLOADKIT_TABLES_V1_0)
  // Likewise the region table ends before swap (and close), and the arena and activation tables
  // before close.
  static const okit_region_vtable region = [] {
    okit_region_vtable t = op::region_vtable<&op::make_region_as<ok::region::vmm_region>>(
        "optimized-abi-1.0", region_caps);
    t.struct_size = OKIT_REGION_V1_SIZE;
    t.swap = [](void*, okit_error* err, void*, int32_t, okit_stream) {
      return okit_set_error(err, OKIT_ERR_LOGIC, "swap lies past struct_size");
    };
    t.close = close_past_struct_size;
    return t;
  }();
  static const okit_arena_vtable arena = [] {
    okit_arena_vtable t = op::arena_vtable<&op::make_arena_as<ok::arena::coalesced_offloader>>(
        "optimized-abi-1.0", common | OKIT_ARENA_CAP_ASYNCHRONOUS |
                                 OKIT_ARENA_CAP_PINNED_STEADY_STATE |
                                 OKIT_ARENA_CAP_SINGLE_HOST_BUFFER);
    t.struct_size = OKIT_ARENA_V1_SIZE;
    t.close = close_past_struct_size;
    return t;
  }();
  static const okit_activation_vtable activation = [] {
    okit_activation_vtable t =
        op::activation_vtable<&op::make_activation_as<ok::activation::async_offloader>>(
            "optimized-abi-1.0",
            common | OKIT_ACTIVATION_CAP_ORIGIN_DEVICE | OKIT_ACTIVATION_CAP_PREFETCH_BOUND |
                OKIT_ACTIVATION_CAP_PENDING_BOUND | OKIT_ACTIVATION_CAP_BACKWARD_PREFETCH);
    t.struct_size = OKIT_ACTIVATION_V1_SIZE;
    t.close = close_past_struct_size;
    return t;
  }();
#else
  static const okit_region_vtable region =
      op::region_vtable<&op::make_region_as<ok::region::vmm_region>>("optimized", region_caps);
  static const okit_arena_vtable arena =
      op::arena_vtable<&op::make_arena_as<ok::arena::coalesced_offloader>>(
          "optimized", common | OKIT_ARENA_CAP_ASYNCHRONOUS | OKIT_ARENA_CAP_PINNED_STEADY_STATE |
                           OKIT_ARENA_CAP_SINGLE_HOST_BUFFER);
  static const okit_activation_vtable activation =
      op::activation_vtable<&op::make_activation_as<ok::activation::async_offloader>>(
          "optimized", common | OKIT_ACTIVATION_CAP_ORIGIN_DEVICE |
                           OKIT_ACTIVATION_CAP_PREFETCH_BOUND | OKIT_ACTIVATION_CAP_PENDING_BOUND |
                           OKIT_ACTIVATION_CAP_BACKWARD_PREFETCH);
#endif
#if defined(OFFLOADKIT_TABLES_V1_0)
  // The description ends before release_cached_memory (1.3); the entry past it fails if called.
  constexpr std::uint32_t description_size = OKIT_PLUGIN_V1_SIZE;
  constexpr okit_status (*release_cached_memory)(okit_error*) = [](okit_error* err) {
    return okit_set_error(err, OKIT_ERR_LOGIC, "release_cached_memory lies past struct_size");
  };
#else
  constexpr std::uint32_t description_size = sizeof(okit_plugin);
  constexpr okit_status (*release_cached_memory)(okit_error*) = nullptr;
#endif
  static const okit_plugin plugin{OKIT_ABI_VERSION,
                                  description_size,
                                  "offloadkit-optimized",
                                  OFFLOADKIT_VERSION,
                                  &stash,
                                  &region,
                                  &arena,
                                  &activation,
                                  release_cached_memory};
  return host_abi_version == OKIT_ABI_VERSION ? &plugin : nullptr;
}
