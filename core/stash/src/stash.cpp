// Interface helpers shared by every implementation: config checks and status messages.
#include "offloadkit/stash/stash.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace offloadkit::stash {

void check_config(const stash_config& c) {
  OFFLOADKIT_EXPECTS(c.row_bytes > 0, out_of_range, "stash_config.row_bytes = ", c.row_bytes,
                     " must be in [1, inf)");
  OFFLOADKIT_EXPECTS(c.rows_per_page > 0, out_of_range,
                     "stash_config.rows_per_page = ", c.rows_per_page, " must be in [1, inf)");
  OFFLOADKIT_EXPECTS(c.max_keys > 0, out_of_range, "stash_config.max_keys = ", c.max_keys,
                     " must be in [1, inf)");
  // Page ids are 32-bit on the device.
  OFFLOADKIT_EXPECTS(c.device_pages + c.pinned_pages < (std::size_t{1} << 31), out_of_range,
                     "stash_config.device_pages + pinned_pages = ", c.device_pages + c.pinned_pages,
                     " is outside [0, ", std::size_t{1} << 31, ")");
}

void check_config(const stash_config& c, int device_count) {
  check_config(c);
  OFFLOADKIT_EXPECTS(c.device >= 0 && c.device < device_count, out_of_range,
                     "stash_config.device = ", c.device, " is outside [0, ", device_count, ")");
}

const char* to_string(status_code c) noexcept {
  switch (c) {
    case status_code::ok:
      return "ok";
    case status_code::overflow:
      return "overflow";
    case status_code::double_stash:
      return "double stash";
    case status_code::restore_empty:
      return "restore of an empty key";
    case status_code::rows_too_large:
      return "row count above max_rows";
  }
  return "unknown status";
}

std::string stash_status::message() const {
  switch (code) {
    case status_code::ok:
      return "paged stash: ok";
    case status_code::overflow:
      return detail::concat("paged stash overflow: key ", to_string(key), " with ", rows,
                            " rows needed ", needed, " pages but only ", free_device, " device + ",
                            free_pinned, " pinned pages were free; nothing was stored",
                            " for it (raise the pool to at least the planner's peak_pages)");
    case status_code::double_stash:
      return detail::concat("paged stash: key ", to_string(key),
                            " was stashed again before it was restored");
    case status_code::restore_empty:
      return detail::concat("paged stash: key ", to_string(key), " was restored but holds nothing");
    case status_code::rows_too_large:
      return detail::concat("paged stash: key ", to_string(key), " has ", rows,
                            " rows, above max_rows; nothing was stored for it");
  }
  return "paged stash: unknown status";
}

std::string check_conservation(const stash_snapshot& snap, const stash_config& cfg,
                               bool has_page_ids) {
  using detail::concat;
  std::uint64_t held_dev = 0, held_pin = 0;
  for (const entry_view& e : snap.entries) {
    const std::uint64_t need = (e.rows + cfg.rows_per_page - 1) / cfg.rows_per_page;
    if (e.device_pages + e.pinned_pages != need) {
      return concat("key ", to_string(e.key), " with ", e.rows, " rows holds ", e.device_pages,
                    " + ", e.pinned_pages, " pages, not ", need);
    }
    held_dev += e.device_pages;
    held_pin += e.pinned_pages;
  }
  if (snap.free.device + held_dev != cfg.device_pages) {
    return concat("device tier: ", snap.free.device, " free + ", held_dev,
                  " held != ", cfg.device_pages, " pages");
  }
  if (snap.free.pinned + held_pin != cfg.pinned_pages) {
    return concat("pinned tier: ", snap.free.pinned, " free + ", held_pin,
                  " held != ", cfg.pinned_pages, " pages");
  }
  if (!has_page_ids) return {};
  const std::size_t total = cfg.device_pages + cfg.pinned_pages;
  std::vector<int> owner(total, 0);  // 0: unseen, 1: free list, 2 + i: entry i
  auto claim = [&](std::uint32_t id, int who, const char* where) -> std::string {
    if (id >= total) return concat("page id ", id, " in ", where, " is outside [0, ", total, ")");
    if (owner[id] != 0) {
      return concat("page ", id, " is handed out twice (", where, " and ",
                    owner[id] == 1 ? std::string("the free list")
                                   : concat("key ", to_string(snap.entries[owner[id] - 2].key)),
                    ")");
    }
    owner[id] = who;
    return {};
  };
  if (snap.free_ids.size() != snap.free.device + snap.free.pinned) {
    return concat("free lists report ", snap.free_ids.size(), " ids for ",
                  snap.free.device + snap.free.pinned, " free pages");
  }
  for (std::uint32_t id : snap.free_ids) {
    if (auto err = claim(id, 1, "the free list"); !err.empty()) return err;
  }
  for (std::size_t i = 0; i < snap.entries.size(); ++i) {
    const entry_view& e = snap.entries[i];
    if (e.page_ids.size() != e.device_pages + e.pinned_pages) {
      return concat("key ", to_string(e.key), " lists ", e.page_ids.size(), " page ids for ",
                    e.device_pages + e.pinned_pages, " pages");
    }
    for (std::size_t j = 0; j < e.page_ids.size(); ++j) {
      const bool want_device = j < e.device_pages;
      if ((e.page_ids[j] < cfg.device_pages) != want_device) {
        return concat("key ", to_string(e.key), " page ", j, " (id ", e.page_ids[j],
                      ") is in the wrong tier");
      }
      const std::string where = concat("key ", to_string(e.key));
      if (auto err = claim(e.page_ids[j], static_cast<int>(i) + 2, where.c_str()); !err.empty()) {
        return err;
      }
    }
  }
  for (std::size_t id = 0; id < total; ++id) {
    if (owner[id] == 0) return concat("page ", id, " is lost: neither free nor held by any key");
  }
  return {};
}

void check_distinct_keys(const stash_key* keys, std::size_t n, const char* what) {
  // Sorted (key, position) pairs: a repeated key sits next to its first occurrence. Cheap enough
  // for a layer's keys on every call.
  std::vector<std::pair<stash_key, std::size_t>> sorted(n);
  for (std::size_t i = 0; i < n; ++i) sorted[i] = {keys[i], i};
  std::sort(sorted.begin(), sorted.end());
  std::size_t first = n, second = n;  // the repeat with the earliest second occurrence
  for (std::size_t i = 1; i < n; ++i) {
    if (sorted[i].first == sorted[i - 1].first && sorted[i].second < second) {
      first = sorted[i - 1].second;
      second = sorted[i].second;
    }
  }
  OFFLOADKIT_EXPECTS(second == n, logic_error, what, ": items ", first, " and ", second,
                     " both name key ", to_string(keys[first]),
                     "; the keys of one batch must be distinct");
}

namespace {
template <class Item>
void check_batch(const Item* items, std::size_t n, const char* what) {
  OFFLOADKIT_EXPECTS(items != nullptr || n == 0, logic_error, what, " of ", n,
                     " items: the item array is null");
  std::vector<stash_key> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = items[i].key;
  check_distinct_keys(keys.data(), n, what);
}
}  // namespace

void stash_interface::stash_batch(const stash_item* items, std::size_t n, stream_ref s) {
  check_batch(items, n, "stash_batch");
  if (n > 0) do_stash_batch(items, n, s);
}

void stash_interface::restore_batch(const restore_item* items, std::size_t n, stream_ref s) {
  check_batch(items, n, "restore_batch");
  if (n > 0) do_restore_batch(items, n, s);
}

void stash_interface::do_stash_batch(const stash_item* items, std::size_t n, stream_ref s) {
  for (std::size_t i = 0; i < n; ++i) stash(items[i].key, items[i].src, items[i].rows, s);
}

void stash_interface::do_restore_batch(const restore_item* items, std::size_t n, stream_ref s) {
  for (std::size_t i = 0; i < n; ++i) restore(items[i].key, items[i].dst, items[i].rows_out, s);
}

void stash_interface::check(stream_ref s) {
  const stash_status st = status(s);
  if (!st.ok()) throw stash_overflow(st);
}

}  // namespace offloadkit::stash
