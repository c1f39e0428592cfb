// Property batteries: each feature's checks are written once, as rapidcheck properties against the
// feature's interface and an executor, and run from two places: the ctest suites (through
// GoogleTest) and `offloadkit check` (through run_check). A feature's battery takes an
// implementation descriptor (implementation.hpp) and lists the properties its declared
// capabilities call for: `std::vector<check_case> stash_battery(const stash_implementation&)`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/executor.hpp"

namespace offloadkit {

/// An implementation's declared profile as a report shows it: each capability, policy and support
/// flag by the name of its field in the descriptor (implementation.hpp), with the value declared
/// ("yes" or "no" for a flag, the policy's name for a policy), in the descriptor's order.
using profile_flags = std::vector<std::pair<std::string, std::string>>;

/// One property of one battery for one implementation.
struct check_case {
  std::string feature;         ///< "executor", "stash", "region", "arena", "activation"
  std::string implementation;  ///< "host", "cuda", "reference", "optimized", ...
  std::string name;            ///< the property, e.g. "copy_round_trip"
  /// The property body: generates its inputs with *rc::gen::..., asserts with RC_ASSERT. It gets
  /// the executor to run on; it may wrap it in adaptors.
  std::function<void(executor&)> property;
  /// Cases to run by default (heavy properties lower it).
  int default_cases = 100;
  /// Devices the property needs on its executor. With fewer it has nothing to check there, and a
  /// runner that can say so (the ctest suites) reports it skipped rather than passed.
  int min_devices = 1;
  /// The property reads the device's free memory (executor::device_memory) to see that memory was
  /// released or not taken. Another process allocating on the same GPU moves that figure and can
  /// fail it: it needs the GPU to itself (`offloadkit check --free-memory only|without` splits a
  /// battery along this line, so that the others can run beside other work).
  bool reads_free_memory = false;
  /// Non-empty: the implementation's declared profile rules the property out, and this says how
  /// ("profile says stash() synchronizes the host: not capturable"). The property is not run; its
  /// outcome is "not applicable", never passed or failed.
  std::string not_applicable = {};
  /// The implementation's declared profile (testing::profile_of its descriptor, set by
  /// battery_list), for reports; empty for a battery of offloadkit's own that takes no
  /// descriptor (the executor, the traces).
  profile_flags profile = {};
};

/// A case that lists `name` for `implementation` as not applicable, for `why` (what the profile
/// says), so that a report shows every property of the battery with what became of it.
check_case not_applicable_case(std::string feature, std::string implementation, std::string name,
                               std::string why);

struct check_config {
  std::uint64_t seed = 0;  ///< 0: a fresh seed per run (printed in the result)
  int cases = 0;           ///< 0: each case's default_cases; otherwise exactly this many
  int max_size = 100;      ///< rapidcheck's size bound
  bool shrink = true;      ///< false: report the first failing case as found, without shrinking it
};

struct check_outcome {
  std::string feature, implementation, name, executor_name;
  int cases_run = 0;
  int cases_planned = 0;  ///< the case count the run asked for: replaying `seed` needs the same one
  bool passed = false;
  /// Not run: the executor lacks what the property needs (min_devices), or the implementation's
  /// profile rules it out (not_applicable); `message` says what. A skipped outcome is not passed
  /// and not failed.
  bool skipped = false;
  /// Skipped because the implementation's profile rules the property out (check_case's
  /// not_applicable); `message` is "not applicable: profile says ...".
  bool not_applicable = false;
  std::uint64_t seed = 0;
  std::string message;  ///< rapidcheck's counterexample and failure text; empty on success
};

/// The case count run_check asks rapidcheck for: cfg.cases when set (it may lower or raise the
/// property's default), otherwise the property's default_cases; never below 1.
int planned_cases(const check_case& c, const check_config& cfg);

/// The outcome of `c` before it runs on the executor named `executor_name`: its names, the seed
/// (cfg's, or a fresh one) and the planned case count; for a case the profile rules out, already
/// its whole (not applicable) outcome.
check_outcome outcome_before_run(const check_case& c, const std::string& executor_name,
                                 const check_config& cfg);

/// Runs one property under rapidcheck with the configured seed and case count. Never throws for a
/// failing property: the failure, its counterexample and the seed are in the outcome.
check_outcome run_check(const check_case& c, executor& ex, const check_config& cfg);

/// What a whole battery says of one implementation (typically a planted bug): the properties that
/// failed (a skipped one did not) and each failure's message.
struct battery_verdict {
  std::set<std::string> failed;
  std::map<std::string, std::string> messages;
};

/// Runs every property of `battery` with `cfg`, each on the executor `executor_for` gives for it
/// (the same one every time, or a fresh one per property so that a leak cannot spill over), and
/// prints the first lines of each failure with its seed.
battery_verdict run_battery(const std::vector<check_case>& battery, const check_config& cfg,
                            const std::function<executor&(const check_case&)>& executor_for);

/// How to reproduce an outcome: the command line that replays its seed.
std::string reproduce_command(const check_outcome& o);
/// The same for a program other than `offloadkit` that runs the same check command (a test
/// binary with its own cases): `program` replaces the leading "offloadkit".
std::string reproduce_command(const check_outcome& o, const std::string& program);

}  // namespace offloadkit
