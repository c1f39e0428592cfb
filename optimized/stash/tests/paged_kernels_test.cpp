// The batch plan's arithmetic on the host: division by a pool's fixed divisors is exact, pages_of
// and count_rows give the pages, units and work items that a key's own launch counts (items_of over
// its units), and the fixed items of a launch's groups are each key's first fixed_items() items,
// each taken by exactly one group.
#include "paged_kernels.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

namespace dk = offloadkit::stash::kernels;

dk::pool_view view_of(std::uint64_t row_bytes, std::uint64_t rows_per_page, std::uint64_t group) {
  dk::pool_view v{};
  v.row_bytes = row_bytes;
  v.rows_per_page = rows_per_page;
  v.page_bytes = row_bytes * rows_per_page;
  v.group = group;
  dk::derive_view(v);
  return v;
}

TEST(PagedKernels, DivideByAFixedDivisorIsExact) {
  std::mt19937_64 rng(5);
  constexpr std::uint64_t top = ~std::uint64_t{0};
  std::vector<std::uint64_t> divisors{
      1, 2, 3, 7, 64, 1000, 32768, 0x80000000u, 0xffffffffu, 0x100000001u, top / 3, top - 1, top};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + (rng() >> (rng() % 64)));
  int checked = 0;
  for (const std::uint64_t d : divisors) {
    const dk::divisor x = dk::make_divisor(d);
    std::vector<std::uint64_t> dividends{0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, top - 1, top};
    for (int i = 0; i < 200; ++i) dividends.push_back(rng() >> (rng() % 64));
    for (const std::uint64_t n : dividends) {
      const dk::quotient q = dk::divide(n, x);
      ASSERT_EQ(q.q, n / d) << n << " / " << d;
      ASSERT_EQ(q.r, n % d) << n << " % " << d;
      ++checked;
    }
  }
  EXPECT_GT(checked, 40000);
}

TEST(PagedKernels, CountRowsMatchesTheCountsOfOneKeysLaunch) {
  std::mt19937_64 rng(20261126);
  int checked = 0;
  for (const std::uint64_t group : {std::uint64_t{1}, std::uint64_t{dk::gpu_group}}) {
    for (int trial = 0; trial < 3000; ++trial) {
      const std::uint64_t row_bytes = (1 + rng() % 97) << (rng() % 5);
      const std::uint64_t rows_per_page = 1 + rng() % 200;
      const dk::pool_view v = view_of(row_bytes, rows_per_page, group);
      for (std::uint32_t s = 0; s < 5; ++s) {
        const std::uint64_t unit = std::uint64_t{1} << s;
        if (row_bytes % unit != 0) continue;
        const std::uint64_t rows = rng() % (6 * rows_per_page + 1);
        const std::uint64_t need = dk::pages_of(v, rows);
        const dk::row_count c = dk::count_rows(v, s, rows, need);
        const dk::unit_walk w = dk::walk_of_unit(v, unit);
        const std::uint64_t units = rows * row_bytes / unit;
        ASSERT_EQ(need, (rows + rows_per_page - 1) / rows_per_page)
            << "rows " << rows << ", rows per page " << rows_per_page;
        ASSERT_EQ(c.units, units) << "rows " << rows << ", row bytes " << row_bytes;
        ASSERT_EQ(c.items, dk::items_of(w, units))
            << "rows " << rows << ", row bytes " << row_bytes << ", rows per page " << rows_per_page
            << ", unit " << unit << ", group " << group;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 6000);
}

TEST(PagedKernels, FixedItemsAreEachKeysFirstItemsTakenOnce) {
  std::mt19937_64 rng(11);
  for (const std::uint64_t groups : {1, 3, 7, 32, 396, 1024}) {
    for (const std::uint32_t n : {1u, 2u, 8u, 63u, 64u}) {
      std::vector<std::uint64_t> items(n);
      for (auto& x : items) x = rng() % 3 == 0 ? 0 : rng() % 40;
      // What the groups take: group g item g / n of key g % n, when the key has it.
      std::vector<std::vector<int>> taken(n);
      for (auto& t : taken) t.assign(64, 0);
      for (std::uint64_t g = 0; g < groups; ++g) {
        const auto k = static_cast<std::uint32_t>(g % n);
        const std::uint64_t item = g / n;
        if (item < items[k]) ++taken[k][item];
      }
      for (std::uint32_t k = 0; k < n; ++k) {
        const std::uint64_t fixed = dk::fixed_items(items[k], k, n, groups);
        ASSERT_LE(fixed, items[k]);
        for (std::uint64_t item = 0; item < 64; ++item) {
          ASSERT_EQ(taken[k][item], item < fixed ? 1 : 0)
              << "groups " << groups << ", keys " << n << ", key " << k << " of " << items[k]
              << " items, fixed " << fixed << ", item " << item;
        }
      }
    }
  }
}

}  // namespace
