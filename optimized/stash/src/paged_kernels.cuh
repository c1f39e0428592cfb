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
/// the next launch (stream order). On the GPU the lanes of a warp that arrive together add their
/// count with one atomic (after __syncwarp, which orders their memory accesses before the
/// leader's release), so the counter sees one atomic per warp instead of one per thread.
OFFLOADKIT_HD inline bool last_to_finish(const pool_view& v) {
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device> done(v.control->done);
#if defined(__CUDA_ARCH__)
  const unsigned mask = __activemask();
  __syncwarp(mask);
  const unsigned lane = threadIdx.x & 31u;
  const unsigned leader = static_cast<unsigned>(__ffs(mask)) - 1u;
  const auto count = static_cast<std::uint32_t>(__popc(mask));
  std::uint32_t prev = 0;
  if (lane == leader) prev = done.fetch_add(count, cuda::memory_order_acq_rel);
  prev = __shfl_sync(mask, prev, static_cast<int>(leader));
  if (lane == leader && prev + count == v.workers) {
    done.store(0u, cuda::memory_order_relaxed);
    return true;
  }
  return false;
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
                                                      std::uint64_t rows,
                                                      std::uint64_t free_device,
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

/// Copies worker i's share of a key's `units` units between a linear buffer (the first rows of an
/// oversized buffer) and its pages; `page_addr(j)` gives the key's j-th page. Each lane loads up
/// to four units before it stores any, so that several loads are in flight.
/// `item_base` numbers the key's first work item among a batch's: group g takes the items whose
/// batch-wide number is g modulo the groups, so a batch of small keys spreads over every group.
template <bool ToPages, class PageAddr>
OFFLOADKIT_HD inline void copy_rows(const pool_view& v, const unit_walk& w, std::uint64_t i,
                                    std::uint64_t units, unsigned char* linear,
                                    const PageAddr& page_addr, std::uint64_t item_base = 0) {
  constexpr std::uint64_t batch = 4;
  const std::uint64_t group = v.group;
  const std::uint64_t groups = v.workers / group;
  const std::uint64_t g = i / group, lane = i - g * group;
  const auto unit = static_cast<unsigned>(w.unit);
  const std::uint64_t pages = (units + w.page_units - 1) / w.page_units;
  const std::uint64_t items = pages * w.chunks_per_page;
  const std::uint64_t start = (g + groups - item_base % groups) % groups;
  for (std::uint64_t item = start; item < items; item += groups) {
    const std::uint64_t j = item / w.chunks_per_page;
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
// their pages return to (restore). Every worker plans the whole batch from the same device state:
// on a GPU one thread per block sequences the plan in shared memory after the block's lanes have
// read the keys' row counts and entries in parallel; on host threads each worker plans alone. The
// copies of all keys are spread over all groups, and the last worker commits the keys in order.

/// Keys per batched launch: a batch's plan lives in one thread block's shared memory on a GPU,
/// and its lanes read one key each.
constexpr std::uint32_t max_batch_keys = 64;

struct batch_key {
  unsigned char* linear;  ///< stash: the source; restore: the destination
  std::uint64_t* rows;    ///< stash: the device row count; restore: rows_out (may be null)
  std::uint32_t slot;
  std::uint32_t key;  ///< pack_key() of the key
  std::uint32_t unit;  ///< copy unit of the linear buffer (see unit_walk)
  std::uint32_t pad;
};

/// One key of a batch: its decision (as a launch of its own would make it), where its pages start
/// in each ring relative to the batch's first, and its first work item among the batch's.
struct key_plan {
  stash_decision d;
  std::uint32_t state;  ///< the key's entry state before the batch
  std::uint64_t device_at;
  std::uint64_t pinned_at;
  std::uint64_t item_base;
};

OFFLOADKIT_HD inline unit_walk walk_of_unit(const pool_view& v, std::uint64_t unit) {
  const std::uint64_t page_units = v.page_bytes / unit;
  // On a GPU an item is one load batch per lane; on host threads a whole page.
  std::uint64_t chunk = page_units;
  if (v.group != 1 && 4 * v.group < chunk) chunk = 4 * v.group;
  return unit_walk{unit, page_units, chunk, (page_units + chunk - 1) / chunk};
}

/// Runs `load(k, plan[k])` for every key and then `sequence(plan)`, on a GPU in the block's shared
/// memory (the launch's blocks have at least max_batch_keys threads and each thread runs one index),
/// on host threads in the worker's own storage; then `work(plan)`.
template <class Body, class Work>
OFFLOADKIT_HD inline void with_plan(const Body& b, const Work& work) {
#if defined(__CUDA_ARCH__)
  __shared__ key_plan plan[max_batch_keys];
  if (threadIdx.x < b.n) b.load(threadIdx.x, plan[threadIdx.x]);
  __syncthreads();
  if (threadIdx.x == 0) b.sequence(plan);
  __syncthreads();
  work(static_cast<const key_plan*>(plan));
#else
  key_plan plan[max_batch_keys];
  for (std::uint32_t k = 0; k < b.n; ++k) b.load(k, plan[k]);
  b.sequence(plan);
  work(static_cast<const key_plan*>(plan));
#endif
}

struct stash_batch_body {
  pool_view v;
  std::uint32_t n;
  batch_key keys[max_batch_keys];

  OFFLOADKIT_HD void load(std::uint32_t k, key_plan& p) const {
    p.d.rows = *keys[k].rows;
    p.state = v.entries[keys[k].slot].state;
  }

  /// Decides the keys in batch order against the free pages the earlier ones leave.
  OFFLOADKIT_HD void sequence(key_plan* plan) const {
    std::uint64_t free_device = v.control->ring[0].tail - v.control->ring[0].head;
    std::uint64_t free_pinned = v.control->ring[1].tail - v.control->ring[1].head;
    std::uint64_t device_at = 0, pinned_at = 0, items = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      key_plan& p = plan[k];
      p.d = decide_stash_with(v, p.state, p.d.rows, free_device, free_pinned);
      p.device_at = device_at;
      p.pinned_at = pinned_at;
      p.item_base = items;
      if (p.d.code != code_ok) continue;
      const std::uint64_t pinned_take = p.d.need - p.d.device_take;
      free_device -= p.d.device_take;
      free_pinned -= pinned_take;
      device_at += p.d.device_take;
      pinned_at += pinned_take;
      items += p.d.need * walk_of_unit(v, keys[k].unit).chunks_per_page;
    }
  }

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    with_plan(*this, [&](const key_plan* plan) {
      const std::uint64_t h0 = v.control->ring[0].head, h1 = v.control->ring[1].head;
      const std::uint64_t h0m = v.capacity[0] ? h0 % v.capacity[0] : 0;
      const std::uint64_t h1m = v.capacity[1] ? h1 % v.capacity[1] : 0;
      for (std::uint32_t k = 0; k < n; ++k) {
        const key_plan& p = plan[k];
        if (p.d.code != code_ok) continue;
        const unit_walk walk = walk_of_unit(v, keys[k].unit);
        const fresh_page pages{&v, p.d.device_take, ring_pos(h0m, p.device_at, v.capacity[0]),
                               ring_pos(h1m, p.pinned_at, v.capacity[1])};
        copy_rows<true>(v, walk, i, p.d.rows * v.row_bytes / walk.unit, keys[k].linear, pages,
                        p.item_base);
        std::uint32_t* row = v.table + std::uint64_t{keys[k].slot} * v.max_pages;
        for (std::uint64_t j = i; j < p.d.need; j += v.workers) row[j] = pages.id(j);
      }
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

  OFFLOADKIT_HD void load(std::uint32_t k, key_plan& p) const {
    const page_entry& e = v.entries[keys[k].slot];
    p.state = e.state;
    p.d.rows = e.rows;
    p.d.need = e.pages;
    p.d.device_take = e.device_pages;
  }

  /// Places each held key's pages past the tails after the earlier keys' pages; an empty key
  /// records the free pages a restore of its own would have seen.
  OFFLOADKIT_HD void sequence(key_plan* plan) const {
    std::uint64_t free_device = v.control->ring[0].tail - v.control->ring[0].head;
    std::uint64_t free_pinned = v.control->ring[1].tail - v.control->ring[1].head;
    std::uint64_t device_at = 0, pinned_at = 0, items = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      key_plan& p = plan[k];
      p.device_at = device_at;
      p.pinned_at = pinned_at;
      p.item_base = items;
      p.d.free_device = free_device;
      p.d.free_pinned = free_pinned;
      if (p.state != entry_stashed) {
        p.d.code = code_restore_empty;
        continue;
      }
      p.d.code = code_ok;
      const std::uint64_t pinned_back = p.d.need - p.d.device_take;
      free_device += p.d.device_take;
      free_pinned += pinned_back;
      device_at += p.d.device_take;
      pinned_at += pinned_back;
      items += p.d.need * walk_of_unit(v, keys[k].unit).chunks_per_page;
    }
  }

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    with_plan(*this, [&](const key_plan* plan) {
      const ring_state* ring = v.control->ring;
      const std::uint64_t t0 = v.capacity[0] ? ring[0].tail % v.capacity[0] : 0;
      const std::uint64_t t1 = v.capacity[1] ? ring[1].tail % v.capacity[1] : 0;
      for (std::uint32_t k = 0; k < n; ++k) {
        const key_plan& p = plan[k];
        if (p.d.code != code_ok) continue;
        const unit_walk walk = walk_of_unit(v, keys[k].unit);
        const std::uint32_t* row = v.table + std::uint64_t{keys[k].slot} * v.max_pages;
        copy_rows<false>(v, walk, i, p.d.rows * v.row_bytes / walk.unit, keys[k].linear,
                         held_page{&v, row}, p.item_base);
        for (std::uint64_t j = i; j < p.d.need; j += v.workers) {
          const std::uint32_t id = row[j];
          if (j < p.d.device_take) {
            v.ids[0][ring_pos(t0, p.device_at + j, v.capacity[0])] = id;
          } else {
            v.ids[1][ring_pos(t1, p.pinned_at + j - p.d.device_take, v.capacity[1])] =
                static_cast<std::uint32_t>(id - v.capacity[0]);
          }
        }
      }
      if (!last_to_finish(v)) return;
      std::uint64_t device_back = 0, pinned_back = 0;
      for (std::uint32_t k = 0; k < n; ++k) {
        const key_plan& p = plan[k];
        std::uint64_t* rows_out = keys[k].rows;
        if (p.d.code != code_ok) {
          record_status(v, code_restore_empty, keys[k].key, 0, 0, p.d.free_device,
                        p.d.free_pinned);
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
