// offloadkit's reference implementations of all four features as a plugin: built through the C
// ABI exactly as an outside plugin would be, so that `offloadkit check --plugin` runs the same
// batteries through the ABI and every property passes.
#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/plugin/export.hpp"
#include "offloadkit/region/reference_region.hpp"
#include "offloadkit/stash/eager_stash.hpp"

namespace {

// Everything goes through the lent executor: both executors, and faults reach it.
constexpr std::uint64_t common =
    OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR | OKIT_CAP_EXECUTOR_ALLOCATIONS;

}  // namespace

extern "C" OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  namespace ok = offloadkit;
  namespace op = offloadkit::plugin;
  static const okit_stash_vtable stash =
      op::stash_vtable<&op::make_stash_as<ok::stash::eager_stash>>("reference", common);
  static const okit_region_vtable region =
      op::region_vtable<&op::make_region_as<ok::region::reference_region>>(
          "reference", common | OKIT_REGION_CAP_RELEASES_MEMORY | OKIT_REGION_CAP_MULTI_DEVICE);
  static const okit_arena_vtable arena =
      op::arena_vtable<&op::make_arena_as<ok::arena::reference_offloader>>("reference", common);
  static const okit_activation_vtable activation =
      op::activation_vtable<&op::make_activation_as<ok::activation::reference_offloader>>(
          "reference", common | OKIT_ACTIVATION_CAP_ORIGIN_DEVICE |
                           OKIT_ACTIVATION_CAP_PREFETCH_BOUND | OKIT_ACTIVATION_CAP_PENDING_BOUND);
  static const okit_plugin plugin{OKIT_ABI_VERSION,
                                  sizeof(okit_plugin),
                                  "offloadkit-reference",
                                  OFFLOADKIT_VERSION,
                                  &stash,
                                  &region,
                                  &arena,
                                  &activation,
                                  nullptr};
  return host_abi_version == OKIT_ABI_VERSION ? &plugin : nullptr;
}
