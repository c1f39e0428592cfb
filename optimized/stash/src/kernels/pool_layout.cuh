// The paged stash's device-resident pool: the division-free divisor, the freelist rings and their
// state, the status word, the control block, the page table, the pool view every body reads, the
// 16-byte unit loads and stores, and the decision a stash takes from the rings' free pages.
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

}  // namespace offloadkit::stash::kernels
