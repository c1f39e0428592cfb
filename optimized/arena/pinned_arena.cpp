// The pinned arena and its lease.
#include "offloadkit/arena/pinned_arena.hpp"

#include <algorithm>
#include <utility>

#include "offloadkit/arena/offloader.hpp"
#include "offloadkit/error.hpp"

namespace offloadkit::arena {

arena_lease pinned_arena::acquire() {
  OFFLOADKIT_EXPECTS(!leased_, state_error,
                     "pinned_arena::acquire(): the arena is already leased (holding ", held_,
                     " bytes); release() the live lease first, one buffer per arena");
  leased_ = true;
  return arena_lease(*this);
}

arena_lease::arena_lease(arena_lease&& o) noexcept
    : arena_(std::exchange(o.arena_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      capacity_(std::exchange(o.capacity_, 0)),
      fence_(o.fence_),
      has_fence_(std::exchange(o.has_fence_, false)) {}

arena_lease& arena_lease::operator=(arena_lease&& o) noexcept {
  if (this != &o) {
    release();
    arena_ = std::exchange(o.arena_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    fence_ = o.fence_;
    has_fence_ = std::exchange(o.has_fence_, false);
  }
  return *this;
}

arena_lease::~arena_lease() { release(); }

void arena_lease::check_active(const char* what) const {
  OFFLOADKIT_EXPECTS(arena_ != nullptr, state_error, "arena_lease::", what,
                     "(): the lease was released (its pinned memory is freed); acquire a new one");
}

void arena_lease::set_fence(event_ref e) noexcept {
  fence_ = e;
  has_fence_ = true;
}

void arena_lease::clear_fence() noexcept { has_fence_ = false; }

void arena_lease::wait_fence() noexcept {
  if (!has_fence_) return;
  try {
    arena_->ex_->synchronize(fence_);
  } catch (...) {
    // A failed wait is reported by the work that failed; freeing must still happen.
  }
}

void arena_lease::free_buffer() noexcept {
  if (data_ == nullptr) return;
  wait_fence();
  arena_->ex_->deallocate(memory_kind::pinned, data_, capacity_);
  arena_->held_ -= capacity_;
  data_ = nullptr;
  capacity_ = 0;
}

void arena_lease::reserve(std::size_t bytes) {
  check_active("reserve");
  if (bytes <= capacity_ && data_ != nullptr) return;
  if (bytes == 0) return;
  // Free first: the old contents are about to be replaced, and two buffers would double the peak.
  free_buffer();
  void* p = nullptr;
  try {
    p = arena_->ex_->allocate(memory_kind::pinned, bytes, arena_->device_);
  } catch (...) {
    detail::rethrow_with_context(::offloadkit::detail::concat(
        "pinned arena: allocating ", bytes,
        " bytes of pinned host memory failed (the arena is now empty; the device tensors are "
        "untouched)"));
  }
  data_ = static_cast<std::byte*>(p);
  capacity_ = bytes;
  ++arena_->allocations_;
  arena_->held_ += bytes;
  arena_->peak_ = std::max(arena_->peak_, arena_->held_);
}

std::byte* arena_lease::data() const {
  check_active("data");
  return data_;
}

std::size_t arena_lease::capacity() const {
  check_active("capacity");
  return capacity_;
}

void arena_lease::release() noexcept {
  if (arena_ == nullptr) return;
  free_buffer();
  has_fence_ = false;
  arena_->leased_ = false;
  arena_ = nullptr;
}

}  // namespace offloadkit::arena
