// offloadkit's reference implementations of all four features as a plugin: built through the C
// ABI exactly as an outside plugin would be, so that `offloadkit check --plugin` runs the same
// batteries through the ABI and every property passes.
#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/plugin/export.hpp"
#include "offloadkit/region/reference_region.hpp"
#include "offloadkit/stash/eager_stash.hpp"

namespace {

namespace ok = offloadkit;

std::unique_ptr<ok::stash::stash_interface> make_stash(ok::executor& ex,
                                                       const ok::stash::stash_config& c,
                                                       ok::stream_ref s) {
  return std::make_unique<ok::stash::eager_stash>(ex, c, s);
}
std::unique_ptr<ok::region::offload_region> make_region(ok::executor& ex,
                                                        const ok::region::region_config& c) {
  return std::make_unique<ok::region::reference_region>(ex, c);
}
std::unique_ptr<ok::arena::offloader> make_arena(ok::executor& ex) {
  return std::make_unique<ok::arena::reference_offloader>(ex);
}
std::unique_ptr<ok::activation::offloader> make_activation(
    ok::executor& ex, const ok::activation::offload_options& o) {
  return std::make_unique<ok::activation::reference_offloader>(ex, o);
}

// Everything goes through the lent executor: both executors, and faults reach it.
constexpr std::uint64_t common =
    OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR | OKIT_CAP_EXECUTOR_ALLOCATIONS;

}  // namespace

extern "C" OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  namespace op = offloadkit::plugin;
  static const okit_stash_vtable stash = op::stash_vtable<&make_stash>("reference", common);
  static const okit_region_vtable region = op::region_vtable<&make_region>(
      "reference", common | OKIT_REGION_CAP_RELEASES_MEMORY | OKIT_REGION_CAP_MULTI_DEVICE);
  static const okit_arena_vtable arena = op::arena_vtable<&make_arena>("reference", common);
  static const okit_activation_vtable activation = op::activation_vtable<&make_activation>(
      "reference", common | OKIT_ACTIVATION_CAP_ORIGIN_DEVICE | OKIT_ACTIVATION_CAP_PREFETCH_BOUND |
                       OKIT_ACTIVATION_CAP_PENDING_BOUND);
  static const okit_plugin plugin{OKIT_ABI_VERSION,
                                  sizeof(okit_plugin),
                                  "offloadkit-reference",
                                  OFFLOADKIT_VERSION,
                                  &stash,
                                  &region,
                                  &arena,
                                  &activation};
  return host_abi_version == OKIT_ABI_VERSION ? &plugin : nullptr;
}
