// What a battery needs to know about an implementation: its name (for results only), the
// capabilities it declares, and a factory. Batteries decide which properties apply from the
// capabilities, never from the name, so an outside implementation (a plugin, a Python module)
// that declares the same capabilities as a built-in one faces exactly the same checks.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/arena/offloader.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/region/region.hpp"
#include "offloadkit/stash/stash.hpp"
#include "offloadkit/testing/check.hpp"

namespace offloadkit::testing {

/// Where an implementation can run, and whether the executor's adaptors can see and fail its
/// allocations. Common to every feature.
struct executor_support {
  bool cuda = true;  ///< runs on the cuda executor
  bool host = true;  ///< runs on the host executor (all its memory and stream work goes through it)
  /// Allocates, maps and copies through the executor it is given: fault-injection properties
  /// apply. False for code that calls CUDA itself.
  bool executor_allocations = true;

  [[nodiscard]] bool runs_on(backend b) const noexcept { return b == backend::cuda ? cuda : host; }
};

// ---- paged stash ----------------------------------------------------------------------------

struct stash_capabilities {
  /// stash()/restore() issue no host synchronization: graph-capture properties apply.
  bool capturable = false;
  /// snapshot() reports page ids of the free lists and entries: id-level conservation applies.
  bool page_ids = false;
};

using stash_factory = std::function<std::unique_ptr<stash::stash_interface>(
    executor&, const stash::stash_config&, stream_ref)>;

struct stash_implementation {
  std::string name;
  stash_capabilities caps;
  executor_support support;
  stash_factory make;
};

// ---- graph-stable region --------------------------------------------------------------------

struct region_capabilities {
  /// data() never changes across pause/resume (otherwise graphs are re-captured on resume).
  bool address_stable = false;
  /// pause() gives the device memory back to the driver (its free memory grows by the footprint).
  bool releases_memory = true;
  /// A region may live on any device, whatever device is current.
  bool multi_device = true;
  /// One managed (unified-memory) allocation: a paused region stays readable (pages migrate on
  /// access instead of faulting), even a discarding pause keeps the contents, and on the host
  /// back end, where managed memory is host memory, device memory never moves.
  bool managed_memory = false;
};

using region_factory =
    std::function<std::unique_ptr<region::offload_region>(executor&, region::region_config)>;

struct region_implementation {
  std::string name;
  region_capabilities caps;
  executor_support support;
  region_factory make;
};

// ---- coalesced arena ------------------------------------------------------------------------

using arena_factory = std::function<std::unique_ptr<arena::offloader>(executor&)>;
/// Makes an offloader for tensor sets of one device, used with that device's streams.
using arena_device_factory =
    std::function<std::unique_ptr<arena::offloader>(executor&, int device)>;

struct arena_implementation {
  std::string name;
  /// asynchronous, pinned_steady_state, single_host_buffer: each promise made is checked.
  arena::offload_promises caps;
  executor_support support;
  /// An offloader for device 0's tensor sets and streams.
  arena_factory make;
  /// An offloader for any device's; empty where the implementation cannot be told a device (a
  /// plugin's create() takes none), which then runs on device 0 only: multi_device does not apply.
  arena_device_factory make_for_device;
};

// ---- activation offload ---------------------------------------------------------------------

struct activation_capabilities {
  /// Tensors packed from several devices come back on their own device.
  bool origin_device = true;
  /// Honours offload_options::prefetch_bytes (device memory held for prefetch stays within it).
  bool prefetch_bound = true;
  /// Honours offload_options::max_pending_bytes.
  bool pending_bound = true;
  /// Uploads packed tensors ahead of their unpack() in backward order, within prefetch_bytes and
  /// prefetch_layers: prefetch copies are issued in backward order, and a schedule that fits the
  /// bound uploads nothing on demand in steady state.
  bool backward_prefetch = false;
};

using activation_factory = std::function<std::unique_ptr<activation::offloader>(
    executor&, const activation::offload_options&)>;

struct activation_implementation {
  std::string name;
  activation_capabilities caps;
  executor_support support;
  activation_factory make;
};

// ---- declared profiles, as reports show them ------------------------------------------------
// One list per descriptor, named as its fields: a report of a built-in, plugin or Python
// implementation shows what the battery read. The static_asserts fail when a flag is added to a
// descriptor and not here (every flag is a bool).

inline profile_flags profile_of(const executor_support& s) {
  static_assert(sizeof(executor_support) == 3 * sizeof(bool), "list every support flag here");
  return {{"cuda", s.cuda}, {"host", s.host}, {"executor_allocations", s.executor_allocations}};
}

/// The feature's flags, then the support flags.
template <class Implementation>
profile_flags with_support(profile_flags caps, const Implementation& impl) {
  for (auto& flag : profile_of(impl.support)) caps.push_back(std::move(flag));
  return caps;
}

inline profile_flags profile_of(const stash_implementation& impl) {
  static_assert(sizeof(stash_capabilities) == 2 * sizeof(bool), "list every stash flag here");
  return with_support({{"capturable", impl.caps.capturable}, {"page_ids", impl.caps.page_ids}},
                      impl);
}

inline profile_flags profile_of(const region_implementation& impl) {
  static_assert(sizeof(region_capabilities) == 4 * sizeof(bool), "list every region flag here");
  return with_support({{"address_stable", impl.caps.address_stable},
                       {"releases_memory", impl.caps.releases_memory},
                       {"multi_device", impl.caps.multi_device},
                       {"managed_memory", impl.caps.managed_memory}},
                      impl);
}

inline profile_flags profile_of(const arena_implementation& impl) {
  static_assert(sizeof(arena::offload_promises) == 3 * sizeof(bool), "list every arena flag here");
  return with_support({{"asynchronous", impl.caps.asynchronous},
                       {"pinned_steady_state", impl.caps.pinned_steady_state},
                       {"single_host_buffer", impl.caps.single_host_buffer}},
                      impl);
}

inline profile_flags profile_of(const activation_implementation& impl) {
  static_assert(sizeof(activation_capabilities) == 4 * sizeof(bool),
                "list every activation flag here");
  return with_support({{"origin_device", impl.caps.origin_device},
                       {"prefetch_bound", impl.caps.prefetch_bound},
                       {"pending_bound", impl.caps.pending_bound},
                       {"backward_prefetch", impl.caps.backward_prefetch}},
                      impl);
}

}  // namespace offloadkit::testing
