// The eager reference: host-side bookkeeping, exact-size buffers, synchronous copies.
#include "offloadkit/stash/eager_stash.hpp"

#include <algorithm>
#include <cstdint>

namespace offloadkit::stash {

eager_stash::eager_stash(executor& ex, const stash_config& config, stream_ref s)
    : ex_(&ex), cfg_(config) {
  check_config(config, ex.device_count());
  free_ = {config.device_pages, config.pinned_pages};
  scalar_ = buffer(ex, memory_kind::pinned, sizeof(std::uint64_t));
  (void)s;
}

eager_stash::~eager_stash() = default;

void eager_stash::note_key(const stash_key& key) {
  const std::uint32_t code = encode_key(key);
  if (slots_.count(code) != 0) return;
  OFFLOADKIT_EXPECTS(slots_.size() < cfg_.max_keys, out_of_range, "key ", to_string(key),
                     " would be distinct key number ", slots_.size() + 1,
                     ", outside [1, max_keys = ", cfg_.max_keys, "]");
  slots_.emplace(code, static_cast<std::uint32_t>(slots_.size()));
}

void eager_stash::fail(status_code c, const stash_key& key, std::uint64_t rows,
                       std::uint64_t needed) {
  if (!status_.ok()) return;  // sticky: the first failure stays
  status_ = stash_status{c, key, rows, needed, free_.device, free_.pinned};
}

void eager_stash::do_stash(const stash_key& key, const void* src, const std::uint64_t* rows,
                           stream_ref s) {
  OFFLOADKIT_EXPECTS(rows != nullptr, logic_error, "stash of ", to_string(key),
                     ": the device row count pointer is null");
  note_key(key);
  ex_->copy(scalar_.data(), rows, sizeof(std::uint64_t), s);
  ex_->synchronize(s);
  const std::uint64_t r = *scalar_.as<std::uint64_t>();
  if (r > cfg_.max_rows) return fail(status_code::rows_too_large, key, r, 0);
  const std::uint64_t need = (r + cfg_.rows_per_page - 1) / cfg_.rows_per_page;
  const std::uint32_t code = encode_key(key);
  if (entries_.count(code) != 0) return fail(status_code::double_stash, key, r, need);
  if (need > free_.device + free_.pinned) return fail(status_code::overflow, key, r, need);
  held h;
  h.rows = r;
  h.device_pages = std::min(need, free_.device);
  h.pinned_pages = need - h.device_pages;
  const std::uint64_t dev_rows = std::min<std::uint64_t>(r, h.device_pages * cfg_.rows_per_page);
  const std::size_t dev_bytes = dev_rows * cfg_.row_bytes;
  const std::size_t pin_bytes = (r - dev_rows) * cfg_.row_bytes;
  h.device_part = buffer(*ex_, memory_kind::device, dev_bytes, cfg_.device);
  h.pinned_part = buffer(*ex_, memory_kind::pinned, pin_bytes, cfg_.device);
  const auto* from = static_cast<const unsigned char*>(src);
  if (dev_bytes > 0) ex_->copy(h.device_part.data(), from, dev_bytes, s);
  if (pin_bytes > 0) ex_->copy(h.pinned_part.data(), from + dev_bytes, pin_bytes, s);
  ex_->synchronize(s);
  free_.device -= h.device_pages;
  free_.pinned -= h.pinned_pages;
  entries_.emplace(code, std::move(h));
}

void eager_stash::do_restore(const stash_key& key, void* dst, std::uint64_t* rows_out,
                             stream_ref s) {
  note_key(key);
  auto it = entries_.find(encode_key(key));
  if (it == entries_.end()) {
    fail(status_code::restore_empty, key, 0, 0);
    if (rows_out != nullptr) {
      *scalar_.as<std::uint64_t>() = 0;
      ex_->copy(rows_out, scalar_.data(), sizeof(std::uint64_t), s);
      ex_->synchronize(s);
    }
    return;
  }
  held& h = it->second;
  auto* to = static_cast<unsigned char*>(dst);
  if (h.device_part.size() > 0) ex_->copy(to, h.device_part.data(), h.device_part.size(), s);
  if (h.pinned_part.size() > 0) {
    ex_->copy(to + h.device_part.size(), h.pinned_part.data(), h.pinned_part.size(), s);
  }
  if (rows_out != nullptr) {
    *scalar_.as<std::uint64_t>() = h.rows;
    ex_->copy(rows_out, scalar_.data(), sizeof(std::uint64_t), s);
  }
  ex_->synchronize(s);
  free_.device += h.device_pages;
  free_.pinned += h.pinned_pages;
  entries_.erase(it);
}

void eager_stash::do_reset(stream_ref s) {
  ex_->synchronize(s);
  entries_.clear();
  free_ = {cfg_.device_pages, cfg_.pinned_pages};
  status_ = {};
}

void eager_stash::do_clear_status(stream_ref s) {
  ex_->synchronize(s);
  status_ = {};
}

stash_snapshot eager_stash::do_snapshot(stream_ref s) {
  ex_->synchronize(s);
  stash_snapshot out;
  out.free = free_;
  out.status = status_;
  for (const auto& [code, h] : entries_) {
    entry_view ev;
    ev.key = decode_key(code);
    ev.rows = h.rows;
    ev.device_pages = h.device_pages;
    ev.pinned_pages = h.pinned_pages;
    out.entries.push_back(std::move(ev));
  }
  return out;
}

}  // namespace offloadkit::stash
