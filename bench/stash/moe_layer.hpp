// The MoE layer that bench_stash and bench_stash_floor both measure: its experts' row counts.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace offloadkit::bench {

/// Row counts of a layer's `keys` experts: log-normal (sigma 0.8) scaled to `total` rows in all,
/// drawn from `seed`.
inline std::vector<std::uint64_t> layer_rows(std::uint64_t keys, std::uint64_t total,
                                             std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(0.0, 0.8);
  std::vector<double> w(keys);
  double sum = 0;
  for (auto& x : w) sum += (x = dist(rng));
  std::vector<std::uint64_t> out(keys);
  std::uint64_t given = 0;
  for (std::uint64_t k = 0; k < keys; ++k) {
    out[k] = static_cast<std::uint64_t>(static_cast<double>(total) * w[k] / sum);
    given += out[k];
  }
  if (keys != 0) out[0] += total - given;
  return out;
}

}  // namespace offloadkit::bench
