// The paged-stash interface. A stash keeps the valid rows of a saved activation between its
// forward and its backward: stash() copies the first `rows` rows of an oversized buffer (the row
// count lives in device memory) into the stash under a key, restore() copies them back into the
// first rows of a buffer and releases the key's space. Capacity is a number of pages in two
// tiers, device memory then pinned host memory; a key that does not fit gets nothing, and the
// first such failure is recorded in a sticky status word. Implementations (reference, optimized,
// plugins) are final classes behind this interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/stash/key.hpp"

namespace offloadkit::stash {

struct stash_config {
  std::size_t row_bytes = 0;      ///< bytes of one row (any size > 0)
  std::size_t rows_per_page = 0;  ///< rows of one page (> 0)
  std::size_t max_rows = 0;       ///< row capacity of the oversized buffers handed to stash()
  std::size_t device_pages = 0;   ///< pages of the device tier
  std::size_t pinned_pages = 0;   ///< pages of the pinned host tier
  std::size_t max_keys = 64;      ///< distinct keys the stash can name over its lifetime
  int device = 0;

  [[nodiscard]] std::size_t page_bytes() const noexcept { return row_bytes * rows_per_page; }
  [[nodiscard]] std::size_t max_pages_per_key() const noexcept {
    return rows_per_page == 0 ? 0 : (max_rows + rows_per_page - 1) / rows_per_page;
  }
};

/// Throws out_of_range naming the field when a config is unusable.
void check_config(const stash_config& c);
/// The same, and `device` must be one of the executor's devices [0, device_count): a stash on
/// another device would only fail at its first allocation, in the middle of a step.
void check_config(const stash_config& c, int device_count);

/// What the sticky status word records: the first failure since the last clear.
enum class status_code : std::uint32_t {
  ok = 0,
  overflow = 1,        ///< the key needed more pages than both tiers had free
  double_stash = 2,    ///< the key was stashed while it still held rows
  restore_empty = 3,   ///< the key was restored while it held nothing
  rows_too_large = 4,  ///< the device row count exceeded max_rows
};

const char* to_string(status_code c) noexcept;

/// The decoded status word.
struct stash_status {
  status_code code = status_code::ok;
  stash_key key;
  std::uint64_t rows = 0;         ///< the key's row count
  std::uint64_t needed = 0;       ///< pages the key needed
  std::uint64_t free_device = 0;  ///< free device pages when it failed
  std::uint64_t free_pinned = 0;  ///< free pinned pages when it failed

  [[nodiscard]] bool ok() const noexcept { return code == status_code::ok; }
  /// A sentence for people: which key, how many pages it needed, how many were free.
  [[nodiscard]] std::string message() const;
};

/// Thrown by check() when the status word holds a failure.
class stash_overflow : public runtime_error {
 public:
  explicit stash_overflow(const stash_status& s) : runtime_error(s.message()), status_(s) {}
  [[nodiscard]] const stash_status& status() const noexcept { return status_; }

 private:
  stash_status status_;
};

struct free_pages {
  std::uint64_t device = 0;
  std::uint64_t pinned = 0;
};

/// One key's entry as seen by snapshot().
struct entry_view {
  stash_key key;
  std::uint64_t rows = 0;
  std::uint64_t device_pages = 0;
  std::uint64_t pinned_pages = 0;
  /// Page ids (device tier 0..D-1, pinned tier D..D+P-1); empty where the implementation has no
  /// pages (the reference).
  std::vector<std::uint32_t> page_ids;
};

/// Everything needed to check page conservation: free page ids of both tiers (empty where the
/// implementation does not page) and the live entries.
struct stash_snapshot {
  free_pages free;
  std::vector<std::uint32_t> free_ids;
  std::vector<entry_view> entries;
  stash_status status;
};

/// Page conservation: free plus held pages of each tier equal the tier's size, every entry holds
/// exactly the pages its rows need, and (where page ids are reported) every page id appears exactly
/// once among the free lists and the entries and lies in its tier. Returns the first violation,
/// or an empty string.
std::string check_conservation(const stash_snapshot& snap, const stash_config& cfg,
                               bool has_page_ids);

/// One key of a batched stash: as the arguments of stash_interface::stash().
struct stash_item {
  stash_key key;
  const void* src = nullptr;
  const std::uint64_t* rows = nullptr;  ///< device memory, read in stream order
};

/// One key of a batched restore: as the arguments of stash_interface::restore().
struct restore_item {
  stash_key key;
  void* dst = nullptr;
  std::uint64_t* rows_out = nullptr;  ///< device memory, may be null
};

/// Throws logic_error naming both positions when two items of a batch name the same key.
void check_distinct_keys(const stash_key* keys, std::size_t n, const char* what);

class stash_interface {
 public:
  stash_interface() = default;
  stash_interface(const stash_interface&) = delete;
  stash_interface& operator=(const stash_interface&) = delete;
  virtual ~stash_interface() = default;

  [[nodiscard]] std::string name() const { return do_name(); }
  [[nodiscard]] const stash_config& config() const noexcept { return do_config(); }
  /// Whether stash()/restore() issue no host synchronization (a graph may capture them).
  [[nodiscard]] bool capturable() const noexcept { return do_capturable(); }

  /// Stashes the first *rows rows of `src` (device memory, max_rows rows) under `key`. `rows`
  /// points to device memory and is read in stream order. Throws out_of_range for a key out of
  /// range or beyond max_keys distinct keys.
  void stash(const stash_key& key, const void* src, const std::uint64_t* rows, stream_ref s) {
    do_stash(key, src, rows, s);
  }
  /// Copies the key's rows into the first rows of `dst` (device memory), writes the row count to
  /// *rows_out (device memory) when it is not null, and releases the key's pages.
  void restore(const stash_key& key, void* dst, std::uint64_t* rows_out, stream_ref s) {
    do_restore(key, dst, rows_out, s);
  }
  /// Stashes every item (a MoE layer's experts, say) with the result of stash() on each in order:
  /// the same entries, pages, status word and bytes. The keys must be distinct (logic_error
  /// naming both positions otherwise). An implementation may issue the whole batch at once (the
  /// optimized stash: one launch per 64 keys); the default calls stash() per item.
  void stash_batch(const stash_item* items, std::size_t n, stream_ref s);
  void stash_batch(const std::vector<stash_item>& items, stream_ref s) {
    stash_batch(items.data(), items.size(), s);
  }
  /// Restores every item with the result of restore() on each in order; keys distinct.
  void restore_batch(const restore_item* items, std::size_t n, stream_ref s);
  void restore_batch(const std::vector<restore_item>& items, stream_ref s) {
    restore_batch(items.data(), items.size(), s);
  }
  /// Drops every entry and returns every page; clears the status word.
  void reset(stream_ref s) { do_reset(s); }
  /// Clears the status word only.
  void clear_status(stream_ref s) { do_clear_status(s); }

  /// Synchronizes `s` and decodes the status word.
  [[nodiscard]] stash_status status(stream_ref s) { return do_snapshot(s).status; }
  /// Synchronizes `s` and throws stash_overflow when the status word holds a failure.
  void check(stream_ref s);
  /// Synchronizes `s` and reads free pages, entries and status.
  [[nodiscard]] stash_snapshot snapshot(stream_ref s) { return do_snapshot(s); }

 protected:
  /// Called with n > 0 items of distinct keys. The default issues stash() / restore() per item
  /// (an override may call it for the batches it does not issue itself).
  virtual void do_stash_batch(const stash_item* items, std::size_t n, stream_ref s);
  virtual void do_restore_batch(const restore_item* items, std::size_t n, stream_ref s);

 private:
  [[nodiscard]] virtual std::string do_name() const = 0;
  [[nodiscard]] virtual const stash_config& do_config() const noexcept = 0;
  [[nodiscard]] virtual bool do_capturable() const noexcept = 0;
  virtual void do_stash(const stash_key& key, const void* src, const std::uint64_t* rows,
                        stream_ref s) = 0;
  virtual void do_restore(const stash_key& key, void* dst, std::uint64_t* rows_out,
                          stream_ref s) = 0;
  virtual void do_reset(stream_ref s) = 0;
  virtual void do_clear_status(stream_ref s) = 0;
  virtual stash_snapshot do_snapshot(stream_ref s) = 0;
};

}  // namespace offloadkit::stash
