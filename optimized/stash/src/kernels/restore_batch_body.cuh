// The batched restore: a batch's keys copied back from their pages in one launch, the pages
// returned to the rings' tails (the plan, the spread of work items and the commit: batch_plan.cuh).
#pragma once

#include "batch_plan.cuh"

namespace offloadkit::stash::kernels {

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

}  // namespace offloadkit::stash::kernels
