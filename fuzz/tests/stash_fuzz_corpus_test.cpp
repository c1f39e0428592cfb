// Runs the stash_ops fuzz target's interpreter over a fixed corpus, so that CI exercises it
// without clang or libFuzzer: hand-written inputs for the edge cases (empty pool, zero rows,
// overflow, double stash, empty restore, reset) and a deterministic pseudo-random corpus.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

std::string offloadkit_stash_ops_run(const std::uint8_t* data, std::size_t size);

namespace {

void expect_clean(const std::vector<std::uint8_t>& in, const std::string& what) {
  const std::string err = offloadkit_stash_ops_run(in.data(), in.size());
  EXPECT_EQ(err, "") << what;
}

// Op byte: low bits % 5 pick the op (0/1 stash, 2 restore, 3 reset, 4 clear status); bit 5 the
// layer, bits 6-7 the microbatch; a stash is followed by its row byte.
TEST(StashFuzzCorpus, HandWritten) {
  expect_clean({}, "empty input");
  expect_clean({3, 1, 5, 0, 0, 0, 4, 2}, "empty pool: zero-row stash fits, four rows overflow");
  expect_clean({8, 2, 10, 2, 1, 0, 10, 1, 10, 2, 2, 1, 7, 2}, "stash two keys, restore both");
  expect_clean({4, 3, 9, 1, 1, 0, 9, 0, 9, 2, 2, 2}, "double stash and double restore");
  expect_clean({4, 3, 9, 3, 3, 0, 9, 32, 9, 3, 0, 9, 2, 4}, "overflow then reset");
  expect_clean({24, 6, 19, 7, 7, 0, 19, 32, 19, 64, 19, 96, 19, 2, 34, 66, 98}, "full rows");
  expect_clean({1, 1, 0, 0, 0, 0, 0, 2, 4, 3}, "max_rows 0, no pages");
}

TEST(StashFuzzCorpus, PseudoRandomCorpus) {
  std::mt19937 rng(20251122);  // fixed: this is a corpus, not a property
  for (int i = 0; i < 150; ++i) {
    std::vector<std::uint8_t> in(5 + rng() % 60);
    for (auto& b : in) b = static_cast<std::uint8_t>(rng());
    const std::string err = offloadkit_stash_ops_run(in.data(), in.size());
    ASSERT_EQ(err, "") << "corpus input " << i;
  }
}

}  // namespace
