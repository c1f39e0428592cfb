// The device side of the paged stash: the pool's device-resident layout and the fused stash,
// restore and reset bodies. Each body runs over a fixed index space (a number of workers chosen
// when the pool is built), so the launch shape never depends on the row count, which is read on
// the device. Every worker sees the same freelist heads (nobody moves them during a launch),
// decides the same outcome, and copies its share (writing the key's page-table row as it goes);
// the last worker to have read the state commits, once its own copies are issued: it moves the
// freelist counters and marks the key's entry, or records the failure in the sticky status word
// and touches nothing else. The commit changes only what the workers read before they copy (the
// entries, the freelist positions, the status word), never what a copy reads or writes, so it
// needs no wait for the other workers' copies; the next launch sees both (stream order). The cuda
// back end runs these as kernels, the host back end runs the same bodies on its threads.
#pragma once

#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <cuda/atomic>

#include "offloadkit/host_device.hpp"

namespace offloadkit::stash::kernels {

/// A divisor fixed when the pool is built, divided by without a division: on a GPU a 64-bit
/// division is a subroutine of a hundred-odd dependent instructions, and a batch's plan would make
/// several per key. The quotient is estimated as the high half of n * m, m = floor((2^64 - 1) / d):
/// since m * d > 2^64 - 1 - d, n * m / 2^64 > n / d - 1 for every 64-bit n, so the estimate is
/// floor(n / d) or one less, and one correction makes it exact for every dividend.
struct divisor {
  std::uint64_t d;  ///< the divisor; 0 in a divisor that is never used (an empty tier, a walk)
  std::uint64_t m;  ///< floor((2^64 - 1) / d)
};

OFFLOADKIT_HD inline divisor make_divisor(std::uint64_t d) {
  return divisor{d, d == 0 ? 0 : ~std::uint64_t{0} / d};
}

/// The high 64 bits of the 128-bit product a * b.
OFFLOADKIT_HD inline std::uint64_t mul_high(std::uint64_t a, std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  constexpr std::uint64_t low = 0xffffffffu;
  const std::uint64_t ll = (a & low) * (b & low), lh = (a & low) * (b >> 32);
  const std::uint64_t hl = (a >> 32) * (b & low), hh = (a >> 32) * (b >> 32);
  const std::uint64_t mid = (ll >> 32) + (lh & low) + (hl & low);
  return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
#endif
}

struct quotient {
  std::uint64_t q, r;
};

OFFLOADKIT_HD inline quotient divide(std::uint64_t n, const divisor& x) {
  std::uint64_t q = mul_high(n, x.m);
  std::uint64_t r = n - q * x.d;
  if (r >= x.d) {
    ++q;
    r -= x.d;
  }
  return quotient{q, r};
}

struct ring_state {
  std::uint64_t head;  ///< position of the next page to hand out (monotonic)
  std::uint64_t tail;  ///< position where the next returned page goes (monotonic)
};

struct status_word {
  std::uint32_t code;  ///< status_code; 0 until the first failure, then sticky
  std::uint32_t key;   ///< pack_key() of the failing key
  std::uint64_t rows;
  std::uint64_t needed;
  std::uint64_t free_device;
  std::uint64_t free_pinned;
};

struct control_block {
  ring_state ring[2];  ///< [0] device tier, [1] pinned tier
  std::uint32_t done;  ///< workers that have read the state in this launch; the last resets it
  std::uint32_t next;  ///< work items handed out in this launch (for_each_work_item)
  status_word status;
};

enum : std::uint32_t { entry_empty = 0, entry_stashed = 1 };

struct page_entry {
  std::uint32_t state;
  std::uint32_t key;
  std::uint64_t rows;
  std::uint32_t device_pages;  ///< the first device_pages of the entry's pages are device pages
  std::uint32_t pages;
};

/// Status codes, as in status_code (stash.hpp), for device code.
enum : std::uint32_t {
  code_ok = 0,
  code_overflow = 1,
  code_double_stash = 2,
  code_restore_empty = 3,
  code_rows_too_large = 4
};

/// How the workers split a key's bytes. Workers form groups of `group` consecutive indices (one
/// thread block on a GPU, so a group's accesses coalesce); the bytes are cut into work items of at
/// most `chunk_units` copy units, none crossing a page, and handed out by for_each_work_item. A
/// group looks its page up once per item and its lanes copy consecutive units, so the copy runs
/// like a plain one with one page-table read per item.
struct unit_walk {
  std::uint64_t unit;             ///< bytes per copy unit (16, 8, 4, 2 or 1)
  std::uint64_t page_units;       ///< units per page
  std::uint64_t chunk_units;      ///< units per work item
  std::uint64_t chunks_per_page;  ///< work items of a full page
  /// page_units, chunk_units and chunks_per_page as divisors (divide)
  divisor by_page_units, by_chunk_units, by_chunks_per_page;
};

/// Pointers and sizes of one pool; trivially copyable, captured by value into every body.
struct pool_view {
  control_block* control;
  page_entry* entries;        ///< [max_keys]
  std::uint32_t* table;       ///< [max_keys * max_pages]: global page ids of each entry
  std::uint32_t* ids[2];      ///< freelist rings of tier-local page ids
  unsigned char* pool[2];     ///< page storage of each tier
  std::uint64_t capacity[2];  ///< pages of each tier
  std::uint64_t page_bytes;
  std::uint64_t rows_per_page;
  std::uint64_t row_bytes;
  std::uint64_t max_rows;
  std::uint64_t max_pages;  ///< page-table width: pages of max_rows rows
  std::uint64_t workers;    ///< the fixed index space of stash and restore (groups * group)
  std::uint64_t group;      ///< workers per group (copy_rows); a thread block on a GPU
  /// walk_of_unit of each copy unit (1, 2, 4, 8 and 16 bytes; index: the unit's log2), so that a
  /// batch's plan looks a key's walk up instead of dividing for it (derive_view).
  unit_walk walks[5];
  divisor by_rows_per_page;  ///< rows_per_page as a divisor (pages_of)
  divisor by_capacity[2];    ///< capacity[t] as a divisor (ring_mod)
};

/// Loads one copy unit (16, 8, 4, 2 or 1 bytes, aligned to its size) into a register.
OFFLOADKIT_HD inline uint4 load_unit(const unsigned char* src, unsigned unit) {
  uint4 r{};
  switch (unit) {
    case 16:
      r = *reinterpret_cast<const uint4*>(src);
      break;
    case 8: {
      const std::uint64_t x = *reinterpret_cast<const std::uint64_t*>(src);
      r.x = static_cast<unsigned>(x);
      r.y = static_cast<unsigned>(x >> 32);
      break;
    }
    case 4:
      r.x = *reinterpret_cast<const std::uint32_t*>(src);
      break;
    case 2:
      r.x = *reinterpret_cast<const std::uint16_t*>(src);
      break;
    default:
      r.x = *src;
      break;
  }
  return r;
}

OFFLOADKIT_HD inline void store_unit(unsigned char* dst, const uint4& r, unsigned unit) {
  switch (unit) {
    case 16:
      *reinterpret_cast<uint4*>(dst) = r;
      break;
    case 8:
      *reinterpret_cast<std::uint64_t*>(dst) = std::uint64_t{r.x} | (std::uint64_t{r.y} << 32);
      break;
    case 4:
      *reinterpret_cast<std::uint32_t*>(dst) = r.x;
      break;
    case 2:
      *reinterpret_cast<std::uint16_t*>(dst) = static_cast<std::uint16_t>(r.x);
      break;
    default:
      *dst = static_cast<unsigned char>(r.x);
      break;
  }
}

/// Address of page `id` (global: device tier 0..D-1, pinned tier D..).
OFFLOADKIT_HD inline unsigned char* page_address(const pool_view& v, std::uint64_t id) {
  return id < v.capacity[0] ? v.pool[0] + id * v.page_bytes
                            : v.pool[1] + (id - v.capacity[0]) * v.page_bytes;
}

/// Records the first failure; later failures leave the word as it is.
OFFLOADKIT_HD inline void record_status(const pool_view& v, std::uint32_t code, std::uint32_t key,
                                        std::uint64_t rows, std::uint64_t needed,
                                        std::uint64_t free_device, std::uint64_t free_pinned) {
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device> word(v.control->status.code);
  std::uint32_t expected = 0;
  if (word.compare_exchange_strong(expected, code, cuda::memory_order_acq_rel)) {
    v.control->status.key = key;
    v.control->status.rows = rows;
    v.control->status.needed = needed;
    v.control->status.free_device = free_device;
    v.control->status.free_pinned = free_pinned;
  }
}

/// Counts the calling worker's group as done with reading the state its launch decides from (the
/// entries, the freelist positions). On a GPU thread 0 counts its block with one atomic, after a
/// release fence that orders the reads of every thread of the block (the caller puts a barrier
/// between their last read and this call) before the count; nobody waits for the answer before
/// copying, so the atomic's round trip hides under the copies. On host threads each worker counts
/// itself. Returns the count before (thread 0's on a GPU; the other threads get 0).
OFFLOADKIT_HD inline std::uint32_t count_planned(const pool_view& v) {
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device> done(v.control->done);
#if defined(__CUDA_ARCH__)
  if (threadIdx.x != 0) return 0;
  cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_device);
  return done.fetch_add(blockDim.x, cuda::memory_order_relaxed);
#else
  return done.fetch_add(1u, cuda::memory_order_acq_rel);
#endif
}

/// Whether the worker whose count_planned returned `before` counted last, so that every worker of
/// the launch has read the state and the commit may change it: true for one worker per launch
/// (thread 0 of the last block on a GPU). It then resets the counter for the next launch (stream
/// order), and its acquire orders the commit after the other workers' reads.
OFFLOADKIT_HD inline bool counted_last(const pool_view& v, std::uint32_t before) {
#if defined(__CUDA_ARCH__)
  if (threadIdx.x != 0 || before + blockDim.x != v.workers) return false;
#else
  if (before + 1 != v.workers) return false;
#endif
  cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_device);
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device>(v.control->done)
      .store(0u, cuda::memory_order_relaxed);
  return true;
}

/// count_planned for a launch whose every thread reads the state itself (one key): a barrier
/// first, after every thread's reads.
OFFLOADKIT_HD inline std::uint32_t count_planned_block(const pool_view& v) {
#if defined(__CUDA_ARCH__)
  __syncthreads();
#endif
  return count_planned(v);
}

/// What every worker of a stash decides from the same device state.
struct stash_decision {
  std::uint32_t code;
  std::uint64_t rows;
  std::uint64_t need;
  std::uint64_t device_take;  ///< pages taken from the device tier (the rest from pinned)
  std::uint64_t free_device;
  std::uint64_t free_pinned;
};

/// Pages of `rows` rows.
OFFLOADKIT_HD inline std::uint64_t pages_of(const pool_view& v, std::uint64_t rows) {
  return divide(rows + v.rows_per_page - 1, v.by_rows_per_page).q;
}

/// The decision for a key in `state` with `rows` rows when the tiers have the given free pages.
OFFLOADKIT_HD inline stash_decision decide_stash_with(const pool_view& v, std::uint32_t state,
                                                      std::uint64_t rows, std::uint64_t free_device,
                                                      std::uint64_t free_pinned) {
  stash_decision d{};
  d.rows = rows;
  d.free_device = free_device;
  d.free_pinned = free_pinned;
  if (rows > v.max_rows) {
    d.code = code_rows_too_large;
    return d;
  }
  d.need = pages_of(v, rows);
  if (state != entry_empty) {
    d.code = code_double_stash;
    return d;
  }
  if (d.need > d.free_device + d.free_pinned) {
    d.code = code_overflow;
    return d;
  }
  d.code = code_ok;
  d.device_take = d.need < d.free_device ? d.need : d.free_device;
  return d;
}

/// The freelist positions a launch starts from; nothing moves them before its commit.
struct ring_view {
  std::uint64_t head[2];
  std::uint64_t tail[2];
  [[nodiscard]] OFFLOADKIT_HD std::uint64_t free(int tier) const { return tail[tier] - head[tier]; }
};

OFFLOADKIT_HD inline ring_view read_rings(const pool_view& v) {
  const ring_state* r = v.control->ring;
  return ring_view{{r[0].head, r[1].head}, {r[0].tail, r[1].tail}};
}

OFFLOADKIT_HD inline stash_decision decide_stash(const pool_view& v, const ring_view& rings,
                                                 std::uint32_t slot, std::uint64_t rows) {
  return decide_stash_with(v, v.entries[slot].state, rows, rings.free(0), rings.free(1));
}

/// Tier-local ring position of the j-th page from `head`, without a division per page.
OFFLOADKIT_HD inline std::uint64_t ring_pos(std::uint64_t head_mod, std::uint64_t j,
                                            std::uint64_t capacity) {
  std::uint64_t pos = head_mod + j;
  return pos >= capacity ? pos - capacity : pos;
}

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

/// The pages of a stash in progress: the first `device_take` come from the device ring at its
/// head, the rest from the pinned ring at its head.
struct fresh_page {
  const pool_view* v;
  std::uint64_t device_take, h0m, h1m;
  /// The global page id (device tier 0..D-1, pinned tier D..) of the j-th page.
  OFFLOADKIT_HD std::uint32_t operator()(std::uint64_t j) const {
    return j < device_take
               ? v->ids[0][ring_pos(h0m, j, v->capacity[0])]
               : static_cast<std::uint32_t>(
                     v->capacity[0] + v->ids[1][ring_pos(h1m, j - device_take, v->capacity[1])]);
  }
};

/// Returns a restored key's pages to the free slots past each ring's tail: `t0m` and `t1m` are the
/// slots of the key's first device and first pinned page (tier-local, reduced modulo the tier),
/// `device_pages` how many of its pages are device pages.
struct page_return {
  const pool_view* v;
  std::uint64_t device_pages, t0m, t1m;
  OFFLOADKIT_HD void operator()(std::uint64_t j, std::uint32_t id) const {
    if (j < device_pages) {
      v->ids[0][ring_pos(t0m, j, v->capacity[0])] = id;
    } else {
      v->ids[1][ring_pos(t1m, j - device_pages, v->capacity[1])] =
          static_cast<std::uint32_t>(id - v->capacity[0]);
    }
  }
};

/// A ring position reduced modulo its tier (0 for an empty tier).
OFFLOADKIT_HD inline std::uint64_t ring_mod(const pool_view& v, int tier, std::uint64_t pos) {
  return v.capacity[tier] != 0 ? divide(pos, v.by_capacity[tier]).r : 0;
}

struct stash_body {
  /// Launched programmatically (launch.hpp): nothing touches global memory before the wait.
  static constexpr bool programmatic_launch = true;
  pool_view v;
  unit_walk walk;
  const unsigned char* src;
  const std::uint64_t* rows;
  std::uint32_t slot;
  std::uint32_t key;

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    wait_for_prior_grids();
    const ring_view rings = read_rings(v);
    const stash_decision d = decide_stash(v, rings, slot, *rows);
    const std::uint32_t before = count_planned_block(v);
    if (d.code == code_ok) {
      const fresh_page pages{&v, d.device_take, ring_mod(v, 0, rings.head[0]),
                             ring_mod(v, 1, rings.head[1])};
      // The copies, and the key's page-table row entry by entry as each page's first item is
      // copied. Only this key's row is written, and only when the stash succeeds; the entry
      // becomes valid at the commit.
      std::uint32_t* row = v.table + std::uint64_t{slot} * v.max_pages;
      copy_rows<true>(v, walk, i, d.rows * v.row_bytes / walk.unit, const_cast<unsigned char*>(src),
                      pages, [row](std::uint64_t j, std::uint32_t id) { row[j] = id; });
    }
    if (!counted_last(v, before)) return;
    if (d.code != code_ok) {
      record_status(v, d.code, key, d.rows, d.need, d.free_device, d.free_pinned);
      return;
    }
    ring_state* ring = v.control->ring;
    page_entry& e = v.entries[slot];
    e.key = key;
    e.rows = d.rows;
    e.device_pages = static_cast<std::uint32_t>(d.device_take);
    e.pages = static_cast<std::uint32_t>(d.need);
    e.state = entry_stashed;
    ring[0].head += d.device_take;
    ring[1].head += d.need - d.device_take;
  }
};

struct restore_body {
  /// Launched programmatically (launch.hpp): nothing touches global memory before the wait.
  static constexpr bool programmatic_launch = true;
  pool_view v;
  unit_walk walk;
  unsigned char* dst;
  std::uint64_t* rows_out;  ///< may be null
  std::uint32_t slot;
  std::uint32_t key;

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    wait_for_prior_grids();
    const page_entry e = v.entries[slot];
    const ring_view rings = read_rings(v);
    const std::uint32_t before = count_planned_block(v);
    const bool ok = e.state == entry_stashed;
    if (ok) {
      // The copies, and the pages back into the free slots past each ring's tail as each page's
      // first item is copied; nothing pops before the commit moves the tails (stream order).
      const std::uint32_t* row = v.table + std::uint64_t{slot} * v.max_pages;
      copy_rows<false>(
          v, walk, i, e.rows * v.row_bytes / walk.unit, dst,
          [row](std::uint64_t j) { return row[j]; },
          page_return{&v, e.device_pages, ring_mod(v, 0, rings.tail[0]),
                      ring_mod(v, 1, rings.tail[1])});
    }
    if (!counted_last(v, before)) return;
    if (!ok) {
      record_status(v, code_restore_empty, key, 0, 0, rings.free(0), rings.free(1));
      if (rows_out != nullptr) *rows_out = 0;
      return;
    }
    ring_state* ring = v.control->ring;
    ring[0].tail += e.device_pages;
    ring[1].tail += e.pages - e.device_pages;
    if (rows_out != nullptr) *rows_out = e.rows;
    v.entries[slot].state = entry_empty;
  }
};

// ---- batches --------------------------------------------------------------------------------
// A batch issues many keys (a MoE layer's experts) in one launch with the result of one launch per
// key in batch order. The keys are distinct (checked on the host), so a key's outcome depends on
// the batch's earlier keys only through the free pages they take (stash) or the ring positions
// their pages return to (restore). Every worker plans the whole batch from the same device state.
// The groups copy the batch's work items whichever keys they belong to, so that a batch of small
// keys spreads over the whole launch: first each group's fixed item (below), then the items that
// the plan numbers, all keys' one after the other, taken as for one key (for_each_work_item). The
// group that counts last commits, one key per lane of its first warp, with the result that
// committing the keys in batch order would have.
//
// Fixed items: of a launch's B groups, group g first copies item g / n of key g % n (n keys), so
// key k < B has ceil((B - k) / n) such groups and its first min(items, that many) items are fixed;
// the plan numbers only the others. A group finds its fixed item from its own key's row count
// (stash) or entry (restore), without the plan: on a GPU every thread starts loading its part of
// it into shared memory while warp 0 plans (keys copied in 16-byte units, and for a restore only
// from a device page), and stores it once the plan says where (a stash's pages) and whether (a
// key that fails copies nothing).
//
// On a GPU the plan lives in the block's shared memory and warp 0 makes it from the block's copy
// of the keys: lane l reads keys 2l and 2l + 1 (their row counts and entries) and the rings in one
// round of loads, decides what each key can alone (one division for its pages, one for the items
// of its last page; the walks come from the pool's table), and the warp numbers the keys with
// prefix sums; only when the batch asks for more pages than are free (some key overflows, and
// which one depends on the order) does one thread walk the keys in order. On host threads each
// worker plans alone, in order.

/// Keys per batched launch: a batch's plan lives in one thread block's shared memory on a GPU,
/// two keys per lane of its first warp.
constexpr std::uint32_t max_batch_keys = 64;

/// Threads of a GPU group (a thread block), and 16-byte units one of them copies of a work item
/// at most (walk_of_unit: an item is at most 4 units per lane).
constexpr std::uint32_t gpu_group = 256;
constexpr std::uint32_t lane_units = 4;

struct batch_key {
  unsigned char* linear;  ///< stash: the source; restore: the destination
  std::uint64_t* rows;    ///< stash: the device row count; restore: rows_out (may be null)
  std::uint32_t slot;
  std::uint32_t key;        ///< pack_key() of the key
  std::uint32_t unit_log2;  ///< log2 of the copy unit of the linear buffer (see unit_walk)
  /// Restore: 1 when no later key of the batch names the same rows_out, so that this key's store
  /// is the one that stays, as with one launch per key in order.
  std::uint32_t last_rows;
};
static_assert(sizeof(batch_key) % sizeof(std::uint64_t) == 0,
              "with_plan copies the keys to shared memory in 8-byte words");

/// One key of a batch: its decision (as a launch of its own would make it), how it walks its
/// bytes, where its pages start in each ring after the batch's earlier keys, its work items (the
/// fixed ones first), where its numbered ones start among the batch's, and how many earlier keys
/// of the batch fail.
struct key_plan {
  stash_decision d;
  unit_walk walk;
  std::uint64_t device_at;
  std::uint64_t pinned_at;
  std::uint64_t units;      ///< copy units of the key's rows
  std::uint64_t items;      ///< work items of the key's rows
  std::uint64_t fixed;      ///< of them the fixed ones (fixed_items)
  std::uint64_t item_base;  ///< numbered items of the batch's earlier keys
  std::uint64_t failed_before;
};

OFFLOADKIT_HD inline unit_walk walk_of_unit(const pool_view& v, std::uint64_t unit) {
  const std::uint64_t page_units = v.page_bytes / unit;
  // On a GPU an item is one load batch per lane; on host threads a whole page.
  std::uint64_t chunk = page_units;
  if (v.group != 1 && lane_units * v.group < chunk) chunk = lane_units * v.group;
  const std::uint64_t chunks = (page_units + chunk - 1) / chunk;
  return unit_walk{unit,
                   page_units,
                   chunk,
                   chunks,
                   make_divisor(page_units),
                   make_divisor(chunk),
                   make_divisor(chunks)};
}

/// Fills what the view derives from its sizes (set first: rows and bytes per page, row bytes,
/// capacities, group): the walks of the units that divide a row (unit_log2_for picks no other;
/// the others stay empty) and the divisors.
inline void derive_view(pool_view& v) {
  for (std::uint64_t s = 0; s < 5; ++s) {
    const std::uint64_t unit = std::uint64_t{1} << s;
    v.walks[s] = v.row_bytes % unit == 0 ? walk_of_unit(v, unit) : unit_walk{};
  }
  v.by_rows_per_page = make_divisor(v.rows_per_page);
  v.by_capacity[0] = make_divisor(v.capacity[0]);
  v.by_capacity[1] = make_divisor(v.capacity[1]);
}

/// Copy units and work items of `rows` rows (at most max_rows) on their `need` pages (pages_of),
/// copied in units of 2^unit_log2 bytes: the same counts as items_of, with one division (for the
/// items of a last partial page) instead of two.
struct row_count {
  std::uint64_t units, items;
};
OFFLOADKIT_HD inline row_count count_rows(const pool_view& v, std::uint32_t unit_log2,
                                          std::uint64_t rows, std::uint64_t need) {
  const unit_walk& w = v.walks[unit_log2];
  const std::uint64_t full = need * v.rows_per_page == rows ? need : need - 1;
  const std::uint64_t rest = ((rows - full * v.rows_per_page) * v.row_bytes) >> unit_log2;
  return row_count{(rows * v.row_bytes) >> unit_log2,
                   full * w.chunks_per_page + divide(rest + w.chunk_units - 1, w.by_chunk_units).q};
}

/// Fixed items of key k of a batch of n keys with `items` work items, in a launch of `groups`.
OFFLOADKIT_HD inline std::uint64_t fixed_items(std::uint64_t items, std::uint32_t k,
                                               std::uint32_t n, std::uint64_t groups) {
  if (k >= groups) return 0;
  // 32-bit: a launch has at most 1024 groups (max_gpu_groups on a GPU, 32 on host threads).
  const auto share = static_cast<std::uint32_t>(groups - k + n - 1) / n;
  return items < share ? items : share;
}

/// Key k's copy units and work items (the fixed ones among them), from its plan's rows and pages.
OFFLOADKIT_HD inline void count_key_items(const pool_view& v, std::uint32_t unit_log2,
                                          std::uint32_t k, std::uint32_t n, std::uint64_t groups,
                                          key_plan& p) {
  const row_count c = count_rows(v, unit_log2, p.d.rows, p.d.need);
  p.units = c.units;
  p.items = c.items;
  p.fixed = fixed_items(c.items, k, n, groups);
}

/// A group's fixed item: item `item` of key `key`. On a GPU `staged` says that the calling thread
/// has its units of it loading into the block's staging buffer (stage_units), and a restore keeps
/// the page id it read them from.
struct fixed_item {
  std::uint32_t key;
  std::uint64_t item;
  bool staged;
  std::uint32_t id;
};

/// Pages and numbered work items a planned key contributes (none unless it succeeds).
OFFLOADKIT_HD inline std::uint64_t plan_pages(const key_plan& p) {
  return p.d.code == code_ok ? p.d.need : 0;
}
OFFLOADKIT_HD inline std::uint64_t plan_items(const key_plan& p) {
  return p.d.code == code_ok ? p.items - p.fixed : 0;
}
/// Device and pinned pages a planned key moves (stash: takes; restore: gives back).
OFFLOADKIT_HD inline std::uint64_t plan_device_pages(const key_plan& p) {
  return p.d.code == code_ok ? p.d.device_take : 0;
}
OFFLOADKIT_HD inline std::uint64_t plan_pinned_pages(const key_plan& p) {
  return p.d.code == code_ok ? p.d.need - p.d.device_take : 0;
}

/// The largest k in [from, n) whose item_base is at most t, for t in [plan[from].item_base, the
/// batch's total) (keys of no items share their base with the key after them).
OFFLOADKIT_HD inline std::uint32_t find_key(const key_plan* plan, std::uint32_t from,
                                            std::uint32_t n, std::uint64_t t) {
  std::uint32_t lo = from, hi = n;  // plan[lo] <= t < plan[hi]
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (plan[mid].item_base <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

#if defined(__CUDA_ARCH__)
/// Where item `item` lies in a key of `rows` rows on `need` pages copied in 16-byte units; false
/// when the key has no such item.
__device__ inline bool fixed_span(const pool_view& v, std::uint64_t item, std::uint64_t rows,
                                  std::uint64_t need, item_span& s) {
  const row_count c = count_rows(v, 4, rows, need);
  if (item >= c.items) return false;
  s = span_of(v.walks[4], item, c.units);
  return true;
}

/// Starts loading the calling thread's 16-byte units of `s` (those copy_span gives its lane), read
/// from `from` (the span's page or the linear buffer at the span's first unit), into `buf`: unit
/// lane + j * group for its j-th. Sizes and addresses are multiples of 16 (unit 16 only).
__device__ inline bool stage_units(uint4* buf, const item_span& s, const unsigned char* from) {
#if __CUDA_ARCH__ >= 800
  for (std::uint32_t j = 0; j < lane_units; ++j) {
    const std::uint64_t u = s.begin + threadIdx.x + std::uint64_t{j} * blockDim.x;
    if (u >= s.end) break;
    const auto to =
        static_cast<unsigned>(__cvta_generic_to_shared(buf + threadIdx.x + j * blockDim.x));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to),
                 "l"(__cvta_generic_to_global(from + u * 16))
                 : "memory");
  }
  return true;
#else
  static_cast<void>(buf);
  static_cast<void>(s);
  static_cast<void>(from);
  return false;
#endif
}

/// Waits for the calling thread's stage_units loads.
__device__ inline void wait_staged() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

/// Stores the calling thread's staged units of `s` to `to` (as stage_units' `from`).
__device__ inline void store_staged(const uint4* buf, const item_span& s, unsigned char* to) {
  wait_staged();
  for (std::uint32_t j = 0; j < lane_units; ++j) {
    const std::uint64_t u = s.begin + threadIdx.x + std::uint64_t{j} * blockDim.x;
    if (u >= s.end) break;
    *reinterpret_cast<uint4*>(to + u * 16) = buf[threadIdx.x + j * blockDim.x];
  }
}
#endif

/// copy_span, or on a GPU the store of the calling thread's staged units when `staged` is set.
template <bool ToPages>
OFFLOADKIT_HD inline void copy_item(const pool_view& v, const unit_walk& w, std::uint64_t lane,
                                    const item_span& s, unsigned char* linear, unsigned char* paged,
                                    const uint4* staged) {
#if defined(__CUDA_ARCH__)
  if (staged != nullptr) {
    store_staged(staged, s, ToPages ? paged : linear + s.first * 16);
    return;
  }
#else
  static_cast<void>(staged);
#endif
  copy_span<ToPages>(w, v.group, lane, s, linear, paged);
}

/// Worker i's share of a planned batch: `copy(k, span, staged)` for its group's fixed item (with
/// `staged` the staging buffer when the calling thread staged it, else null), then for each
/// numbered item that the group takes (for_each_work_item), with k its key and span where it lies
/// in the key. A group's numbered items only grow, so each search starts at the previous item's
/// key.
template <class Copy>
OFFLOADKIT_HD inline void for_each_item(const pool_view& v, const key_plan* plan, std::uint32_t n,
                                        std::uint64_t i, const fixed_item& f, const uint4* staged,
                                        const Copy& copy) {
  const key_plan& pf = plan[f.key];
  if (pf.d.code == code_ok && f.item < pf.items) {
    copy(f.key, span_of(pf.walk, f.item, pf.units), f.staged ? staged : nullptr);
  } else if (f.staged) {
#if defined(__CUDA_ARCH__)
    wait_staged();  // the key fails: its loads are dropped, but finish before the thread goes on
#endif
  }
  const key_plan& last = plan[n - 1];
  std::uint32_t k = 0;
  for_each_work_item(v, i, last.item_base + plan_items(last), [&](std::uint64_t t) {
    k = find_key(plan, k, n, t);
    const key_plan& p = plan[k];
    copy(k, span_of(p.walk, p.fixed + (t - p.item_base), p.units), nullptr);
  });
}

/// The commit of a batch, by the worker that counted last (`before`: its count_planned result)
/// once its copies are issued: `key(k)` for every key (on a GPU one lane of the block's first warp
/// per key, on host threads in order), then `rings()` once. The keys' commits touch distinct
/// entries, and a failing key records the status only when no earlier key of the batch failed, so
/// the result is the one an ordered commit would leave. Every thread of the launch calls it.
template <class Key, class Rings>
OFFLOADKIT_HD inline void commit_batch(const pool_view& v, std::uint32_t before, std::uint32_t n,
                                       const Key& key, const Rings& rings) {
#if defined(__CUDA_ARCH__)
  if (threadIdx.x >= 32) return;
  // Thread 0 knows whether its block counted last; its acquire, then the warp's barrier, order
  // every lane's commit after the other blocks' reads.
  const bool last = __shfl_sync(0xffffffffu, counted_last(v, before) ? 1 : 0, 0) != 0;
  if (!last) return;
  __syncwarp();
  for (std::uint32_t k = threadIdx.x; k < n; k += 32) key(k);
  if (threadIdx.x == 0) rings();
#else
  if (!counted_last(v, before)) return;
  for (std::uint32_t k = 0; k < n; ++k) key(k);
  rings();
#endif
}

/// Counts summed in warp 0's scan: a stash's pages (64-bit: their sum is checked against the
/// free pages before anything trusts it), numbered items and failed keys, a restore's device and
/// pinned pages (the pages of distinct held keys, so fewer than either tier), numbered items and
/// failed keys (a launch numbers fewer than 2^32 items).
struct stash_counts {
  std::uint64_t pages;
  std::uint32_t items, failed;
  OFFLOADKIT_HD stash_counts operator+(const stash_counts& y) const {
    return stash_counts{pages + y.pages, items + y.items, failed + y.failed};
  }
  OFFLOADKIT_HD stash_counts operator-(const stash_counts& y) const {
    return stash_counts{pages - y.pages, items - y.items, failed - y.failed};
  }
#if defined(__CUDA_ARCH__)
  template <class Shfl>
  __device__ stash_counts each(const Shfl& shfl) const {
    return stash_counts{shfl(pages), shfl(items), shfl(failed)};
  }
#endif
};
struct restore_counts {
  std::uint32_t device, pinned, items, failed;
  OFFLOADKIT_HD restore_counts operator+(const restore_counts& y) const {
    return restore_counts{device + y.device, pinned + y.pinned, items + y.items, failed + y.failed};
  }
  OFFLOADKIT_HD restore_counts operator-(const restore_counts& y) const {
    return restore_counts{device - y.device, pinned - y.pinned, items - y.items, failed - y.failed};
  }
#if defined(__CUDA_ARCH__)
  template <class Shfl>
  __device__ restore_counts each(const Shfl& shfl) const {
    return restore_counts{shfl(device), shfl(pinned), shfl(items), shfl(failed)};
  }
#endif
};

#if defined(__CUDA_ARCH__)
/// The lane's two keys (2 * lane, 2 * lane + 1) as counts `of(plan[k])`: their exclusive prefix
/// sums over the batch (warp 0's inclusive scan of the pairs), and the sum over all keys.
template <class Counts>
struct lane_scan {
  Counts first, second, total;
};
template <class Counts, class Of>
__device__ inline lane_scan<Counts> scan_pairs(const key_plan* plan, std::uint32_t n,
                                               const Of& of) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint32_t k0 = 2 * lane, k1 = k0 + 1;
  const Counts x0 = k0 < n ? of(plan[k0]) : Counts{};
  const Counts x1 = k1 < n ? of(plan[k1]) : Counts{};
  const Counts pair = x0 + x1;
  Counts incl = pair;
  for (unsigned s = 1; s < 32; s *= 2) {
    const Counts y = incl.each([s](auto x) { return __shfl_up_sync(0xffffffffu, x, s); });
    if (lane >= s) incl = incl + y;
  }
  lane_scan<Counts> r;
  r.first = incl - pair;
  r.second = r.first + x0;
  r.total = incl.each([](auto x) { return __shfl_sync(0xffffffffu, x, 31); });
  return r;
}
#endif

/// Reads every key (`fetch`, loads only, so that one key's loads need not wait for another's
/// decision) and the rings, decides each key alone (`decide`), numbers the keys (`scan` on a GPU;
/// `sequence` where the scan cannot settle the batch, and on host threads), then runs
/// `work(plan, rings, fixed, staged)` with worker i's fixed item. On a GPU warp 0 plans in the
/// block's shared memory, and every thread first reads its group's fixed key (`fetch_fixed`) and
/// stages its units of the fixed item (`stage_fixed`) while warp 0 plans.
template <class Body, class Work>
OFFLOADKIT_HD inline void with_plan(const Body& b, std::uint64_t i, const Work& work) {
  const std::uint64_t groups = groups_of(b.v);
  const auto g = static_cast<std::uint32_t>(group_of(b.v, i));
  fixed_item f{g % b.n, g / b.n, false, 0};
#if defined(__CUDA_ARCH__)
  __shared__ key_plan plan[max_batch_keys];
  __shared__ ring_view shared_rings;
  __shared__ uint4 staged[lane_units * gpu_group];
  __shared__ batch_key keys[max_batch_keys];
  // The keys into shared memory, a parameter word per thread: reads of distinct parameter words
  // in one warp are served one after the other, so warp 0 reading its lanes' keys itself would
  // wait for up to 32 of them per word. They are the launch's own: launched programmatically,
  // the block copies them while the kernel before it in the stream may still be finishing.
  {
    const auto* from = reinterpret_cast<const std::uint64_t*>(b.keys);
    auto* to = reinterpret_cast<std::uint64_t*>(keys);
    constexpr std::uint32_t words = sizeof(batch_key) / sizeof(std::uint64_t);
    for (std::uint32_t w = threadIdx.x; w < b.n * words; w += blockDim.x) to[w] = from[w];
  }
  wait_for_prior_grids();
  const typename Body::fixed_input fin = b.fetch_fixed(f);
  __syncthreads();
  const std::uint32_t k0 = 2 * threadIdx.x, k1 = k0 + 1;
  typename Body::input in0{}, in1{};
  ring_view rings{};
  if (threadIdx.x < 32) {
    if (k0 < b.n) in0 = b.fetch(keys[k0]);
    if (k1 < b.n) in1 = b.fetch(keys[k1]);
    rings = read_rings(b.v);
  }
  b.stage_fixed(f, fin, staged);
  if (threadIdx.x < 32) {
    if (k0 < b.n) b.decide(k0, keys[k0], in0, groups, plan[k0]);
    if (k1 < b.n) b.decide(k1, keys[k1], in1, groups, plan[k1]);
    __syncwarp();
    if (!b.scan(plan, rings) && threadIdx.x == 0) b.sequence(plan, rings);
    if (threadIdx.x == 0) shared_rings = rings;
  }
  __syncthreads();
  work(static_cast<const key_plan*>(plan), static_cast<const ring_view&>(shared_rings), f,
       static_cast<const uint4*>(staged));
#else
  key_plan plan[max_batch_keys];
  for (std::uint32_t k = 0; k < b.n; ++k)
    b.decide(k, b.keys[k], b.fetch(b.keys[k]), groups, plan[k]);
  const ring_view rings = read_rings(b.v);
  b.sequence(plan, rings);
  work(static_cast<const key_plan*>(plan), rings, f, static_cast<const uint4*>(nullptr));
#endif
}

struct stash_batch_body {
  /// Three blocks per multiprocessor: the launch is one wave (workers_for), so its bandwidth
  /// needs blocks more than registers.
  static constexpr unsigned max_block_threads = gpu_group;
  static constexpr unsigned min_blocks_per_sm = 3;
  /// Launched programmatically (launch.hpp): with_plan copies the keys to shared memory before
  /// the wait and touches global memory only after it.
  static constexpr bool programmatic_launch = true;
  pool_view v;
  std::uint32_t n;
  batch_key keys[max_batch_keys];

  struct input {
    std::uint32_t state;
    std::uint64_t rows;
  };
  OFFLOADKIT_HD input fetch(const batch_key& key) const {
    return input{v.entries[key.slot].state, *key.rows};
  }

  /// What key k's own launch decides without looking at the free pages: rows past max_rows, a
  /// key that still holds rows, or the pages it needs; and its work items.
  OFFLOADKIT_HD void decide(std::uint32_t k, const batch_key& key, const input& in,
                            std::uint64_t groups, key_plan& p) const {
    constexpr std::uint64_t unlimited = ~std::uint64_t{0} / 4;
    p.d = decide_stash_with(v, in.state, in.rows, unlimited, unlimited);
    p.walk = v.walks[key.unit_log2];
    p.units = p.items = p.fixed = 0;
    if (p.d.code == code_ok) count_key_items(v, key.unit_log2, k, n, groups, p);
  }

#if defined(__CUDA_ARCH__)
  /// The fixed key's row count.
  using fixed_input = std::uint64_t;
  __device__ fixed_input fetch_fixed(const fixed_item& f) const { return *keys[f.key].rows; }

  /// Stages the fixed item from the key's source when it has the item (its rows within max_rows:
  /// a stash that fails for its state or the free pages copies nothing, but its source holds its
  /// rows) and copies in 16-byte units.
  __device__ void stage_fixed(fixed_item& f, std::uint64_t rows, uint4* buf) const {
    item_span s{};
    if (keys[f.key].unit_log2 != 4 || rows > v.max_rows ||
        !fixed_span(v, f.item, rows, pages_of(v, rows), s)) {
      return;
    }
    f.staged = stage_units(buf, s, keys[f.key].linear + s.first * 16);
  }
#endif

  /// Decides the keys in batch order against the free pages the earlier ones leave.
  OFFLOADKIT_HD void sequence(key_plan* plan, const ring_view& rings) const {
    std::uint64_t free_device = rings.free(0), free_pinned = rings.free(1);
    std::uint64_t device_at = 0, pinned_at = 0, items = 0, failed = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      key_plan& p = plan[k];
      p.d.free_device = free_device;
      p.d.free_pinned = free_pinned;
      p.device_at = device_at;
      p.pinned_at = pinned_at;
      p.item_base = items;
      p.failed_before = failed;
      if (p.d.code == code_ok && p.d.need > free_device + free_pinned) p.d.code = code_overflow;
      if (p.d.code != code_ok) {
        ++failed;
        continue;
      }
      p.d.device_take = p.d.need < free_device ? p.d.need : free_device;
      const std::uint64_t pinned_take = p.d.need - p.d.device_take;
      free_device -= p.d.device_take;
      free_pinned -= pinned_take;
      device_at += p.d.device_take;
      pinned_at += pinned_take;
      items += plan_items(p);
    }
  }

#if defined(__CUDA_ARCH__)
  /// Warp 0: when every key that can take pages fits in the free pages, none overflows and each
  /// key's place follows from prefix sums of the pages and items before it: it takes device pages
  /// while the device tier lasts, then pinned ones. Returns false (nothing written) otherwise.
  __device__ bool scan(key_plan* plan, const ring_view& rings) const {
    const auto s = scan_pairs<stash_counts>(plan, n, [](const key_plan& p) {
      return stash_counts{plan_pages(p), static_cast<std::uint32_t>(plan_items(p)),
                          p.d.code != code_ok ? 1u : 0u};
    });
    const std::uint64_t free_device = rings.free(0), free_pinned = rings.free(1);
    if (s.total.pages > free_device + free_pinned) return false;
    const unsigned lane = threadIdx.x & 31u;
    for (std::uint32_t half = 0; half < 2; ++half) {
      const std::uint32_t k = 2 * lane + half;
      if (k >= n) continue;
      key_plan& p = plan[k];
      const stash_counts& before = half == 0 ? s.first : s.second;
      const std::uint64_t on_device = before.pages < free_device ? before.pages : free_device;
      p.device_at = on_device;
      p.pinned_at = before.pages - on_device;
      p.d.free_device = free_device - on_device;
      p.d.free_pinned = free_pinned - p.pinned_at;
      p.item_base = before.items;
      p.failed_before = before.failed;
      if (p.d.code == code_ok) {
        p.d.device_take = p.d.need < p.d.free_device ? p.d.need : p.d.free_device;
      }
    }
    return true;
  }
#endif

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    with_plan(
        *this, i,
        [&](const key_plan* plan, const ring_view& rings, const fixed_item& f,
            const uint4* staged) {
          const std::uint64_t lane = lane_of(v, i);
          // Warp 0 read the state for the whole block, before with_plan's barrier.
          const std::uint32_t before = count_planned(v);
          const std::uint64_t h0m = ring_mod(v, 0, rings.head[0]);
          const std::uint64_t h1m = ring_mod(v, 1, rings.head[1]);
          // The copies, and each key's page-table row entry by entry as each page's first item is
          // copied: written only for keys that succeed, and valid from the commit on.
          for_each_item(v, plan, n, i, f, staged,
                        [&](std::uint32_t k, const item_span& s, const uint4* from) {
                          const key_plan& p = plan[k];
                          const fresh_page pages{&v, p.d.device_take,
                                                 ring_pos(h0m, p.device_at, v.capacity[0]),
                                                 ring_pos(h1m, p.pinned_at, v.capacity[1])};
                          const std::uint32_t id = pages(s.page);
                          if (s.begin == 0 && lane == 0) {
                            v.table[std::uint64_t{keys[k].slot} * v.max_pages + s.page] = id;
                          }
                          copy_item<true>(v, p.walk, lane, s, keys[k].linear, page_address(v, id),
                                          from);
                        });
          commit_batch(
              v, before, n,
              [&](std::uint32_t k) {
                const stash_decision& d = plan[k].d;
                if (d.code != code_ok) {
                  if (plan[k].failed_before == 0) {
                    record_status(v, d.code, keys[k].key, d.rows, d.need, d.free_device,
                                  d.free_pinned);
                  }
                  return;
                }
                page_entry& e = v.entries[keys[k].slot];
                e.key = keys[k].key;
                e.rows = d.rows;
                e.device_pages = static_cast<std::uint32_t>(d.device_take);
                e.pages = static_cast<std::uint32_t>(d.need);
                e.state = entry_stashed;
              },
              [&] {
                // The heads the launch started from (nothing moved them since) past every key's
                // pages.
                const key_plan& last = plan[n - 1];
                v.control->ring[0].head = rings.head[0] + last.device_at + plan_device_pages(last);
                v.control->ring[1].head = rings.head[1] + last.pinned_at + plan_pinned_pages(last);
              });
        });
  }
};

struct restore_batch_body {
  /// Three blocks per multiprocessor: the launch is one wave (workers_for), so its bandwidth
  /// needs blocks more than registers.
  static constexpr unsigned max_block_threads = gpu_group;
  static constexpr unsigned min_blocks_per_sm = 3;
  /// Launched programmatically (launch.hpp): with_plan copies the keys to shared memory before
  /// the wait and touches global memory only after it.
  static constexpr bool programmatic_launch = true;
  pool_view v;
  std::uint32_t n;
  batch_key keys[max_batch_keys];

  using input = page_entry;
  OFFLOADKIT_HD input fetch(const batch_key& key) const { return v.entries[key.slot]; }

  /// Key k's entry: a held key moves its pages back, an empty one fails as its own launch would.
  OFFLOADKIT_HD void decide(std::uint32_t k, const batch_key& key, const input& e,
                            std::uint64_t groups, key_plan& p) const {
    p.d = stash_decision{};
    p.walk = v.walks[key.unit_log2];
    p.units = p.items = p.fixed = 0;
    if (e.state != entry_stashed) {
      p.d.code = code_restore_empty;
      return;
    }
    p.d.code = code_ok;
    p.d.rows = e.rows;
    p.d.need = e.pages;
    p.d.device_take = e.device_pages;
    count_key_items(v, key.unit_log2, k, n, groups, p);
  }

#if defined(__CUDA_ARCH__)
  /// The fixed key's entry, and the id of the page that holds the fixed item (read before the
  /// entry says whether the key holds pages; used only when it does).
  struct fixed_input {
    page_entry e;
    std::uint32_t id;
  };
  __device__ fixed_input fetch_fixed(const fixed_item& f) const {
    fixed_input in{v.entries[keys[f.key].slot], 0};
    if (keys[f.key].unit_log2 != 4) return in;
    const std::uint64_t page = page_of_item(v.walks[4], f.item);
    if (page < v.max_pages) in.id = v.table[std::uint64_t{keys[f.key].slot} * v.max_pages + page];
    return in;
  }

  /// Stages the fixed item from its page when the key holds it and copies in 16-byte units.
  __device__ void stage_fixed(fixed_item& f, const fixed_input& in, uint4* buf) const {
    // Only from a device page: loads of pinned pages wait on the link, and while they do, warp
    // 0's loads of the plan queue behind them.
    item_span s{};
    if (keys[f.key].unit_log2 != 4 || in.e.state != entry_stashed || in.id >= v.capacity[0] ||
        !fixed_span(v, f.item, in.e.rows, in.e.pages, s)) {
      return;
    }
    f.id = in.id;
    f.staged = stage_units(buf, s, page_address(v, in.id));
  }
#endif

  /// Places each held key's pages past the tails after the earlier keys' pages; an empty key
  /// records the free pages a restore of its own would have seen.
  OFFLOADKIT_HD void sequence(key_plan* plan, const ring_view& rings) const {
    std::uint64_t device_at = 0, pinned_at = 0, items = 0, failed = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      key_plan& p = plan[k];
      p.device_at = device_at;
      p.pinned_at = pinned_at;
      p.item_base = items;
      p.failed_before = failed;
      p.d.free_device = rings.free(0) + device_at;
      p.d.free_pinned = rings.free(1) + pinned_at;
      device_at += plan_device_pages(p);
      pinned_at += plan_pinned_pages(p);
      items += plan_items(p);
      if (p.d.code != code_ok) ++failed;
    }
  }

#if defined(__CUDA_ARCH__)
  /// Warp 0: the same numbering from prefix sums (a restore never depends on free pages).
  __device__ bool scan(key_plan* plan, const ring_view& rings) const {
    const auto s = scan_pairs<restore_counts>(plan, n, [](const key_plan& p) {
      return restore_counts{static_cast<std::uint32_t>(plan_device_pages(p)),
                            static_cast<std::uint32_t>(plan_pinned_pages(p)),
                            static_cast<std::uint32_t>(plan_items(p)),
                            p.d.code != code_ok ? 1u : 0u};
    });
    const unsigned lane = threadIdx.x & 31u;
    for (std::uint32_t half = 0; half < 2; ++half) {
      const std::uint32_t k = 2 * lane + half;
      if (k >= n) continue;
      key_plan& p = plan[k];
      const restore_counts& before = half == 0 ? s.first : s.second;
      p.device_at = before.device;
      p.pinned_at = before.pinned;
      p.item_base = before.items;
      p.failed_before = before.failed;
      p.d.free_device = rings.free(0) + before.device;
      p.d.free_pinned = rings.free(1) + before.pinned;
    }
    return true;
  }
#endif

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    with_plan(
        *this, i,
        [&](const key_plan* plan, const ring_view& rings, const fixed_item& f,
            const uint4* staged) {
          const std::uint64_t lane = lane_of(v, i);
          // Warp 0 read the state for the whole block, before with_plan's barrier.
          const std::uint32_t before = count_planned(v);
          const std::uint64_t t0m = ring_mod(v, 0, rings.tail[0]);
          const std::uint64_t t1m = ring_mod(v, 1, rings.tail[1]);
          // The copies, and the pages back into the free slots past each ring's tail, after the
          // earlier keys', as each page's first item is copied.
          for_each_item(
              v, plan, n, i, f, staged,
              [&](std::uint32_t k, const item_span& s, const uint4* from) {
                const key_plan& p = plan[k];
                const std::uint32_t id =
                    from != nullptr ? f.id
                                    : v.table[std::uint64_t{keys[k].slot} * v.max_pages + s.page];
                if (s.begin == 0 && lane == 0) {
                  page_return{&v, p.d.device_take, ring_pos(t0m, p.device_at, v.capacity[0]),
                              ring_pos(t1m, p.pinned_at, v.capacity[1])}(s.page, id);
                }
                copy_item<false>(v, p.walk, lane, s, keys[k].linear, page_address(v, id), from);
              });
          commit_batch(
              v, before, n,
              [&](std::uint32_t k) {
                const key_plan& p = plan[k];
                std::uint64_t* rows_out = keys[k].last_rows != 0 ? keys[k].rows : nullptr;
                if (p.d.code != code_ok) {
                  if (p.failed_before == 0) {
                    record_status(v, code_restore_empty, keys[k].key, 0, 0, p.d.free_device,
                                  p.d.free_pinned);
                  }
                  if (rows_out != nullptr) *rows_out = 0;
                  return;
                }
                if (rows_out != nullptr) *rows_out = p.d.rows;
                v.entries[keys[k].slot].state = entry_empty;
              },
              [&] {
                // The tails the launch started from (nothing moved them since) past every key's
                // pages.
                const key_plan& last = plan[n - 1];
                v.control->ring[0].tail = rings.tail[0] + last.device_at + plan_device_pages(last);
                v.control->ring[1].tail = rings.tail[1] + last.pinned_at + plan_pinned_pages(last);
              });
        });
  }
};

/// Fills both freelists with every page, empties the page table and clears the status word.
/// Index space: max(D, P, max_keys, 1).
struct reset_body {
  pool_view v;
  std::uint64_t max_keys;

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    if (i < v.capacity[0]) v.ids[0][i] = static_cast<std::uint32_t>(i);
    if (i < v.capacity[1]) v.ids[1][i] = static_cast<std::uint32_t>(i);
    if (i < max_keys) v.entries[i].state = entry_empty;
    if (i == 0) {
      v.control->ring[0].head = 0;
      v.control->ring[0].tail = v.capacity[0];
      v.control->ring[1].head = 0;
      v.control->ring[1].tail = v.capacity[1];
      v.control->done = 0;
      v.control->next = 0;
      v.control->status = status_word{};
    }
  }
};

}  // namespace offloadkit::stash::kernels
