// What a battery needs to know about an implementation: its name (for results only), the
// capabilities it declares, and a factory. Batteries decide which properties apply from the
// capabilities, never from the name, so an outside implementation (a plugin, a Python module)
// that declares the same capabilities as a built-in one faces exactly the same checks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/arena/offloader.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/region/region.hpp"
#include "offloadkit/stash/key.hpp"
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

/// How a stash reports a key that fails (no room, stashed twice, too many rows).
enum class stash_overflow_report {
  /// The first failure since the last clear is recorded in the status word with its key, row
  /// count, need and free pages; the failed key gets nothing and later calls go on.
  status_word,
  /// One flag for the whole stash: after the first failure every later stash() stores nothing
  /// and every later restore() gives back nothing (0 rows) until reset() or clear_status(); the
  /// status says only that something failed (its code), not which key.
  sticky_flag,
  /// stash() of a key that does not fit throws out_of_memory (naming the key, the pages it needs
  /// and the free pages of both tiers), stores nothing and leaves the status word as it was;
  /// later calls go on. Other failures (a key stashed twice, rows past max_rows) are recorded in
  /// the status word as with status_word.
  exception,
};

/// Where a key's pages go.
enum class stash_placement {
  /// Device pages first, the rest pinned: a key fits when both tiers together have room.
  split_within_key,
  /// The whole key in one tier, the device if it has room, else the pinned tier.
  whole_key_per_tier,
  /// The stash has one tier (stash_capabilities::tier) and every key goes whole into it: a key
  /// fits when that tier has room. The other tier does not exist: a config that gives it pages is
  /// a bad config (out_of_range naming the field, valid range [0, 0]), refused as the
  /// validation policy says.
  single_tier,
};

/// A stash's tier of pages.
enum class stash_tier {
  device,  ///< device memory (stash_config::device_pages)
  pinned,  ///< pinned host memory (stash_config::pinned_pages)
};

/// When a stash validates its config.
enum class stash_config_validation {
  /// Creation throws out_of_range naming the field and its valid range for a bad config.
  construction,
  /// Creation accepts any config; a bad one is reported by the first stash() or restore() (and
  /// every later one) as out_of_range naming the field and its valid range. Such a call writes
  /// nothing (not the destination, not the row count), and the object can still be destroyed.
  first_use,
};

/// What restore() of a key that holds nothing does.
enum class stash_unknown_restore {
  status_word,  ///< records restore_empty (per the overflow report) and gives back 0 rows
  error,        ///< throws state_error and changes nothing
};

const char* to_string(stash_overflow_report r) noexcept;
const char* to_string(stash_placement p) noexcept;
const char* to_string(stash_unknown_restore u) noexcept;
const char* to_string(stash_tier t) noexcept;
const char* to_string(stash_config_validation v) noexcept;

struct stash_capabilities {
  /// stash()/restore() issue no host synchronization: graph-capture properties apply.
  bool capturable = false;
  /// snapshot() reports page ids of the free lists and entries: id-level conservation applies.
  bool page_ids = false;
  stash_overflow_report overflow = stash_overflow_report::status_word;
  stash_placement placement = stash_placement::split_within_key;
  stash_unknown_restore unknown_restore = stash_unknown_restore::status_word;
  /// The one tier of a single_tier stash (read only with that placement).
  stash_tier tier = stash_tier::device;
  stash_config_validation validation = stash_config_validation::construction;
  /// The key space: each field of a key is below its limit (stash() refuses others with
  /// out_of_range). The defaults are offloadkit's fixed-width codec's.
  std::uint32_t vp_limit = stash::key_limits::vp;
  std::uint32_t layer_limit = stash::key_limits::layer;
  std::uint32_t microbatch_limit = stash::key_limits::microbatch;

  /// Whether the profile is the one the status word, first-overflow and graph properties are
  /// written for (per-key status word, a key fitting when the pages it may use have room): split
  /// placement, or a single tier, which those properties size as the only tier (a split stash
  /// with no pages in its other tier places keys exactly as a single-tier stash does).
  [[nodiscard]] bool default_overflow_policy() const noexcept {
    return overflow == stash_overflow_report::status_word &&
           placement != stash_placement::whole_key_per_tier;
  }
  [[nodiscard]] bool single_tier() const noexcept {
    return placement == stash_placement::single_tier;
  }
  /// Whether a config may give `t` pages: every tier, except the one a single-tier stash lacks.
  [[nodiscard]] bool has_tier(stash_tier t) const noexcept { return !single_tier() || tier == t; }
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

/// Which pause modes a region offers.
enum class region_pause_modes {
  both,  ///< every region pauses in either mode
  /// The mode is chosen when the region is created (region_config::fixed_mode) and every pause
  /// uses it; a pause in the other mode throws unsupported_error (OKIT_ERR_UNSUPPORTED) and
  /// changes nothing.
  fixed_per_allocation,
};

/// How pause() and resume() relate to the stream they are given.
enum class region_streams {
  /// Ordered on the stream given: they wait for the work queued on it before them, and work
  /// queued on it after them sees their result; they may return before their own work finishes.
  stream_ordered,
  /// Synchronous: they wait for the work queued on the stream given (a library that synchronizes
  /// the whole device does), and return only once their own work is finished, so that work on
  /// any stream after them sees their result with no ordering by the caller.
  synchronous,
};

/// Who keeps the graphs of register_graph() and replay().
enum class region_graphs {
  own,   ///< the implementation does
  none,  ///< it has none: offloadkit captures through the executor (with_executor_graphs)
};

const char* to_string(region_pause_modes m) noexcept;
const char* to_string(region_streams s) noexcept;
const char* to_string(region_graphs g) noexcept;

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
  region_pause_modes pause_modes = region_pause_modes::both;
  region_streams streams = region_streams::stream_ordered;
  region_graphs graphs = region_graphs::own;
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

/// How an offloader decides which tensors to copy off the device.
enum class activation_offload_decision {
  /// Tensors with at least offload_options::keep_threshold bytes (the value keep_threshold()
  /// reports) are offloaded, smaller ones kept on the device.
  size_threshold,
  /// The implementation decides per tensor by a rule of its own (dtype, a framework's flag, ...)
  /// that the battery cannot predict; keep_threshold() means nothing. It reports each decision
  /// through stats(), which the battery reads before and after every pack(): a kept tensor adds
  /// one to `kept` and nothing to `offloaded_bytes`; an offloaded one adds its bytes to
  /// `offloaded_bytes` and nothing to `kept`. A kept tensor is not copied: its source stays with
  /// the offloader until unpack() returns it, in its own buffer.
  opaque_predicate,
};

/// Whether packs of one device storage share one copy.
enum class activation_dedup {
  none,  ///< every offloaded pack is copied on its own
  /// A pack whose tensor has the data pointer, bytes and device of an earlier pack whose source
  /// the offloader still holds (packed, not handed back, not unpacked) is the same storage with
  /// the same contents: it is not copied again (offloaded_bytes grows by nothing), both unpack
  /// to those contents, and each pack's source is handed back exactly once.
  by_storage,
};

/// Where unpack() returns a tensor.
enum class activation_return_device {
  origin,   ///< on the device it was packed from, whatever device unpack's stream belongs to
  current,  ///< on the device of the stream given to unpack() (the "current" device)
};

const char* to_string(activation_offload_decision d) noexcept;
const char* to_string(activation_dedup d) noexcept;
const char* to_string(activation_return_device r) noexcept;

struct activation_capabilities {
  /// Where unpack() returns tensors packed from several devices (the plugin ABI's
  /// OKIT_ACTIVATION_CAP_ORIGIN_DEVICE: origin when set, current when not).
  activation_return_device return_device = activation_return_device::origin;
  /// Honours offload_options::prefetch_bytes (device memory held for prefetch stays within it).
  bool prefetch_bound = true;
  /// Honours offload_options::max_pending_bytes.
  bool pending_bound = true;
  /// Uploads packed tensors ahead of their unpack() in backward order, within prefetch_bytes and
  /// prefetch_layers: prefetch copies are issued in backward order, and a schedule that fits the
  /// bound uploads nothing on demand in steady state.
  bool backward_prefetch = false;
  activation_offload_decision decision = activation_offload_decision::size_threshold;
  activation_dedup dedup = activation_dedup::none;
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
// implementation shows what the battery read. The static_asserts fail when a field is added to a
// descriptor and not here (each mirror lists the fields the profile shows).

/// "yes" or "no".
inline std::string flag_value(bool b) { return b ? "yes" : "no"; }

inline profile_flags profile_of(const executor_support& s) {
  static_assert(sizeof(executor_support) == 3 * sizeof(bool), "list every support flag here");
  return {{"cuda", flag_value(s.cuda)},
          {"host", flag_value(s.host)},
          {"executor_allocations", flag_value(s.executor_allocations)}};
}

/// The feature's flags, then the support flags.
template <class Implementation>
profile_flags with_support(profile_flags caps, const Implementation& impl) {
  for (auto& flag : profile_of(impl.support)) caps.push_back(std::move(flag));
  return caps;
}

inline profile_flags profile_of(const stash_implementation& impl) {
  struct mirror {
    bool capturable, page_ids;
    stash_overflow_report overflow;
    stash_placement placement;
    stash_unknown_restore unknown_restore;
    stash_tier tier;
    stash_config_validation validation;
    std::uint32_t vp, layer, microbatch;
  };
  static_assert(sizeof(stash_capabilities) == sizeof(mirror), "list every stash field here");
  const stash_capabilities& c = impl.caps;
  return with_support({{"capturable", flag_value(c.capturable)},
                       {"page_ids", flag_value(c.page_ids)},
                       {"overflow", to_string(c.overflow)},
                       {"placement", c.single_tier() ? std::string(to_string(c.placement)) + " (" +
                                                           to_string(c.tier) + ")"
                                                     : std::string(to_string(c.placement))},
                       {"unknown_restore", to_string(c.unknown_restore)},
                       {"config_validation", to_string(c.validation)},
                       {"key_space", "vp < " + std::to_string(c.vp_limit) + ", layer < " +
                                         std::to_string(c.layer_limit) + ", microbatch < " +
                                         std::to_string(c.microbatch_limit)}},
                      impl);
}

inline profile_flags profile_of(const region_implementation& impl) {
  struct mirror {
    bool address_stable, releases_memory, multi_device, managed_memory;
    region_pause_modes pause_modes;
    region_streams streams;
    region_graphs graphs;
  };
  static_assert(sizeof(region_capabilities) == sizeof(mirror), "list every region field here");
  const region_capabilities& c = impl.caps;
  return with_support({{"address_stable", flag_value(c.address_stable)},
                       {"releases_memory", flag_value(c.releases_memory)},
                       {"multi_device", flag_value(c.multi_device)},
                       {"managed_memory", flag_value(c.managed_memory)},
                       {"pause_modes", to_string(c.pause_modes)},
                       {"streams", to_string(c.streams)},
                       {"graphs", to_string(c.graphs)}},
                      impl);
}

inline profile_flags profile_of(const arena_implementation& impl) {
  static_assert(sizeof(arena::offload_promises) == 3 * sizeof(bool), "list every arena flag here");
  return with_support({{"asynchronous", flag_value(impl.caps.asynchronous)},
                       {"pinned_steady_state", flag_value(impl.caps.pinned_steady_state)},
                       {"single_host_buffer", flag_value(impl.caps.single_host_buffer)}},
                      impl);
}

inline profile_flags profile_of(const activation_implementation& impl) {
  struct mirror {
    activation_return_device return_device;
    bool prefetch_bound, pending_bound, backward_prefetch;
    activation_offload_decision decision;
    activation_dedup dedup;
  };
  static_assert(sizeof(activation_capabilities) == sizeof(mirror),
                "list every activation field here");
  const activation_capabilities& c = impl.caps;
  return with_support({{"return_device", to_string(c.return_device)},
                       {"prefetch_bound", flag_value(c.prefetch_bound)},
                       {"pending_bound", flag_value(c.pending_bound)},
                       {"backward_prefetch", flag_value(c.backward_prefetch)},
                       {"decision", to_string(c.decision)},
                       {"dedup", to_string(c.dedup)}},
                      impl);
}

}  // namespace offloadkit::testing
