// Host side of the optimized paged stash: pool allocation, key slots, launch parameters and
// snapshots. The device work is in paged_kernels.cuh.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "offloadkit/detail/device_guard.hpp"
#include "offloadkit/launch.hpp"
#include "offloadkit/stash/paged_stash.hpp"
#include "paged_kernels.cuh"

namespace offloadkit::stash {

namespace dk = kernels;

// Groups of a GPU launch at most, on a device of any size.
constexpr std::uint64_t max_gpu_groups = 1024;

// Thread blocks of gpu_group threads that `device` runs at once of whichever of the bodies' kernels
// fits fewer (its multiprocessors times the blocks of that kernel that fit on one).
template <class... Bodies>
std::uint64_t resident_blocks(int device) {
  const offloadkit::detail::device_guard guard(device);
  int sms = 0;
  OFFLOADKIT_CUDA_TRY_CTX(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                          "device = ", device);
  int per_sm = 0;
  for (const void* kernel :
       {reinterpret_cast<const void*>(offloadkit::detail::kernel_for<Bodies>())...}) {
    int blocks = 0;
    OFFLOADKIT_CUDA_TRY_CTX(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                &blocks, kernel, static_cast<int>(dk::gpu_group), 0),
                            "device = ", device);
    per_sm = per_sm == 0 ? blocks : std::min(per_sm, blocks);
  }
  return std::max<std::uint64_t>(static_cast<std::uint64_t>(sms) * per_sm, 1);
}

struct paged_stash::impl {
  executor* ex;
  stash_config cfg;
  buffer control, entries, table, ids0, ids1, pool0, pool1;
  dk::pool_view view{};
  std::map<std::uint32_t, std::uint32_t> slots;  // key code -> page-table row

  std::uint32_t slot_of(const stash_key& key) {
    const std::uint32_t code = encode_key(key);
    auto it = slots.find(code);
    if (it != slots.end()) return it->second;
    OFFLOADKIT_EXPECTS(slots.size() < cfg.max_keys, out_of_range, "key ", to_string(key),
                       " would be distinct key number ", slots.size() + 1,
                       ", outside [1, max_keys = ", cfg.max_keys, "]");
    const auto slot = static_cast<std::uint32_t>(slots.size());
    slots.emplace(code, slot);
    return slot;
  }

  // Groups of a launch at most: on a GPU the thread blocks of each kernel that fit at once (one
  // wave, so that every block plans once and then copies until the work runs out; a second wave
  // would pay for the plan again), on host threads a few per thread.
  std::uint64_t single_groups = 32, batch_groups = 32;

  // The index space of a launch that copies up to `keys` full buffers (a batch of that many keys;
  // the launch shape depends on the batch's size, never on its row counts), in at most
  // `max_groups` groups.
  [[nodiscard]] std::uint64_t workers_for(std::uint64_t keys, std::uint64_t max_groups) const {
    const bool gpu = view.group != 1;
    const std::uint64_t item_bytes =
        gpu ? 16 * dk::lane_units * view.group : std::max<std::uint64_t>(view.page_bytes, 1);
    const std::uint64_t full_items = std::max<std::uint64_t>(
        view.max_pages, keys * ((cfg.max_rows * cfg.row_bytes + item_bytes - 1) / item_bytes));
    return std::clamp<std::uint64_t>(full_items, 1, max_groups) * view.group;
  }

  // The log2 of the widest copy unit (16 bytes at most) that divides the row size and keeps both
  // sides aligned.
  [[nodiscard]] std::uint32_t unit_log2_for(const void* p) const {
    std::uint32_t s = 4;
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    const auto pools = reinterpret_cast<std::uintptr_t>(view.pool[0]) |
                       reinterpret_cast<std::uintptr_t>(view.pool[1]);
    const auto misfits = [&](std::uint64_t unit) {
      return cfg.row_bytes % unit != 0 || addr % unit != 0 || pools % unit != 0;
    };
    while (s > 0 && misfits(std::uint64_t{1} << s)) --s;
    return s;
  }
  [[nodiscard]] dk::unit_walk walk_for(const void* p) const { return view.walks[unit_log2_for(p)]; }

  // How many of a batch's items a launch of their own each would accept (pointers present, key in
  // range, a slot free for a new key); a batch issues those and then lets the first refused item
  // throw as its own call would, so that a refused batch leaves what per-key calls would leave.
  template <class Item, class PointersOk>
  std::size_t accepted_prefix(const Item* items, std::size_t n, PointersOk pointers_ok) const {
    std::size_t fresh = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const stash_key& k = items[i].key;
      if (k.vp >= key_limits::vp || k.layer >= key_limits::layer ||
          k.microbatch >= key_limits::microbatch || !pointers_ok(items[i])) {
        return i;
      }
      if (slots.count(pack_key(k.vp, k.layer, k.microbatch)) == 0 &&
          slots.size() + ++fresh > cfg.max_keys) {
        return i;
      }
    }
    return n;
  }

  template <class Body, class Item, class Linear, class Rows>
  void launch_batches(const Item* items, std::size_t n, const Linear& linear, const Rows& rows,
                      const char* name, stream_ref s) {
    for (std::size_t first = 0; first < n; first += dk::max_batch_keys) {
      Body body{};
      body.v = view;
      body.n = static_cast<std::uint32_t>(std::min<std::size_t>(n - first, dk::max_batch_keys));
      body.v.workers = workers_for(body.n, batch_groups);
      for (std::uint32_t k = 0; k < body.n; ++k) {
        const Item& it = items[first + k];
        auto* p = const_cast<unsigned char*>(static_cast<const unsigned char*>(linear(it)));
        body.keys[k] = dk::batch_key{p,
                                     const_cast<std::uint64_t*>(rows(it)),
                                     slot_of(it.key),
                                     pack_key(it.key.vp, it.key.layer, it.key.microbatch),
                                     unit_log2_for(p),
                                     1};
        // A restore's rows_out named again later in the batch: the later key's store stays.
        for (std::uint32_t j = 0; j < k; ++j) {
          if (body.keys[j].rows == body.keys[k].rows) body.keys[j].last_rows = 0;
        }
      }
      launch(*ex, body.v.workers, body, name, s);
    }
  }
};

paged_stash::paged_stash(executor& ex, const stash_config& config, stream_ref s)
    : impl_(std::make_unique<impl>()) {
  check_config(config, ex.device_count());
  // A launch numbers its work items (at least 1 KiB each, none crossing a page) with 32 bits.
  const std::uint64_t pages = config.device_pages + config.pinned_pages;
  const std::uint64_t items_per_page = (config.page_bytes() + 1023) / 1024;
  OFFLOADKIT_EXPECTS(pages == 0 || items_per_page <= 0xffffffffu / pages, out_of_range,
                     "paged stash: ", pages, " pages of ", config.page_bytes(),
                     " bytes make more work items of 1 KiB than a launch numbers (2^32 - 1)");
  impl& m = *impl_;
  m.ex = &ex;
  m.cfg = config;
  const std::size_t mp = std::max<std::size_t>(config.max_pages_per_key(), 1);
  m.control = buffer(ex, memory_kind::device, sizeof(dk::control_block), config.device);
  m.entries =
      buffer(ex, memory_kind::device, sizeof(dk::page_entry) * config.max_keys, config.device);
  m.table =
      buffer(ex, memory_kind::device, sizeof(std::uint32_t) * config.max_keys * mp, config.device);
  m.ids0 =
      buffer(ex, memory_kind::device, sizeof(std::uint32_t) * config.device_pages, config.device);
  m.ids1 =
      buffer(ex, memory_kind::device, sizeof(std::uint32_t) * config.pinned_pages, config.device);
  m.pool0 =
      buffer(ex, memory_kind::device, config.page_bytes() * config.device_pages, config.device);
  m.pool1 =
      buffer(ex, memory_kind::pinned, config.page_bytes() * config.pinned_pages, config.device);

  dk::pool_view& v = m.view;
  v.control = m.control.as<dk::control_block>();
  v.entries = m.entries.as<dk::page_entry>();
  v.table = m.table.as<std::uint32_t>();
  v.ids[0] = m.ids0.as<std::uint32_t>();
  v.ids[1] = m.ids1.as<std::uint32_t>();
  v.pool[0] = m.pool0.as<unsigned char>();
  v.pool[1] = m.pool1.as<unsigned char>();
  v.capacity[0] = config.device_pages;
  v.capacity[1] = config.pinned_pages;
  v.page_bytes = config.page_bytes();
  v.rows_per_page = config.rows_per_page;
  v.row_bytes = config.row_bytes;
  v.max_rows = config.max_rows;
  v.max_pages = mp;
  // A fixed index space, whatever the row count: on a GPU groups of 256 (a block each), as many
  // as a full buffer has work items of 16-byte units, capped at one wave of blocks; on host
  // single-worker groups, a few per host thread.
  if (ex.kind() == backend::cuda) {
    v.group = dk::gpu_group;
    m.single_groups =
        std::min(resident_blocks<dk::stash_body, dk::restore_body>(config.device), max_gpu_groups);
    m.batch_groups =
        std::min(resident_blocks<dk::stash_batch_body, dk::restore_batch_body>(config.device),
                 max_gpu_groups);
  } else {
    v.group = 1;
  }
  dk::derive_view(v);
  v.workers = m.workers_for(1, m.single_groups);
  do_reset(s);
}

paged_stash::~paged_stash() = default;

std::uint64_t paged_stash::workers() const noexcept { return impl_->view.workers; }

std::string paged_stash::do_name() const { return "optimized"; }

const stash_config& paged_stash::do_config() const noexcept { return impl_->cfg; }

void paged_stash::do_stash(const stash_key& key, const void* src, const std::uint64_t* rows,
                           stream_ref s) {
  impl& m = *impl_;
  OFFLOADKIT_EXPECTS(rows != nullptr, logic_error, "stash of ", to_string(key),
                     ": the device row count pointer is null");
  OFFLOADKIT_EXPECTS(src != nullptr || m.cfg.max_rows == 0, logic_error, "stash of ",
                     to_string(key), ": the source pointer is null");
  const std::uint32_t slot = m.slot_of(key);
  dk::stash_body body{m.view,
                      m.walk_for(src),
                      static_cast<const unsigned char*>(src),
                      rows,
                      slot,
                      pack_key(key.vp, key.layer, key.microbatch)};
  launch(*m.ex, m.view.workers, body, "paged_stash", s);
}

void paged_stash::do_restore(const stash_key& key, void* dst, std::uint64_t* rows_out,
                             stream_ref s) {
  impl& m = *impl_;
  OFFLOADKIT_EXPECTS(dst != nullptr || m.cfg.max_rows == 0, logic_error, "restore of ",
                     to_string(key), ": the destination pointer is null");
  const std::uint32_t slot = m.slot_of(key);
  dk::restore_body body{m.view,
                        m.walk_for(dst),
                        static_cast<unsigned char*>(dst),
                        rows_out,
                        slot,
                        pack_key(key.vp, key.layer, key.microbatch)};
  launch(*m.ex, m.view.workers, body, "paged_restore", s);
}

void paged_stash::do_stash_batch(const stash_item* items, std::size_t n, stream_ref s) {
  impl& m = *impl_;
  const bool empty_rows = m.cfg.max_rows == 0;
  const std::size_t ok = m.accepted_prefix(items, n, [empty_rows](const stash_item& it) {
    return it.rows != nullptr && (it.src != nullptr || empty_rows);
  });
  m.launch_batches<dk::stash_batch_body>(
      items, ok, [](const stash_item& it) { return it.src; },
      [](const stash_item& it) { return it.rows; }, "paged_stash_batch", s);
  if (ok < n) do_stash(items[ok].key, items[ok].src, items[ok].rows, s);  // throws as it would
}

void paged_stash::do_restore_batch(const restore_item* items, std::size_t n, stream_ref s) {
  impl& m = *impl_;
  const bool empty_rows = m.cfg.max_rows == 0;
  const std::size_t ok = m.accepted_prefix(
      items, n, [empty_rows](const restore_item& it) { return it.dst != nullptr || empty_rows; });
  m.launch_batches<dk::restore_batch_body>(
      items, ok, [](const restore_item& it) { return it.dst; },
      [](const restore_item& it) { return it.rows_out; }, "paged_restore_batch", s);
  if (ok < n)
    do_restore(items[ok].key, items[ok].dst, items[ok].rows_out, s);  // throws as it would
}

void paged_stash::do_reset(stream_ref s) {
  impl& m = *impl_;
  const std::uint64_t n = std::max<std::uint64_t>(
      {m.view.capacity[0], m.view.capacity[1], static_cast<std::uint64_t>(m.cfg.max_keys), 1});
  launch(*m.ex, n, dk::reset_body{m.view, m.cfg.max_keys}, "paged_stash_reset", s);
}

void paged_stash::do_clear_status(stream_ref s) {
  impl& m = *impl_;
  m.ex->fill(&m.view.control->status, 0, sizeof(dk::status_word), s);
}

stash_snapshot paged_stash::do_snapshot(stream_ref s) {
  impl& m = *impl_;
  const dk::pool_view& v = m.view;
  const std::size_t keys = m.cfg.max_keys;
  dk::control_block control{};
  std::vector<dk::page_entry> entries(keys);
  std::vector<std::uint32_t> table(keys * v.max_pages), ids0(v.capacity[0]), ids1(v.capacity[1]);
  m.ex->copy(&control, v.control, sizeof control, s);
  m.ex->copy(entries.data(), v.entries, sizeof(dk::page_entry) * keys, s);
  m.ex->copy(table.data(), v.table, sizeof(std::uint32_t) * table.size(), s);
  if (!ids0.empty()) m.ex->copy(ids0.data(), v.ids[0], sizeof(std::uint32_t) * ids0.size(), s);
  if (!ids1.empty()) m.ex->copy(ids1.data(), v.ids[1], sizeof(std::uint32_t) * ids1.size(), s);
  m.ex->synchronize(s);

  // A ring whose free count exceeds its tier (a broken kernel moved a head past its tail) is
  // reported, not walked: the walk below would not end.
  for (int t = 0; t < 2; ++t) {
    const dk::ring_state& r = control.ring[t];
    OFFLOADKIT_EXPECTS(r.tail - r.head <= v.capacity[t], runtime_error, "paged stash: the ",
                       t == 0 ? "device" : "pinned", " freelist is corrupt: head ", r.head,
                       ", tail ", r.tail, ", but the tier has ", v.capacity[t], " pages");
  }
  stash_snapshot out;
  out.free.device = control.ring[0].tail - control.ring[0].head;
  out.free.pinned = control.ring[1].tail - control.ring[1].head;
  for (std::uint64_t p = control.ring[0].head; p != control.ring[0].tail; ++p) {
    out.free_ids.push_back(ids0[p % v.capacity[0]]);
  }
  for (std::uint64_t p = control.ring[1].head; p != control.ring[1].tail; ++p) {
    out.free_ids.push_back(static_cast<std::uint32_t>(v.capacity[0] + ids1[p % v.capacity[1]]));
  }
  for (std::size_t slot = 0; slot < keys; ++slot) {
    const dk::page_entry& e = entries[slot];
    if (e.state != dk::entry_stashed) continue;
    entry_view ev;
    ev.key = decode_key(e.key);
    ev.rows = e.rows;
    ev.device_pages = e.device_pages;
    ev.pinned_pages = e.pages - e.device_pages;
    ev.page_ids.assign(table.begin() + static_cast<std::ptrdiff_t>(slot * v.max_pages),
                       table.begin() + static_cast<std::ptrdiff_t>(slot * v.max_pages + e.pages));
    out.entries.push_back(std::move(ev));
  }
  out.status.code = static_cast<status_code>(control.status.code);
  if (control.status.code != 0) {
    out.status.key = decode_key(control.status.key);
    out.status.rows = control.status.rows;
    out.status.needed = control.status.needed;
    out.status.free_device = control.status.free_device;
    out.status.free_pinned = control.status.free_pinned;
  }
  return out;
}

}  // namespace offloadkit::stash
