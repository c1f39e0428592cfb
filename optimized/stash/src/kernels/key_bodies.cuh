// The bodies of one key's launch: a stash taking fresh pages from the rings' heads, a restore
// returning them to the rings' tails, each committed by the worker that counts last.
#pragma once

#include "work_split.cuh"

namespace offloadkit::stash::kernels {
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

}  // namespace offloadkit::stash::kernels
