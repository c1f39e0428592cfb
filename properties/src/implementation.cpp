// Names of the declared stash and region policies, as reports and messages show them.
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::testing {

const char* to_string(stash_overflow_report r) noexcept {
  switch (r) {
    case stash_overflow_report::status_word:
      return "per-key status word";
    case stash_overflow_report::sticky_flag:
      return "sticky flag until reset";
    case stash_overflow_report::exception:
      return "thrown out_of_memory";
  }
  return "unknown";
}

const char* to_string(stash_placement p) noexcept {
  switch (p) {
    case stash_placement::split_within_key:
      return "split within a key (device first)";
    case stash_placement::whole_key_per_tier:
      return "whole key per tier";
    case stash_placement::single_tier:
      return "single tier, whole key";
  }
  return "unknown";
}

const char* to_string(stash_tier t) noexcept {
  switch (t) {
    case stash_tier::device:
      return "device pages only";
    case stash_tier::pinned:
      return "pinned pages only";
  }
  return "unknown";
}

const char* to_string(stash_config_validation v) noexcept {
  switch (v) {
    case stash_config_validation::construction:
      return "at construction";
    case stash_config_validation::first_use:
      return "at first use";
  }
  return "unknown";
}

const char* to_string(stash_unknown_restore u) noexcept {
  switch (u) {
    case stash_unknown_restore::status_word:
      return "recorded as restore_empty";
    case stash_unknown_restore::error:
      return "state_error";
  }
  return "unknown";
}

const char* to_string(region_pause_modes m) noexcept {
  switch (m) {
    case region_pause_modes::both:
      return "both";
    case region_pause_modes::fixed_per_allocation:
      return "fixed per allocation";
  }
  return "unknown";
}

const char* to_string(region_streams s) noexcept {
  switch (s) {
    case region_streams::stream_ordered:
      return "stream-ordered";
    case region_streams::synchronous:
      return "synchronous";
  }
  return "unknown";
}

const char* to_string(region_graphs g) noexcept {
  switch (g) {
    case region_graphs::own:
      return "own";
    case region_graphs::none:
      return "none (offloadkit captures through the executor)";
  }
  return "unknown";
}

const char* to_string(activation_offload_decision d) noexcept {
  switch (d) {
    case activation_offload_decision::size_threshold:
      return "size threshold";
    case activation_offload_decision::opaque_predicate:
      return "opaque predicate (reported per tensor in stats())";
  }
  return "unknown";
}

const char* to_string(activation_dedup d) noexcept {
  switch (d) {
    case activation_dedup::none:
      return "none";
    case activation_dedup::by_storage:
      return "by storage";
  }
  return "unknown";
}

const char* to_string(activation_return_device r) noexcept {
  switch (r) {
    case activation_return_device::origin:
      return "origin";
    case activation_return_device::current:
      return "current";
  }
  return "unknown";
}

}  // namespace offloadkit::testing
