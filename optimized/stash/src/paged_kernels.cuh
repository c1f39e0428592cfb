// The device side of the paged stash: the pool's device-resident layout and the fused stash,
// restore and reset bodies. Each body runs over a fixed index space (a number of workers chosen
// when the pool is built), so the launch shape never depends on the row count, which is read on
// the device. Every worker sees the same freelist heads (nobody moves them during a launch),
// decides the same outcome, and copies its share; the last worker to finish commits: it moves the
// freelist counters and writes the page-table entry, or records the failure in the sticky status
// word and touches nothing else. The cuda back end runs these as kernels, the host back end runs
// the same bodies on its threads.
#pragma once

#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <cuda/atomic>

#include "offloadkit/host_device.hpp"

namespace offloadkit::stash::kernels {

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
  std::uint32_t done;  ///< workers finished in the current launch; the last one resets it
  std::uint32_t pad;
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

/// True for exactly one worker per launch: the last to finish. acq_rel makes every worker's
/// reads and copies happen before the commit, and the commit's reset of the counter happen before
/// the next launch (stream order). On the GPU a thread block adds its count with one atomic, after
/// a barrier that orders its threads' accesses before that thread's release, so the counter sees
/// one atomic per block (a few hundred per launch) instead of one per warp. Every thread of every
/// block must call it: the launch runs one index per thread in blocks of v.group threads.
OFFLOADKIT_HD inline bool last_to_finish(const pool_view& v) {
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device> done(v.control->done);
#if defined(__CUDA_ARCH__)
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    const std::uint32_t prev = done.fetch_add(blockDim.x, cuda::memory_order_acq_rel);
    last = prev + blockDim.x == v.workers;
    if (last) done.store(0u, cuda::memory_order_relaxed);
  }
  __syncthreads();
  return last && threadIdx.x == 0;
#else
  const std::uint32_t prev = done.fetch_add(1u, cuda::memory_order_acq_rel);
  if (prev + 1 == v.workers) {
    done.store(0u, cuda::memory_order_relaxed);
    return true;
  }
  return false;
#endif
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
  d.need = (rows + v.rows_per_page - 1) / v.rows_per_page;
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

OFFLOADKIT_HD inline stash_decision decide_stash(const pool_view& v, std::uint32_t slot,
                                                 std::uint64_t rows) {
  return decide_stash_with(v, v.entries[slot].state, rows,
                           v.control->ring[0].tail - v.control->ring[0].head,
                           v.control->ring[1].tail - v.control->ring[1].head);
}

/// Tier-local ring position of the j-th page from `head`, without a division per page.
OFFLOADKIT_HD inline std::uint64_t ring_pos(std::uint64_t head_mod, std::uint64_t j,
                                            std::uint64_t capacity) {
  std::uint64_t pos = head_mod + j;
  return pos >= capacity ? pos - capacity : pos;
}

/// How the workers split a key's bytes. Workers form groups of `group` consecutive indices (one
/// thread block on a GPU, so a group's accesses coalesce); the bytes are cut into work items of at
/// most `chunk_units` copy units, none crossing a page, and group g takes items g, g + groups, ...
/// A group looks its page up once per item and its lanes copy consecutive units, so the copy runs
/// like a plain one with one page-table read per item.
struct unit_walk {
  std::uint64_t unit;             ///< bytes per copy unit (16, 8, 4, 2 or 1)
  std::uint64_t page_units;       ///< units per page
  std::uint64_t chunk_units;      ///< units per work item
  std::uint64_t chunks_per_page;  ///< work items per page
};

/// Copies work item `item` of a key's `units` units between a linear buffer (the first rows of an
/// oversized buffer) and its pages, as lane `lane` of a group of `group` workers; `page_addr(j)`
/// gives the key's j-th page. Each lane loads up to four units before it stores any, so that
/// several loads are in flight.
template <bool ToPages, class PageAddr>
OFFLOADKIT_HD inline void copy_item(const unit_walk& w, std::uint64_t group, std::uint64_t lane,
                                    std::uint64_t item, std::uint64_t units, unsigned char* linear,
                                    const PageAddr& page_addr) {
  constexpr std::uint64_t batch = 4;
  const auto unit = static_cast<unsigned>(w.unit);
  // A 32-bit division where it is exact: a 64-bit one is a long instruction sequence on a GPU.
  const std::uint64_t j =
      item <= 0xffffffffu && w.chunks_per_page <= 0xffffffffu
          ? static_cast<std::uint32_t>(item) / static_cast<std::uint32_t>(w.chunks_per_page)
          : item / w.chunks_per_page;
  const std::uint64_t first = j * w.page_units;  // the page's first unit in the linear buffer
  const std::uint64_t begin = (item - j * w.chunks_per_page) * w.chunk_units;
  std::uint64_t end = begin + w.chunk_units;
  if (end > w.page_units) end = w.page_units;
  if (end > units - first) end = units - first;
  unsigned char* const paged = page_addr(j);
  unsigned char* const lin = linear + first * w.unit;
  for (std::uint64_t u0 = begin + lane; u0 < end; u0 += batch * group) {
    uint4 tmp[batch];
    std::uint64_t n = 0;
    for (std::uint64_t u = u0; n < batch && u < end; ++n, u += group) {
      tmp[n] = load_unit((ToPages ? lin : paged) + u * w.unit, unit);
    }
    std::uint64_t k = 0;
    for (std::uint64_t u = u0; k < n; ++k, u += group) {
      store_unit((ToPages ? paged : lin) + u * w.unit, tmp[k], unit);
    }
  }
}

/// Copies worker i's share of one key's `units` units: group g takes work items g, g + groups, ...
template <bool ToPages, class PageAddr>
OFFLOADKIT_HD inline void copy_rows(const pool_view& v, const unit_walk& w, std::uint64_t i,
                                    std::uint64_t units, unsigned char* linear,
                                    const PageAddr& page_addr) {
  const std::uint64_t group = v.group;
  const std::uint64_t groups = v.workers / group;
  const std::uint64_t g = i / group, lane = i - g * group;
  const std::uint64_t pages = (units + w.page_units - 1) / w.page_units;
  const std::uint64_t items = pages * w.chunks_per_page;
  for (std::uint64_t item = g; item < items; item += groups) {
    copy_item<ToPages>(w, group, lane, item, units, linear, page_addr);
  }
}

/// The j-th page of a stash in progress: the first `device_take` pages come from the device ring
/// at its head, the rest from the pinned ring at its head.
struct fresh_page {
  const pool_view* v;
  std::uint64_t device_take, h0m, h1m;
  /// The global page id (device tier 0..D-1, pinned tier D..) of the j-th page.
  OFFLOADKIT_HD std::uint32_t id(std::uint64_t j) const {
    return j < device_take
               ? v->ids[0][ring_pos(h0m, j, v->capacity[0])]
               : static_cast<std::uint32_t>(
                     v->capacity[0] + v->ids[1][ring_pos(h1m, j - device_take, v->capacity[1])]);
  }
  OFFLOADKIT_HD unsigned char* operator()(std::uint64_t j) const { return page_address(*v, id(j)); }
};

/// The j-th page of a stashed key, from its page-table row.
struct held_page {
  const pool_view* v;
  const std::uint32_t* row;
  OFFLOADKIT_HD unsigned char* operator()(std::uint64_t j) const {
    return page_address(*v, row[j]);
  }
};

struct stash_body {
  pool_view v;
  unit_walk walk;
  const unsigned char* src;
  const std::uint64_t* rows;
  std::uint32_t slot;
  std::uint32_t key;

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    const stash_decision d = decide_stash(v, slot, *rows);
    if (d.code == code_ok) {
      const std::uint64_t h0 = v.control->ring[0].head, h1 = v.control->ring[1].head;
      const fresh_page pages{&v, d.device_take, v.capacity[0] ? h0 % v.capacity[0] : 0,
                             v.capacity[1] ? h1 % v.capacity[1] : 0};
      copy_rows<true>(v, walk, i, d.rows * v.row_bytes / walk.unit, const_cast<unsigned char*>(src),
                      pages);
      // The key's page-table row, shared out among the workers (a serial loop in the commit
      // would be one thread's chain of dependent loads per page). Only this key's row is written,
      // and only when the stash succeeds; the entry becomes valid at the commit.
      std::uint32_t* row = v.table + std::uint64_t{slot} * v.max_pages;
      for (std::uint64_t j = i; j < d.need; j += v.workers) row[j] = pages.id(j);
    }
    if (!last_to_finish(v)) return;
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
  pool_view v;
  unit_walk walk;
  unsigned char* dst;
  std::uint64_t* rows_out;  ///< may be null
  std::uint32_t slot;
  std::uint32_t key;

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    const page_entry& e = v.entries[slot];
    const bool ok = e.state == entry_stashed;
    if (ok) {
      const std::uint32_t* row = v.table + std::uint64_t{slot} * v.max_pages;
      const held_page pages{&v, row};
      copy_rows<false>(v, walk, i, e.rows * v.row_bytes / walk.unit, dst, pages);
      // The pages go back into the free slots past each ring's tail, shared out among the
      // workers; nothing pops before the commit moves the tails (stream order).
      const ring_state* ring = v.control->ring;
      const std::uint64_t t0 = v.capacity[0] ? ring[0].tail % v.capacity[0] : 0;
      const std::uint64_t t1 = v.capacity[1] ? ring[1].tail % v.capacity[1] : 0;
      for (std::uint64_t j = i; j < e.pages; j += v.workers) {
        const std::uint32_t id = row[j];
        if (j < e.device_pages) {
          v.ids[0][ring_pos(t0, j, v.capacity[0])] = id;
        } else {
          v.ids[1][ring_pos(t1, j - e.device_pages, v.capacity[1])] =
              static_cast<std::uint32_t>(id - v.capacity[0]);
        }
      }
    }
    if (!last_to_finish(v)) return;
    if (!ok) {
      record_status(v, code_restore_empty, key, 0, 0,
                    v.control->ring[0].tail - v.control->ring[0].head,
                    v.control->ring[1].tail - v.control->ring[1].head);
      if (rows_out != nullptr) *rows_out = 0;
      return;
    }
    page_entry& me = v.entries[slot];
    ring_state* ring = v.control->ring;
    ring[0].tail += me.device_pages;
    ring[1].tail += me.pages - me.device_pages;
    if (rows_out != nullptr) *rows_out = me.rows;
    me.state = entry_empty;
  }
};

// ---- batches --------------------------------------------------------------------------------
// A batch issues many keys (a MoE layer's experts) in one launch with the result of one launch per
// key in batch order. The keys are distinct (checked on the host), so a key's outcome depends on
// the batch's earlier keys only through the free pages they take (stash) or the ring positions
// their pages return to (restore). Every worker plans the whole batch from the same device state;
// the plan numbers the work items and pages of all keys one after the other, and group g copies
// the batch's items g, g + groups, ... whichever keys they belong to, so that a batch of small keys
// spreads over the whole launch. The last worker commits the keys in batch order.
//
// On a GPU the plan lives in the block's shared memory: lane k reads key k (its row count, its
// entry) and decides what it can alone, warp 0 numbers the keys with prefix sums, and only when the
// batch asks for more pages than are free (some key overflows, and which one depends on the order)
// does one thread walk the keys in order. On host threads each worker plans alone, in order.

/// Keys per batched launch: a batch's plan lives in one thread block's shared memory on a GPU,
/// one key per lane of its first two warps.
constexpr std::uint32_t max_batch_keys = 64;

struct batch_key {
  unsigned char* linear;  ///< stash: the source; restore: the destination
  std::uint64_t* rows;    ///< stash: the device row count; restore: rows_out (may be null)
  std::uint32_t slot;
  std::uint32_t key;   ///< pack_key() of the key
  std::uint32_t unit;  ///< copy unit of the linear buffer (see unit_walk)
  std::uint32_t pad;
};

/// One key of a batch: its decision (as a launch of its own would make it), how it walks its
/// bytes, where its pages start in each ring after the batch's earlier keys, and where its work
/// items and pages start among the batch's.
struct key_plan {
  stash_decision d;
  unit_walk walk;
  std::uint64_t device_at;
  std::uint64_t pinned_at;
  std::uint64_t item_base;
  std::uint64_t page_base;
  std::uint64_t units;  ///< copy units of the key's rows, computed once for all its work items
};

OFFLOADKIT_HD inline unit_walk walk_of_unit(const pool_view& v, std::uint64_t unit) {
  const std::uint64_t page_units = v.page_bytes / unit;
  // On a GPU an item is one load batch per lane; on host threads a whole page.
  std::uint64_t chunk = page_units;
  if (v.group != 1 && 4 * v.group < chunk) chunk = 4 * v.group;
  return unit_walk{unit, page_units, chunk, (page_units + chunk - 1) / chunk};
}

/// Work items and pages a planned key contributes (none unless it succeeds).
OFFLOADKIT_HD inline std::uint64_t plan_pages(const key_plan& p) {
  return p.d.code == code_ok ? p.d.need : 0;
}
OFFLOADKIT_HD inline std::uint64_t plan_items(const key_plan& p) {
  return plan_pages(p) * p.walk.chunks_per_page;
}

/// The largest k < n whose `base` is at most t: the key whose range holds t, when t lies below
/// the batch's total (keys of empty ranges share their base with the key after them).
template <class Base>
OFFLOADKIT_HD inline std::uint32_t find_key(const key_plan* plan, std::uint32_t n, std::uint64_t t,
                                            const Base& base) {
  std::uint32_t lo = 0, hi = n;  // plan[lo] <= t < plan[hi]
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (base(plan[mid]) <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/// Worker i's share of a planned batch: `copy(k, item)` for each work item of the batch that its
/// group takes (group g: items g, g + groups, ...), then `page(k, j)` for each page of the batch
/// that the worker takes (i, i + workers, ...); k is the key and item / j count within the key.
template <class Copy, class Page>
OFFLOADKIT_HD inline void for_each_share(const pool_view& v, const key_plan* plan, std::uint32_t n,
                                         std::uint64_t i, const Copy& copy, const Page& page) {
  const std::uint64_t groups = v.workers / v.group;
  const key_plan& last = plan[n - 1];
  const std::uint64_t items = last.item_base + plan_items(last);
  for (std::uint64_t t = i / v.group; t < items; t += groups) {
    const std::uint32_t k = find_key(plan, n, t, [](const key_plan& p) { return p.item_base; });
    copy(k, t - plan[k].item_base);
  }
  const std::uint64_t pages = last.page_base + plan_pages(last);
  for (std::uint64_t q = i; q < pages; q += v.workers) {
    const std::uint32_t k = find_key(plan, n, q, [](const key_plan& p) { return p.page_base; });
    page(k, q - plan[k].page_base);
  }
}

/// Inclusive prefix sums of three counts over the 32 lanes of warp 0 (GPU only).
struct triple {
  std::uint64_t a, b, c;
};
#if defined(__CUDA_ARCH__)
__device__ inline triple warp_inclusive_scan(triple x) {
  const unsigned lane = threadIdx.x & 31u;
  for (unsigned d = 1; d < 32; d *= 2) {
    const std::uint64_t a = __shfl_up_sync(0xffffffffu, x.a, d);
    const std::uint64_t b = __shfl_up_sync(0xffffffffu, x.b, d);
    const std::uint64_t c = __shfl_up_sync(0xffffffffu, x.c, d);
    if (lane >= d) {
      x.a += a;
      x.b += b;
      x.c += c;
    }
  }
  return x;
}
#endif

/// Runs `load(k, plan[k])` for every key, then numbers the keys: on a GPU in the block's shared
/// memory (`scan` on warp 0, `sequence` by one thread when the scan cannot settle the batch), on
/// host threads in the worker's own storage with `sequence`; then `work(plan)`.
template <class Body, class Work>
OFFLOADKIT_HD inline void with_plan(const Body& b, const Work& work) {
#if defined(__CUDA_ARCH__)
  __shared__ key_plan plan[max_batch_keys];
  if (threadIdx.x < b.n) b.load(threadIdx.x, plan[threadIdx.x]);
  __syncthreads();
  if (threadIdx.x < 32 && !b.scan(plan) && threadIdx.x == 0) b.sequence(plan);
  __syncthreads();
  work(static_cast<const key_plan*>(plan));
#else
  key_plan plan[max_batch_keys];
  for (std::uint32_t k = 0; k < b.n; ++k) b.load(k, plan[k]);
  b.sequence(plan);
  work(static_cast<const key_plan*>(plan));
#endif
}

/// The lane's two keys (2 * lane, 2 * lane + 1) of a warp scan, as counts `of(plan[k])`, and
/// their exclusive prefix sums over the batch; `total` is the sum over all keys.
struct lane_scan {
  triple first, second, total;
};
#if defined(__CUDA_ARCH__)
template <class Of>
__device__ inline lane_scan scan_pairs(const key_plan* plan, std::uint32_t n, const Of& of) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint32_t k0 = 2 * lane, k1 = k0 + 1;
  const triple x0 = k0 < n ? of(plan[k0]) : triple{0, 0, 0};
  const triple x1 = k1 < n ? of(plan[k1]) : triple{0, 0, 0};
  const triple pair{x0.a + x1.a, x0.b + x1.b, x0.c + x1.c};
  const triple incl = warp_inclusive_scan(pair);
  lane_scan r;
  r.first = triple{incl.a - pair.a, incl.b - pair.b, incl.c - pair.c};
  r.second = triple{r.first.a + x0.a, r.first.b + x0.b, r.first.c + x0.c};
  r.total = triple{__shfl_sync(0xffffffffu, incl.a, 31), __shfl_sync(0xffffffffu, incl.b, 31),
                   __shfl_sync(0xffffffffu, incl.c, 31)};
  return r;
}
#endif

struct stash_batch_body {
  pool_view v;
  std::uint32_t n;
  batch_key keys[max_batch_keys];

  /// What key k's own launch decides without looking at the free pages: rows past max_rows, a
  /// key that still holds rows, or the pages it needs.
  OFFLOADKIT_HD void load(std::uint32_t k, key_plan& p) const {
    constexpr std::uint64_t unlimited = ~std::uint64_t{0} / 4;
    p.d = decide_stash_with(v, v.entries[keys[k].slot].state, *keys[k].rows, unlimited, unlimited);
    p.walk = walk_of_unit(v, keys[k].unit);
    p.units = p.d.code == code_ok ? p.d.rows * v.row_bytes / p.walk.unit : 0;
  }

  /// Decides the keys in batch order against the free pages the earlier ones leave.
  OFFLOADKIT_HD void sequence(key_plan* plan) const {
    std::uint64_t free_device = v.control->ring[0].tail - v.control->ring[0].head;
    std::uint64_t free_pinned = v.control->ring[1].tail - v.control->ring[1].head;
    std::uint64_t device_at = 0, pinned_at = 0, items = 0, pages = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      key_plan& p = plan[k];
      p.d.free_device = free_device;
      p.d.free_pinned = free_pinned;
      p.device_at = device_at;
      p.pinned_at = pinned_at;
      p.item_base = items;
      p.page_base = pages;
      if (p.d.code != code_ok) continue;
      if (p.d.need > free_device + free_pinned) {
        p.d.code = code_overflow;
        continue;
      }
      p.d.device_take = p.d.need < free_device ? p.d.need : free_device;
      const std::uint64_t pinned_take = p.d.need - p.d.device_take;
      free_device -= p.d.device_take;
      free_pinned -= pinned_take;
      device_at += p.d.device_take;
      pinned_at += pinned_take;
      items += plan_items(p);
      pages += p.d.need;
    }
  }

#if defined(__CUDA_ARCH__)
  /// Warp 0: when every key that can take pages fits in the free pages, none overflows and each
  /// key's place follows from prefix sums of the pages and items before it: it takes device pages
  /// while the device tier lasts, then pinned ones. Returns false (nothing written) otherwise.
  __device__ bool scan(key_plan* plan) const {
    const lane_scan s = scan_pairs(plan, n, [](const key_plan& p) {
      return triple{plan_pages(p), plan_items(p), 0};
    });
    const std::uint64_t free_device = v.control->ring[0].tail - v.control->ring[0].head;
    const std::uint64_t free_pinned = v.control->ring[1].tail - v.control->ring[1].head;
    if (s.total.a > free_device + free_pinned) return false;
    const unsigned lane = threadIdx.x & 31u;
    for (std::uint32_t half = 0; half < 2; ++half) {
      const std::uint32_t k = 2 * lane + half;
      if (k >= n) continue;
      key_plan& p = plan[k];
      const triple& before = half == 0 ? s.first : s.second;
      const std::uint64_t on_device = before.a < free_device ? before.a : free_device;
      p.device_at = on_device;
      p.pinned_at = before.a - on_device;
      p.d.free_device = free_device - on_device;
      p.d.free_pinned = free_pinned - p.pinned_at;
      p.item_base = before.b;
      p.page_base = before.a;
      if (p.d.code == code_ok) {
        p.d.device_take = p.d.need < p.d.free_device ? p.d.need : p.d.free_device;
      }
    }
    return true;
  }
#endif

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    with_plan(*this, [&](const key_plan* plan) {
      const std::uint64_t lane = i % v.group;
      const std::uint64_t h0m = v.capacity[0] ? v.control->ring[0].head % v.capacity[0] : 0;
      const std::uint64_t h1m = v.capacity[1] ? v.control->ring[1].head % v.capacity[1] : 0;
      const auto pages_of = [&](const key_plan& p) {
        return fresh_page{&v, p.d.device_take, ring_pos(h0m, p.device_at, v.capacity[0]),
                          ring_pos(h1m, p.pinned_at, v.capacity[1])};
      };
      // The copies, then each key's page-table row, written only for keys that succeed and valid
      // from the commit on.
      for_each_share(
          v, plan, n, i,
          [&](std::uint32_t k, std::uint64_t item) {
            const key_plan& p = plan[k];
            copy_item<true>(p.walk, v.group, lane, item, p.units, keys[k].linear, pages_of(p));
          },
          [&](std::uint32_t k, std::uint64_t j) {
            v.table[std::uint64_t{keys[k].slot} * v.max_pages + j] = pages_of(plan[k]).id(j);
          });
      if (!last_to_finish(v)) return;
      std::uint64_t device_taken = 0, pinned_taken = 0;
      for (std::uint32_t k = 0; k < n; ++k) {
        const stash_decision& d = plan[k].d;
        if (d.code != code_ok) {
          record_status(v, d.code, keys[k].key, d.rows, d.need, d.free_device, d.free_pinned);
          continue;
        }
        page_entry& e = v.entries[keys[k].slot];
        e.key = keys[k].key;
        e.rows = d.rows;
        e.device_pages = static_cast<std::uint32_t>(d.device_take);
        e.pages = static_cast<std::uint32_t>(d.need);
        e.state = entry_stashed;
        device_taken += d.device_take;
        pinned_taken += d.need - d.device_take;
      }
      v.control->ring[0].head += device_taken;
      v.control->ring[1].head += pinned_taken;
    });
  }
};

struct restore_batch_body {
  pool_view v;
  std::uint32_t n;
  batch_key keys[max_batch_keys];

  /// Key k's entry: a held key moves its pages back, an empty one fails as its own launch would.
  OFFLOADKIT_HD void load(std::uint32_t k, key_plan& p) const {
    const page_entry& e = v.entries[keys[k].slot];
    p.d = stash_decision{};
    p.d.code = e.state == entry_stashed ? code_ok : code_restore_empty;
    if (p.d.code == code_ok) {
      p.d.rows = e.rows;
      p.d.need = e.pages;
      p.d.device_take = e.device_pages;
    }
    p.walk = walk_of_unit(v, keys[k].unit);
    p.units = p.d.code == code_ok ? p.d.rows * v.row_bytes / p.walk.unit : 0;
  }

  /// Places each held key's pages past the tails after the earlier keys' pages; an empty key
  /// records the free pages a restore of its own would have seen.
  OFFLOADKIT_HD void sequence(key_plan* plan) const {
    const std::uint64_t free_device = v.control->ring[0].tail - v.control->ring[0].head;
    const std::uint64_t free_pinned = v.control->ring[1].tail - v.control->ring[1].head;
    std::uint64_t device_at = 0, pinned_at = 0, items = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      key_plan& p = plan[k];
      p.device_at = device_at;
      p.pinned_at = pinned_at;
      p.item_base = items;
      p.page_base = device_at + pinned_at;
      p.d.free_device = free_device + device_at;
      p.d.free_pinned = free_pinned + pinned_at;
      device_at += p.d.device_take;
      pinned_at += p.d.need - p.d.device_take;
      items += plan_items(p);
    }
  }

#if defined(__CUDA_ARCH__)
  /// Warp 0: the same numbering from prefix sums (a restore never depends on free pages).
  __device__ bool scan(key_plan* plan) const {
    const lane_scan s = scan_pairs(plan, n, [](const key_plan& p) {
      return triple{p.d.device_take, p.d.need - p.d.device_take, plan_items(p)};
    });
    const std::uint64_t free_device = v.control->ring[0].tail - v.control->ring[0].head;
    const std::uint64_t free_pinned = v.control->ring[1].tail - v.control->ring[1].head;
    const unsigned lane = threadIdx.x & 31u;
    for (std::uint32_t half = 0; half < 2; ++half) {
      const std::uint32_t k = 2 * lane + half;
      if (k >= n) continue;
      key_plan& p = plan[k];
      const triple& before = half == 0 ? s.first : s.second;
      p.device_at = before.a;
      p.pinned_at = before.b;
      p.item_base = before.c;
      p.page_base = before.a + before.b;
      p.d.free_device = free_device + before.a;
      p.d.free_pinned = free_pinned + before.b;
    }
    return true;
  }
#endif

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    with_plan(*this, [&](const key_plan* plan) {
      const std::uint64_t lane = i % v.group;
      const ring_state* ring = v.control->ring;
      const std::uint64_t t0 = v.capacity[0] ? ring[0].tail % v.capacity[0] : 0;
      const std::uint64_t t1 = v.capacity[1] ? ring[1].tail % v.capacity[1] : 0;
      const auto row_of = [&](std::uint32_t k) {
        return v.table + std::uint64_t{keys[k].slot} * v.max_pages;
      };
      // The copies, then the pages back into the free slots past each ring's tail, after the
      // earlier keys'.
      for_each_share(
          v, plan, n, i,
          [&](std::uint32_t k, std::uint64_t item) {
            const key_plan& p = plan[k];
            copy_item<false>(p.walk, v.group, lane, item, p.units, keys[k].linear,
                             held_page{&v, row_of(k)});
          },
          [&](std::uint32_t k, std::uint64_t j) {
            const key_plan& p = plan[k];
            const std::uint32_t id = row_of(k)[j];
            if (j < p.d.device_take) {
              v.ids[0][ring_pos(t0, p.device_at + j, v.capacity[0])] = id;
            } else {
              v.ids[1][ring_pos(t1, p.pinned_at + j - p.d.device_take, v.capacity[1])] =
                  static_cast<std::uint32_t>(id - v.capacity[0]);
            }
          });
      if (!last_to_finish(v)) return;
      std::uint64_t device_back = 0, pinned_back = 0;
      for (std::uint32_t k = 0; k < n; ++k) {
        const key_plan& p = plan[k];
        std::uint64_t* rows_out = keys[k].rows;
        if (p.d.code != code_ok) {
          record_status(v, code_restore_empty, keys[k].key, 0, 0, p.d.free_device, p.d.free_pinned);
          if (rows_out != nullptr) *rows_out = 0;
          continue;
        }
        if (rows_out != nullptr) *rows_out = p.d.rows;
        v.entries[keys[k].slot].state = entry_empty;
        device_back += p.d.device_take;
        pinned_back += p.d.need - p.d.device_take;
      }
      v.control->ring[0].tail += device_back;
      v.control->ring[1].tail += pinned_back;
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
      v.control->status = status_word{};
    }
  }
};

}  // namespace offloadkit::stash::kernels
