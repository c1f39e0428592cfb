// The paged-stash battery: every property written once against stash_interface and an executor,
// listed for an implementation descriptor (testing::stash_implementation) by what it declares:
// id-level page conservation only with caps.page_ids, graph capture only with caps.capturable,
// countdown fault injection only when its allocations go through the executor. Run by ctest and
// by `offloadkit check`; the reference and optimized stashes are the built-in descriptors. The
// property bodies are in properties/stash/src/, compiled once into offloadkit_stash_battery.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "offloadkit/stash/key.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::stash::testing {

// ---- codecs -------------------------------------------------------------------------------------

/// The key codecs the codec properties check: the library's by default (builtin_codecs()); a
/// planted test substitutes broken ones.
struct key_codecs {
  std::uint32_t (*encode)(const stash_key&) = nullptr;
  stash_key (*decode)(std::uint32_t) noexcept = nullptr;
  std::uint64_t (*legacy_encode)(const stash_key&) noexcept = nullptr;
  stash_key (*legacy_decode)(std::uint64_t) noexcept = nullptr;
  bool (*legacy_representable)(const stash_key&) noexcept = nullptr;
};

key_codecs builtin_codecs();

/// "The legacy codec is collision-free over the key ranges" — false. Expected to FAIL; the
/// counterexample (a key whose code decodes to another key) is left in *found.
check_case legacy_collision_search(const std::shared_ptr<std::pair<stash_key, stash_key>>& found);

}  // namespace offloadkit::stash::testing

namespace offloadkit::testing {

/// The battery for one implementation: the properties its capabilities and executor support
/// call for, named after it in the results.
std::vector<check_case> stash_battery(const stash_implementation& impl);

/// Key-codec properties (no implementation involved), of the library's codecs or of `codecs`.
std::vector<check_case> stash_codec_checks();
std::vector<check_case> stash_codec_checks(const stash::testing::key_codecs& codecs);

/// The built-in stashes as descriptors, with their true capabilities: the eager reference
/// (synchronizes with the host, keeps no page ids) and the paged optimized stash (both).
stash_implementation reference_stash_implementation();
stash_implementation optimized_stash_implementation();
std::vector<stash_implementation> builtin_stash_implementations();

/// Every paged-stash case: the codecs, and the battery of every built-in implementation.
std::vector<check_case> stash_checks();

}  // namespace offloadkit::testing
