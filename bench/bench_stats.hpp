// What the benchmarks share beyond their command lines: the statistic their figures report.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace offloadkit::bench {

/// The median of `x` (not empty); of an even count, the upper of the two middle values.
inline double median(std::vector<double> x) {
  const auto mid = x.begin() + static_cast<std::ptrdiff_t>(x.size() / 2);
  std::nth_element(x.begin(), mid, x.end());
  return *mid;
}

}  // namespace offloadkit::bench
