// Owning RAII wrappers over executor handles. Destructors never throw.
#pragma once

#include <cstddef>
#include <utility>

#include "offloadkit/executor.hpp"

namespace offloadkit {

/// An owned allocation of one memory kind.
class buffer {
 public:
  buffer() = default;
  buffer(executor& ex, memory_kind kind, std::size_t bytes, int device = 0)
      : ex_(&ex),
        kind_(kind),
        bytes_(bytes),
        device_(device),
        ptr_(ex.allocate(kind, bytes, device)) {}
  buffer(buffer&& o) noexcept { swap(o); }
  buffer& operator=(buffer&& o) noexcept {
    buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~buffer() { reset(); }

  void reset() noexcept {
    if (ptr_ != nullptr) ex_->deallocate(kind_, ptr_, bytes_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  [[nodiscard]] void* data() const noexcept { return ptr_; }
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] memory_kind kind() const noexcept { return kind_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

 private:
  void swap(buffer& o) noexcept {
    std::swap(ex_, o.ex_);
    std::swap(kind_, o.kind_);
    std::swap(bytes_, o.bytes_);
    std::swap(device_, o.device_);
    std::swap(ptr_, o.ptr_);
  }
  executor* ex_ = nullptr;
  memory_kind kind_ = memory_kind::device;
  std::size_t bytes_ = 0;
  int device_ = 0;
  void* ptr_ = nullptr;
};

/// An owned stream.
class stream {
 public:
  stream() = default;
  explicit stream(executor& ex, int device = 0) : ex_(&ex), ref_(ex.create_stream(device)) {}
  stream(stream&& o) noexcept : ex_(std::exchange(o.ex_, nullptr)), ref_(o.ref_) {}
  stream& operator=(stream&& o) noexcept {
    stream tmp(std::move(o));
    std::swap(ex_, tmp.ex_);
    std::swap(ref_, tmp.ref_);
    return *this;
  }
  ~stream() {
    if (ex_ != nullptr) ex_->destroy_stream(ref_);
  }
  [[nodiscard]] stream_ref ref() const noexcept { return ref_; }
  operator stream_ref() const noexcept { return ref_; }  // NOLINT(google-explicit-constructor)
  void synchronize() const { ex_->synchronize(ref_); }

 private:
  executor* ex_ = nullptr;
  stream_ref ref_{};
};

/// An owned event.
class event {
 public:
  event() = default;
  explicit event(executor& ex, int device = 0) : ex_(&ex), ref_(ex.create_event(device)) {}
  /// Takes ownership of an event created by `ex` elsewhere (across the plugin ABI).
  event(executor& ex, event_ref adopted) noexcept : ex_(&ex), ref_(adopted) {}
  event(event&& o) noexcept : ex_(std::exchange(o.ex_, nullptr)), ref_(o.ref_) {}
  event& operator=(event&& o) noexcept {
    event tmp(std::move(o));
    std::swap(ex_, tmp.ex_);
    std::swap(ref_, tmp.ref_);
    return *this;
  }
  ~event() {
    if (ex_ != nullptr) ex_->destroy_event(ref_);
  }
  [[nodiscard]] event_ref ref() const noexcept { return ref_; }
  operator event_ref() const noexcept { return ref_; }  // NOLINT(google-explicit-constructor)
  /// Gives up ownership: the caller destroys the event through the executor that created it.
  [[nodiscard]] event_ref release() noexcept {
    ex_ = nullptr;
    return ref_;
  }

 private:
  executor* ex_ = nullptr;
  event_ref ref_{};
};

/// An owned graph.
class graph {
 public:
  graph() = default;
  graph(executor& ex, graph_ref g) : ex_(&ex), ref_(g) {}
  graph(graph&& o) noexcept : ex_(std::exchange(o.ex_, nullptr)), ref_(o.ref_) {}
  graph& operator=(graph&& o) noexcept {
    graph tmp(std::move(o));
    std::swap(ex_, tmp.ex_);
    std::swap(ref_, tmp.ref_);
    return *this;
  }
  ~graph() {
    if (ex_ != nullptr) ex_->destroy_graph(ref_);
  }
  [[nodiscard]] graph_ref ref() const noexcept { return ref_; }
  void replay(stream_ref s) const { ex_->replay(ref_, s); }

 private:
  executor* ex_ = nullptr;
  graph_ref ref_{};
};

}  // namespace offloadkit
