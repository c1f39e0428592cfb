// The pinned arena: one cached page-locked host buffer for a whole tensor set, with an explicit,
// paired lifetime. acquire() returns a lease; the lease owns the pinned memory until release()
// (or its destructor) frees it, so nobody can assume a buffer is freed when it is not. The
// buffer grows only when a larger set arrives, and growth frees the old buffer before allocating
// the new one, so peak host memory never holds two buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "offloadkit/executor.hpp"

namespace offloadkit::arena {

class arena_lease;

/// Hands out at most one lease at a time and keeps the figures that checks and benchmarks read.
/// Must outlive its leases.
class pinned_arena {
 public:
  explicit pinned_arena(executor& ex, int device = 0) noexcept : ex_(&ex), device_(device) {}
  pinned_arena(const pinned_arena&) = delete;
  pinned_arena& operator=(const pinned_arena&) = delete;
  ~pinned_arena() = default;

  /// Starts a lease (no memory yet: reserve() allocates). Throws state_error while another lease
  /// of this arena is live.
  arena_lease acquire();

  [[nodiscard]] bool leased() const noexcept { return leased_; }
  /// Pinned allocations made so far (steady state makes none).
  [[nodiscard]] std::size_t allocations() const noexcept { return allocations_; }
  /// Pinned bytes held now, and the most ever held at once.
  [[nodiscard]] std::size_t held_bytes() const noexcept { return held_; }
  [[nodiscard]] std::size_t peak_bytes() const noexcept { return peak_; }
  [[nodiscard]] executor& exec() const noexcept { return *ex_; }

 private:
  friend class arena_lease;
  executor* ex_;
  int device_;
  bool leased_ = false;
  std::size_t allocations_ = 0;
  std::size_t held_ = 0;
  std::size_t peak_ = 0;
};

/// The right to use the arena's pinned buffer, from acquire() to release(). Move-only. Every use
/// after release() throws state_error.
class arena_lease {
 public:
  arena_lease() = default;
  arena_lease(arena_lease&& o) noexcept;
  arena_lease& operator=(arena_lease&& o) noexcept;
  arena_lease(const arena_lease&) = delete;
  arena_lease& operator=(const arena_lease&) = delete;
  /// Releases (frees the pinned memory) if release() was not called.
  ~arena_lease();

  /// Makes the buffer hold at least `bytes`. Grows only when `bytes` exceeds the capacity: waits
  /// for the fence, frees the old buffer, then allocates the new one. If that allocation fails
  /// the lease is still valid with capacity 0 (the old contents are gone) and the error names
  /// the size that failed.
  void reserve(std::size_t bytes);
  /// The event after which queued work no longer touches the buffer; growth and release wait
  /// for it. The caller keeps the event alive for as long as the lease.
  void set_fence(event_ref e) noexcept;
  void clear_fence() noexcept;

  [[nodiscard]] std::byte* data() const;
  [[nodiscard]] std::size_t capacity() const;
  [[nodiscard]] bool active() const noexcept { return arena_ != nullptr; }
  explicit operator bool() const noexcept { return active(); }

  /// Waits for the fence, frees the pinned memory and ends the lease; the arena can be acquired
  /// again. Idempotent.
  void release() noexcept;

 private:
  friend class pinned_arena;
  explicit arena_lease(pinned_arena& a) noexcept : arena_(&a) {}
  void check_active(const char* what) const;
  void wait_fence() noexcept;
  void free_buffer() noexcept;

  pinned_arena* arena_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t capacity_ = 0;
  event_ref fence_{};
  bool has_fence_ = false;
};

}  // namespace offloadkit::arena
