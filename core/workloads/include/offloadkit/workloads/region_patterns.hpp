// Device-side content for checks and benchmarks of regions: a seeded word pattern written and
// verified on the device, and an affine update used as the body of captured graphs. Each is one
// OFFLOADKIT_HD functor launched through the executor, so host and cuda runs share it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "offloadkit/executor.hpp"
#include "offloadkit/host_device.hpp"

namespace offloadkit::region {

/// Word i of the pattern with `seed` (a cheap 32-bit mix, distinct per seed and per index).
OFFLOADKIT_HD inline std::uint32_t pattern_word(std::uint32_t seed, std::size_t i) {
  std::uint32_t x = seed * 0x9E3779B9u ^ static_cast<std::uint32_t>(i) * 0x85EBCA6Bu ^
                    static_cast<std::uint32_t>(i >> 32) * 0xC2B2AE35u;
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  return x;
}

/// The update a registered graph applies to every word in checks: w = w * 3 + 7.
OFFLOADKIT_HD inline std::uint32_t affine_word(std::uint32_t w) { return w * 3u + 7u; }

/// Writes pattern_word(seed, i) to the first `words` 32-bit words at `p`, in order on `s`.
void write_pattern(executor& ex, void* p, std::size_t words, std::uint32_t seed, stream_ref s);
/// Applies affine_word to the first `words` words at `p`, in order on `s` (capturable).
void apply_affine(executor& ex, void* p, std::size_t words, stream_ref s);
/// Adds to *mismatches (a counter in device memory: device-scope atomics) the number of words at
/// `p` that differ from pattern_word(seed, i), in order on `s`.
void count_mismatches(executor& ex, const void* p, std::size_t words, std::uint32_t seed,
                      unsigned long long* mismatches, stream_ref s);
/// The number of words at `p` (on `s`'s device) that differ from pattern_word(seed, i), counted
/// on the device after the work already on `s`; waits for `s`.
unsigned long long mismatched_words(executor& ex, const void* p, std::size_t words,
                                    std::uint32_t seed, stream_ref s);

}  // namespace offloadkit::region
