// The plugin side of the ABI for implementations written in C++: turns a factory of an offloadkit
// interface (stash_interface, offload_region, arena::offloader, activation::offloader) into the C
// table of plugin.h. Each object created through the table runs the implementation on an
// abi_executor over the okit_executor offloadkit lends it, and every entry turns exceptions into
// error codes. offloadkit's own dogfood plugins are built this way; so can anyone's.
//
//   static const okit_stash_vtable t =
//       offloadkit::plugin::stash_vtable<&offloadkit::plugin::make_stash_as<my_stash>>("mine",
//       caps);
// (or any function of the maker's signature in place of make_stash_as).
#pragma once

#include <cstdint>
#include <memory>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/arena/offloader.hpp"
#include "offloadkit/plugin.h"
#include "offloadkit/region/region.hpp"
#include "offloadkit/stash/stash.hpp"

namespace offloadkit::plugin {

using stash_maker = std::unique_ptr<stash::stash_interface> (*)(executor&,
                                                                const stash::stash_config&,
                                                                stream_ref);
using region_maker = std::unique_ptr<region::offload_region> (*)(executor&,
                                                                 const region::region_config&);
using arena_maker = std::unique_ptr<arena::offloader> (*)(executor&);
using activation_maker =
    std::unique_ptr<activation::offloader> (*)(executor&, const activation::offload_options&);

/// Makers for an implementation type constructed the usual way, e.g.
/// stash_vtable<&make_stash_as<my_stash>>("mine", caps).
template <class Impl>
std::unique_ptr<stash::stash_interface> make_stash_as(executor& ex, const stash::stash_config& c,
                                                      stream_ref s) {
  return std::make_unique<Impl>(ex, c, s);
}
template <class Impl>
std::unique_ptr<region::offload_region> make_region_as(executor& ex,
                                                       const region::region_config& c) {
  return std::make_unique<Impl>(ex, c);
}
template <class Impl>
std::unique_ptr<arena::offloader> make_arena_as(executor& ex) {
  return std::make_unique<Impl>(ex);
}
template <class Impl>
std::unique_ptr<activation::offloader> make_activation_as(executor& ex,
                                                          const activation::offload_options& o) {
  return std::make_unique<Impl>(ex, o);
}

/// The config checks of a stash that declares `capabilities`: stash::check_config's, and for a
/// stash with one tier (OKIT_STASH_CAP_DEVICE_TIER_ONLY or OKIT_STASH_CAP_PINNED_TIER_ONLY) no
/// pages in the tier it lacks. Throws out_of_range naming the field and its valid range. Call it
/// when the stash is created, or, where it declares OKIT_STASH_CAP_CONFIG_AT_FIRST_USE, at the
/// start of every stash and restore until it passes.
void check_stash_config(const stash::stash_config& c, int device_count, std::uint64_t capabilities);

namespace detail {
okit_stash_vtable stash_vtable(const char* implementation, std::uint64_t capabilities,
                               okit_status (*create)(okit_error*, const okit_executor*,
                                                     const okit_stash_config*, void**,
                                                     okit_stream));
okit_status create_stash(stash_maker make, okit_error* err, const okit_executor* ex,
                         const okit_stash_config* cfg, void** out, okit_stream s) noexcept;

okit_region_vtable region_vtable(const char* implementation, std::uint64_t capabilities,
                                 okit_status (*create)(okit_error*, const okit_executor*,
                                                       const okit_region_config*, void**));
okit_status create_region(region_maker make, okit_error* err, const okit_executor* ex,
                          const okit_region_config* cfg, void** out) noexcept;

okit_arena_vtable arena_vtable(const char* implementation, std::uint64_t capabilities,
                               okit_status (*create)(okit_error*, const okit_executor*, void**));
okit_status create_arena(arena_maker make, okit_error* err, const okit_executor* ex,
                         void** out) noexcept;

okit_activation_vtable activation_vtable(const char* implementation, std::uint64_t capabilities,
                                         okit_status (*create)(okit_error*, const okit_executor*,
                                                               const okit_offload_options*,
                                                               void**));
okit_status create_activation(activation_maker make, okit_error* err, const okit_executor* ex,
                              const okit_offload_options* o, void** out) noexcept;
}  // namespace detail

/// The table of a stash implementation made by `Make`.
template <stash_maker Make>
okit_stash_vtable stash_vtable(const char* implementation, std::uint64_t capabilities) {
  return detail::stash_vtable(
      implementation, capabilities,
      [](okit_error* err, const okit_executor* ex, const okit_stash_config* cfg, void** out,
         okit_stream s) { return detail::create_stash(Make, err, ex, cfg, out, s); });
}

template <region_maker Make>
okit_region_vtable region_vtable(const char* implementation, std::uint64_t capabilities) {
  return detail::region_vtable(
      implementation, capabilities,
      [](okit_error* err, const okit_executor* ex, const okit_region_config* cfg, void** out) {
        return detail::create_region(Make, err, ex, cfg, out);
      });
}

template <arena_maker Make>
okit_arena_vtable arena_vtable(const char* implementation, std::uint64_t capabilities) {
  return detail::arena_vtable(implementation, capabilities,
                              [](okit_error* err, const okit_executor* ex, void** out) {
                                return detail::create_arena(Make, err, ex, out);
                              });
}

template <activation_maker Make>
okit_activation_vtable activation_vtable(const char* implementation, std::uint64_t capabilities) {
  return detail::activation_vtable(
      implementation, capabilities,
      [](okit_error* err, const okit_executor* ex, const okit_offload_options* o, void** out) {
        return detail::create_activation(Make, err, ex, o, out);
      });
}

}  // namespace offloadkit::plugin
