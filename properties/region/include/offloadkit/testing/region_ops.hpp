// The region op-sequence interpreter shared by the fuzz target and its corpus test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace offloadkit::region {

/// Runs the ops that `data` encodes on a region over the host executor; returns the first
/// violated invariant, or an empty string. Never crashes and never throws for any input.
std::string region_ops_run(const std::uint8_t* data, std::size_t size);

}  // namespace offloadkit::region
