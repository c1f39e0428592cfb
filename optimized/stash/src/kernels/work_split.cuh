// How a launch splits a key's copy: work items of whole or partial pages, each group's and
// lane's share of them (for_each_work_item), and copying a span of rows between a buffer and pages.
#pragma once

#include "pool_layout.cuh"

namespace offloadkit::stash::kernels {
/// Work items of a key's `units` units: chunks_per_page for each full page, and for a last
/// partial page only as many as its units fill, so that no worker waits on an empty item.
OFFLOADKIT_HD inline std::uint64_t items_of(const unit_walk& w, std::uint64_t units) {
  const quotient pages = divide(units, w.by_page_units);
  return pages.q * w.chunks_per_page + divide(pages.r + w.chunk_units - 1, w.by_chunk_units).q;
}

/// Where work item `item` of a key's `units` units lies: the key's page `page`, whose first unit
/// is unit `first` of the linear buffer, and units [begin, end) of that page. Items number the
/// pages in order and each page's items from its start, so begin == 0 marks a page's first item
/// (every page of the key has one).
struct item_span {
  std::uint64_t page;
  std::uint64_t first;
  std::uint64_t begin;
  std::uint64_t end;
};

/// The key's page that holds work item `item` (span_of's `page`).
OFFLOADKIT_HD inline std::uint64_t page_of_item(const unit_walk& w, std::uint64_t item) {
  return divide(item, w.by_chunks_per_page).q;
}

OFFLOADKIT_HD inline item_span span_of(const unit_walk& w, std::uint64_t item,
                                       std::uint64_t units) {
  item_span s{};
  s.page = page_of_item(w, item);
  s.first = s.page * w.page_units;
  s.begin = (item - s.page * w.chunks_per_page) * w.chunk_units;
  s.end = s.begin + w.chunk_units;
  if (s.end > w.page_units) s.end = w.page_units;
  if (s.end > units - s.first) s.end = units - s.first;
  return s;
}

/// Copies the units of `s` between a linear buffer (the first rows of an oversized buffer) and
/// `paged`, the start of the span's page, as lane `lane` of a group of `group` workers. Each lane
/// loads up to four units before it stores any, so that several loads are in flight.
template <bool ToPages>
OFFLOADKIT_HD inline void copy_span(const unit_walk& w, std::uint64_t group, std::uint64_t lane,
                                    const item_span& s, unsigned char* linear,
                                    unsigned char* paged) {
  constexpr std::uint64_t batch = 4;
  const auto unit = static_cast<unsigned>(w.unit);
  unsigned char* const lin = linear + s.first * w.unit;
  for (std::uint64_t u0 = s.begin + lane; u0 < s.end; u0 += batch * group) {
    uint4 tmp[batch];
    std::uint64_t n = 0;
    for (std::uint64_t u = u0; n < batch && u < s.end; ++n, u += group) {
      tmp[n] = load_unit((ToPages ? lin : paged) + u * w.unit, unit);
    }
    std::uint64_t k = 0;
    for (std::uint64_t u = u0; k < n; ++k, u += group) {
      store_unit((ToPages ? paged : lin) + u * w.unit, tmp[k], unit);
    }
  }
}

/// Copies the span `s` of a key's page `id` as lane `lane` of its group, and runs `on_page(j, id)`
/// on lane 0 for the page's first item, so that the page's bookkeeping (once per page, each page
/// has one first item) needs no pass of its own after the copies.
template <bool ToPages, class OnPage>
OFFLOADKIT_HD inline void copy_page_span(const pool_view& v, const unit_walk& w, std::uint64_t lane,
                                         const item_span& s, unsigned char* linear,
                                         std::uint32_t id, const OnPage& on_page) {
  if (s.begin == 0 && lane == 0) on_page(s.page, id);
  copy_span<ToPages>(w, v.group, lane, s, linear, page_address(v, id));
}

/// Worker i's group, its lane in the group and the launch's groups. On a GPU a launch runs one
/// index per thread (its workers are whole blocks, fewer than the launch's grid cap), so these are
/// the block, the thread and the grid, without a 64-bit division.
OFFLOADKIT_HD inline std::uint64_t group_of(const pool_view& v, std::uint64_t i) {
#if defined(__CUDA_ARCH__)
  static_cast<void>(v);
  static_cast<void>(i);
  return blockIdx.x;
#else
  return i / v.group;
#endif
}
OFFLOADKIT_HD inline std::uint64_t lane_of(const pool_view& v, std::uint64_t i) {
#if defined(__CUDA_ARCH__)
  static_cast<void>(v);
  static_cast<void>(i);
  return threadIdx.x;
#else
  return i % v.group;
#endif
}
OFFLOADKIT_HD inline std::uint64_t groups_of(const pool_view& v) {
#if defined(__CUDA_ARCH__)
  static_cast<void>(v);
  return gridDim.x;
#else
  return v.workers / v.group;
#endif
}

/// Runs `work(t)` for the work items t in [0, items) that worker i's group takes; every group of
/// the launch calls it with the same `items`, and each item goes to exactly one group, in
/// increasing order within a group. Group g's first item is g. On a GPU a group then takes the
/// next item from a launch-wide counter as it finishes one, so that a block that runs slower or
/// starts later (its multiprocessor shared with other work) takes fewer: thread 0 asks for the
/// next item before the copies of the current one and the block reads the answer after them, so
/// the counter's round trip hides under the copies. Every group that had an item asks once more
/// and gets one past the end: that makes `items` requests in all, and the one that gets the last
/// resets the counter for the next launch (stream order). A launch has fewer than 2^32 items (the
/// pool's constructor checks its pages). On host threads group g takes g, g + groups, ...
template <class Work>
OFFLOADKIT_HD inline void for_each_work_item(const pool_view& v, std::uint64_t i,
                                             std::uint64_t items, const Work& work) {
  const std::uint64_t groups = groups_of(v);
  std::uint64_t t = group_of(v, i);
#if defined(__CUDA_ARCH__)
  __shared__ std::uint32_t handed[2];
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device> next(v.control->next);
  for (unsigned round = 0; t < items; ++round) {
    std::uint32_t asked = 0;
    if (threadIdx.x == 0) asked = next.fetch_add(1u, cuda::memory_order_relaxed);
    work(t);
    if (threadIdx.x == 0) {
      handed[round & 1] = asked;
      if (asked == items - 1) next.store(0u, cuda::memory_order_relaxed);
    }
    // Thread 0 writes the other slot in the next round, which every thread reaches only after
    // reading this one.
    __syncthreads();
    t = groups + handed[round & 1];
  }
#else
  for (; t < items; t += groups) work(t);
#endif
}

/// Worker i's share of one key's `units` units (for_each_work_item over the key's items);
/// `id_of(j)` gives the global id of the key's j-th page, `on_page` as in copy_page_span.
template <bool ToPages, class IdOf, class OnPage>
OFFLOADKIT_HD inline void copy_rows(const pool_view& v, const unit_walk& w, std::uint64_t i,
                                    std::uint64_t units, unsigned char* linear, const IdOf& id_of,
                                    const OnPage& on_page) {
  const std::uint64_t lane = lane_of(v, i);
  for_each_work_item(v, i, items_of(w, units), [&](std::uint64_t t) {
    const item_span s = span_of(w, t, units);
    copy_page_span<ToPages>(v, w, lane, s, linear, id_of(s.page), on_page);
  });
}

}  // namespace offloadkit::stash::kernels
