// The capability table, and the descriptors a capabilities word decodes to.
#include "offloadkit/plugin/capabilities.hpp"

#include <cstring>

#include "offloadkit/detail/text.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/plugin.h"

namespace offloadkit::plugin {
namespace {

bool has(std::uint64_t bits, std::uint64_t bit) noexcept { return (bits & bit) != 0; }

}  // namespace

const std::vector<capability>& capability_table() {
  static const std::vector<capability> table = {
      {"common", "cuda_executor", OKIT_CAP_CUDA_EXECUTOR, "runs on the cuda executor"},
      {"common", "host_executor", OKIT_CAP_HOST_EXECUTOR,
       "runs on the host executor (does all its work through okit_executor)"},
      {"common", "executor_allocations", OKIT_CAP_EXECUTOR_ALLOCATIONS,
       "allocates, maps and copies through okit_executor: its faults can be injected"},
      {"stash", "capturable", OKIT_STASH_CAP_CAPTURABLE,
       "stash() and restore() issue no host synchronization: graphs may capture them"},
      {"stash", "page_ids", OKIT_STASH_CAP_PAGE_IDS,
       "snapshot() reports the page ids of free lists and entries"},
      {"stash", "sticky_flag", OKIT_STASH_CAP_STICKY_FLAG,
       "one sticky flag: after a failure nothing is stashed or restored until reset"},
      {"stash", "whole_key_per_tier", OKIT_STASH_CAP_WHOLE_KEY_PER_TIER,
       "a key goes whole into one tier, the device if it has room"},
      {"stash", "unknown_restore_error", OKIT_STASH_CAP_UNKNOWN_RESTORE_ERROR,
       "restoring a key that holds nothing is an error (OKIT_ERR_STATE)"},
      {"stash", "overflow_exception", OKIT_STASH_CAP_OVERFLOW_EXCEPTION,
       "a key that does not fit is an error (OKIT_ERR_OUT_OF_MEMORY) and stores nothing"},
      {"stash", "device_tier_only", OKIT_STASH_CAP_DEVICE_TIER_ONLY,
       "one tier, device pages: a key goes whole into it; pinned_pages must be 0"},
      {"stash", "pinned_tier_only", OKIT_STASH_CAP_PINNED_TIER_ONLY,
       "one tier, pinned pages: a key goes whole into it; device_pages must be 0"},
      {"stash", "config_at_first_use", OKIT_STASH_CAP_CONFIG_AT_FIRST_USE,
       "a bad config is accepted by create and refused by the first stash or restore"},
      {"region", "address_stable", OKIT_REGION_CAP_ADDRESS_STABLE, "data() never changes"},
      {"region", "releases_memory", OKIT_REGION_CAP_RELEASES_MEMORY,
       "pause() gives the device memory back to the driver"},
      {"region", "multi_device", OKIT_REGION_CAP_MULTI_DEVICE,
       "a region may live on any device, whatever device is current"},
      {"region", "managed_memory", OKIT_REGION_CAP_MANAGED_MEMORY,
       "one managed allocation: a paused region stays readable"},
      {"region", "fixed_pause_mode", OKIT_REGION_CAP_FIXED_PAUSE_MODE,
       "the pause mode is fixed when the region is created; the other one is unsupported"},
      {"region", "synchronous", OKIT_REGION_CAP_SYNCHRONOUS,
       "pause() and resume() return only once their work is finished"},
      {"region", "no_graphs", OKIT_REGION_CAP_NO_GRAPHS,
       "keeps no graphs: offloadkit captures them through the executor"},
      {"arena", "asynchronous", OKIT_ARENA_CAP_ASYNCHRONOUS,
       "offload() and reload() may return before their copies end"},
      {"arena", "pinned_steady_state", OKIT_ARENA_CAP_PINNED_STEADY_STATE,
       "a repeated shape allocates nothing"},
      {"arena", "single_host_buffer", OKIT_ARENA_CAP_SINGLE_HOST_BUFFER,
       "never more than one host buffer"},
      {"activation", "origin_device", OKIT_ACTIVATION_CAP_ORIGIN_DEVICE,
       "tensors packed on several devices come back on their own (else on the unpack stream's)"},
      {"activation", "prefetch_bound", OKIT_ACTIVATION_CAP_PREFETCH_BOUND,
       "honours prefetch_bytes"},
      {"activation", "pending_bound", OKIT_ACTIVATION_CAP_PENDING_BOUND,
       "honours max_pending_bytes"},
      {"activation", "backward_prefetch", OKIT_ACTIVATION_CAP_BACKWARD_PREFETCH,
       "uploads packed tensors ahead of unpack(), in backward order"},
      {"activation", "opaque_predicate", OKIT_ACTIVATION_CAP_OPAQUE_PREDICATE,
       "decides per tensor by its own rule, reported in stats() (else by keep_threshold)"},
      {"activation", "dedup_by_storage", OKIT_ACTIVATION_CAP_DEDUP_BY_STORAGE,
       "packs of one device storage still held are offloaded once"},
  };
  return table;
}

std::uint64_t capability_bit(const std::string& feature, const std::string& name) {
  std::vector<std::string> valid;
  for (const capability& c : capability_table()) {
    if (c.feature != feature && std::strcmp(c.feature, "common") != 0) continue;
    if (name == c.name) return c.bit;
    valid.emplace_back(c.name);
  }
  OFFLOADKIT_FAIL(out_of_range, "capability '", name, "' is not one of feature ", feature, "'s (",
                  offloadkit::detail::join(valid), ")");
}

std::vector<std::string> capability_names(const std::string& feature, std::uint64_t bits) {
  std::vector<std::string> out;
  for (const capability& c : capability_table()) {
    if (c.feature != feature && std::strcmp(c.feature, "common") != 0) continue;
    if (has(bits, c.bit)) out.emplace_back(c.name);
  }
  return out;
}

}  // namespace offloadkit::plugin
