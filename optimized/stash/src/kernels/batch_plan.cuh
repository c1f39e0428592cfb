// What the batch bodies share: a batch issues many keys in one launch, planned on the device in
// batch order, its work items spread over the whole launch, committed as an ordered commit would.
#pragma once

#include "key_bodies.cuh"

namespace offloadkit::stash::kernels {
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

}  // namespace offloadkit::stash::kernels
