// Executor adaptors: each wraps an upstream executor and is itself an executor, so behaviour for
// checks (fault injection, delay injection, counting) is added around any back end or any other
// adaptor, never as branches inside a back end.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "offloadkit/executor.hpp"

namespace offloadkit {

/// Forwards every call to its upstream. Adaptors derive from it and override what they change:
/// an adaptor that only acts before a kind of call (fails it, counts it, holds its stream back)
/// overrides before() alone; one that must see a call's arguments or result overrides that call.
class executor_adaptor : public executor {
 public:
  explicit executor_adaptor(executor& upstream) : upstream_(&upstream) {}
  [[nodiscard]] executor& upstream() const noexcept { return *upstream_; }

 protected:
  /// Called before every call that has an op_kind is forwarded (an allocation as the op_kind of
  /// its memory kind), with the stream the call is issued on, if it takes one. It may throw: the
  /// call is then not forwarded. The default does nothing.
  virtual void before(op_kind kind, std::optional<stream_ref> stream);

  OFFLOADKIT_EXECUTOR_HOOK_OVERRIDES

 private:
  executor* upstream_;
};

/// Fails the Nth instrumented call (countdown style, abseil's exception-safety model): after
/// arm({kinds}, n), calls of those kinds are counted from 0 and call number n throws instead of
/// reaching the upstream (out_of_memory for allocations and physical memory, injected_fault for
/// everything else). Each arm fires at most once; fired() says whether it did.
class fault_injection_adaptor final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

  void arm(const std::vector<op_kind>& kinds, std::size_t n);
  void disarm() noexcept;
  [[nodiscard]] bool fired() const noexcept;
  /// Calls of the armed kinds seen since the last arm().
  [[nodiscard]] std::size_t armed_calls() const noexcept;

 private:
  void before(op_kind kind, std::optional<stream_ref> stream) override;

  mutable std::mutex mutex_;
  std::array<bool, static_cast<std::size_t>(op_kind::count_)> armed_{};
  std::size_t target_ = 0;
  std::size_t seen_ = 0;
  bool active_ = false;
  bool fired_ = false;
};

/// Holds a stream's work to widen race windows: before a forwarded stream operation it enqueues a
/// one-index launch that waits on that stream (a timer-spinning kernel on a GPU, a sleep on the
/// host back end), so the operation starts late while the host and other streams run on.
class delay_adaptor final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

  /// Delays the next `ops` stream operations issued to `s` by `d` each.
  void delay_next(std::chrono::microseconds d, std::size_t ops, stream_ref s);
  /// Delays the next stream operation issued to `s` by `d`.
  void delay_next(std::chrono::microseconds d, stream_ref s) { delay_next(d, 1, s); }
  /// Delays every stream operation issued to `s` by a duration drawn from [0, max] with the given
  /// seed (deterministic per seed); max = 0 stops it.
  void delay_randomly(stream_ref s, std::chrono::microseconds max, std::uint64_t seed);
  void clear() noexcept;

 private:
  /// Holds `stream` before a prefetch, copy, fill, launch, host function or event record.
  void before(op_kind kind, std::optional<stream_ref> stream) override;

  struct plan {
    std::chrono::microseconds fixed{0};
    std::size_t fixed_ops = 0;
    std::chrono::microseconds random_max{0};
    std::uint64_t state = 0;
  };
  std::mutex mutex_;
  std::map<void*, plan> plans_;
};

/// Counts calls by kind, allocations by memory kind, and bytes copied by (source kind,
/// destination kind), as classify() sees the pointers at the time of the call.
class counting_adaptor final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

  struct counts {
    std::array<std::size_t, static_cast<std::size_t>(op_kind::count_)> calls{};
    /// allocations[memory_kind] and allocated_bytes[memory_kind]
    std::array<std::size_t, 3> allocations{};
    std::array<std::size_t, 3> allocated_bytes{};
    /// copied_bytes[source pointer_kind][destination pointer_kind]
    std::array<std::array<std::size_t, 4>, 4> copied_bytes{};

    [[nodiscard]] std::size_t calls_of(op_kind k) const noexcept {
      return calls[static_cast<std::size_t>(k)];
    }
    [[nodiscard]] std::size_t allocations_of(memory_kind k) const noexcept {
      return allocations[static_cast<std::size_t>(k)];
    }
    [[nodiscard]] std::size_t copied(pointer_kind from, pointer_kind to) const noexcept {
      return copied_bytes[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)];
    }
    /// Bytes copied with pageable memory on either side.
    [[nodiscard]] std::size_t pageable_bytes() const noexcept;
  };

  [[nodiscard]] counts snapshot() const;
  void reset() noexcept;

 private:
  /// Counts every call, attempted or not.
  void before(op_kind kind, std::optional<stream_ref> stream) override;
  /// Allocations that succeeded and their bytes.
  void* do_allocate(memory_kind kind, std::size_t bytes, int device) override;
  /// Bytes copied by the kinds of memory on either side.
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override;

  mutable std::mutex mutex_;
  counts counts_;
};

}  // namespace offloadkit
