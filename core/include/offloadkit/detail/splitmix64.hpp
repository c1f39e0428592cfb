// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014): a
// tiny, well-mixed generator, so that a seed names one exact sequence, and its finalizer, a
// bijective mix of 64 bits that turns neighbouring inputs (indices, keys) into unrelated values.
// Host and device code (checks' patterns, delay sequences, benchmarks' data) share this one copy.
#pragma once

#include <cstdint>

#include "offloadkit/host_device.hpp"

namespace offloadkit::detail {

/// The increment between successive states: 2^64 divided by the golden ratio, odd.
inline constexpr std::uint64_t splitmix64_gamma = 0x9E3779B97F4A7C15ull;

/// The finalizer: every bit of `z` affects every bit of the result.
OFFLOADKIT_HD constexpr std::uint64_t splitmix64_mix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Advances `state` and returns the next value of its sequence.
OFFLOADKIT_HD constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  return splitmix64_mix(state += splitmix64_gamma);
}

/// The value that follows `x` (splitmix64 without keeping the state): a hash of `x`.
OFFLOADKIT_HD constexpr std::uint64_t splitmix64_hash(std::uint64_t x) noexcept {
  return splitmix64_mix(x + splitmix64_gamma);
}

}  // namespace offloadkit::detail
