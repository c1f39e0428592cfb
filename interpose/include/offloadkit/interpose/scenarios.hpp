// The fixed scenario `offloadkit check --driver-faults` runs per feature, once per case, in a
// process under the interposer: every call into the implementation runs with the interposer's
// window open and every step of the scenario's own (patterns, read-backs, its buffers) with it
// closed, so that the numbered calls are the implementation's. When a call fails, the scenario
// retries it once and goes on; at the end it compares the data, and the interposer's ledger says
// what the implementation still holds.
//
//   stash       create; stash two keys (the second spills into the pinned tier, or takes it whole);
//               stash a key that does not fit (the overflow must be reported: status word, flag
//               or exception, as declared); clear_status; restore key 0 and verify; stash_batch
//               key 0 and a small key; restore_batch both and verify; snapshot (pages
//               conserved); destroy with key 1 still held
//   region      create (three chunks of the device granularity); write a pattern; pause; resume;
//               verify; pause(discard) and resume where both modes are offered; pause; destroy
//               while paused
//   arena       create; offload three tensors; clear them; reload; verify; the same cycle again;
//               release; destroy; a second one: create, offload, destroy while it holds the copy
//   activation  create; pack three tensors (one per layer); synchronize; unpack the last two in
//               backward order and verify; destroy with the first still packed; every source
//               handed back exactly once
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "offloadkit/executor.hpp"
#include "offloadkit/interpose/countdown.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::interpose {

/// The implementations a plugin provides, by feature.
struct fault_subjects {
  std::optional<testing::stash_implementation> stash;
  std::optional<testing::region_implementation> region;
  std::optional<testing::arena_implementation> arena;
  std::optional<testing::activation_implementation> activation;
  /// Gives back what a framework the implementations run on keeps cached (the plugin's
  /// release_cached_memory, ABI 1.3); returns false where the plugin has none. Empty: none.
  std::function<bool()> release_cached_memory;
};

/// The features a scenario exists for, in the order they run.
std::vector<std::string> scenario_features();

/// The implementation's name for `feature` in `subjects`, or nullopt when it is not provided.
std::optional<std::string> subject_name(const fault_subjects& subjects, const std::string& feature);

/// Whether the implementation of `feature` runs on the cuda executor (false when not provided).
bool subject_runs_on_cuda(const fault_subjects& subjects, const std::string& feature);

/// Runs the scenario of `feature` on `ex` (the cuda executor). Failures of the implementation are
/// in the result, never thrown; `unusable` says why it could not run (no interposer loaded, the
/// scenario's own setup failed).
scenario_result run_scenario(const std::string& feature, const fault_subjects& subjects,
                             executor& ex);

}  // namespace offloadkit::interpose
