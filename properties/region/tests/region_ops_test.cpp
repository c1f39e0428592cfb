// The region op interpreter of the fuzz target, run over seeded random inputs so that every CI
// run covers what the fuzzer covers in its first moments.
#include "offloadkit/testing/region_ops.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "testing.hpp"

namespace {

TEST(RegionOps, RandomOpSequencesKeepTheInvariants) {
  std::mt19937_64 rng(offloadkit::testing::seed());
  for (int i = 0; i < 150; ++i) {
    std::vector<std::uint8_t> input(4 + rng() % 80);
    for (auto& b : input) b = static_cast<std::uint8_t>(rng());
    const std::string failure = offloadkit::region::region_ops_run(input.data(), input.size());
    ASSERT_TRUE(failure.empty()) << "input " << i << ": " << failure;
  }
}

TEST(RegionOps, EmptyAndTinyInputsAreFine) {
  EXPECT_EQ(offloadkit::region::region_ops_run(nullptr, 0), "");
  const std::uint8_t one[] = {1};
  EXPECT_EQ(offloadkit::region::region_ops_run(one, 1), "");
}

}  // namespace
