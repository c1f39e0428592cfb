// The batched stash: a batch's keys take fresh pages from the rings' heads in one launch, their
// rows copied into them (the plan, the spread of work items and the commit: batch_plan.cuh).
#pragma once

#include "batch_plan.cuh"

namespace offloadkit::stash::kernels {

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

}  // namespace offloadkit::stash::kernels
