// The executor: the one interface through which every offloadkit implementation touches memory,
// streams, events, kernels, virtual memory and graphs. Two back ends implement it (cuda_executor,
// host_executor) and adaptors wrap it (fault injection, delay injection, counting), so every
// feature runs the same code path on a GPU and on a CPU-only CI machine.
//
// Conventions: asynchronous calls take the stream last; handles are plain, non-owning values
// (device pointers, sizes, device ids, opaque stream/event/graph handles); failures throw the
// typed exceptions of error.hpp; release-type calls are noexcept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace offloadkit {

enum class backend { host, cuda };

/// Where an allocation lives. `device` is device memory of one device; `pinned` is page-locked
/// host memory that copies reach without staging; `pageable` is ordinary host memory.
enum class memory_kind { device, pinned, pageable };

/// The device id that names host memory where an operation takes a location (prefetch).
inline constexpr int host_location = -1;

/// What a pointer is, as the platform sees it (cudaPointerGetAttributes on the cuda back end, the
/// allocation registry on the host back end). Pointers inside a mapped virtual range are `device`.
enum class pointer_kind { device, pinned, pageable, managed };

struct pointer_info {
  pointer_kind kind = pointer_kind::pageable;
  int device = -1;  ///< owning device for device/managed memory, -1 for host memory
};

/// The allocation that holds an address, as [base, base + bytes). One copy may not span two
/// allocations even where their addresses happen to touch (a GPU rejects it), so whoever merges
/// neighbouring buffers into one copy asks for this first. bytes == 0: the platform does not know.
struct allocation_extent {
  const void* base = nullptr;
  std::size_t bytes = 0;
  [[nodiscard]] bool contains(const void* p) const noexcept {
    const auto* b = static_cast<const unsigned char*>(base);
    const auto* q = static_cast<const unsigned char*>(p);
    return bytes != 0 && q >= b && static_cast<std::size_t>(q - b) < bytes;
  }
};

/// A non-owning stream handle. `native` is cudaStream_t on the cuda back end.
struct stream_ref {
  void* native = nullptr;
  int device = 0;
  friend bool operator==(stream_ref a, stream_ref b) {
    return a.native == b.native && a.device == b.device;
  }
  friend bool operator!=(stream_ref a, stream_ref b) { return !(a == b); }
};

/// A non-owning event handle. `native` is cudaEvent_t on the cuda back end.
struct event_ref {
  void* native = nullptr;
  int device = 0;
};

/// A captured, instantiated graph, replayable on any stream of its device.
struct graph_ref {
  void* native = nullptr;
};

/// Physical memory created for a virtual range (CUmemGenericAllocationHandle on cuda).
struct physical_handle {
  std::uint64_t value = 0;
  int device = 0;
  std::size_t bytes = 0;
};

struct memory_info {
  std::size_t free = 0;
  std::size_t total = 0;
};

/// A body launched over the index space [0, n). Built by offloadkit::launch() in launch.hpp,
/// which fills both entry points from the same __host__ __device__ functor.
struct launch_request {
  std::size_t n = 0;
  unsigned block = 256;
  /// The functor, kept alive for as long as any queued or captured work may run it.
  std::shared_ptr<const void> body;
  /// Launches the functor as a kernel on a cudaStream_t; null when the caller was not compiled
  /// by nvcc (the cuda back end then refuses the launch).
  void (*device_launch)(const void* body, std::size_t n, unsigned block,
                        void* cuda_stream) = nullptr;
  /// Runs the functor for indices [begin, end) on the calling thread.
  void (*host_run)(const void* body, std::size_t begin, std::size_t end) = nullptr;
  const char* name = "kernel";
};

/// The kinds of executor calls that adaptors count, fail or delay.
enum class op_kind : unsigned {
  allocate_device,
  allocate_pinned,
  allocate_pageable,
  copy,
  fill,
  launch,
  host_function,
  record,
  wait,
  reserve,
  create_physical,
  map,
  unmap,
  set_access,
  begin_capture,
  end_capture,
  replay,
  allocate_managed,
  prefetch,
  count_  ///< number of kinds, not a kind
};

const char* to_string(op_kind k) noexcept;
const char* to_string(memory_kind k) noexcept;
const char* to_string(pointer_kind k) noexcept;
const char* to_string(backend b) noexcept;

/// op_kind of an allocation of the given memory kind.
op_kind allocation_op(memory_kind k) noexcept;

class executor {
 public:
  executor() = default;
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;
  virtual ~executor() = default;

  // ---- identity -------------------------------------------------------------------------------
  [[nodiscard]] backend kind() const noexcept { return do_kind(); }
  [[nodiscard]] std::string name() const { return do_name(); }
  [[nodiscard]] int device_count() const { return do_device_count(); }

  // ---- memory ---------------------------------------------------------------------------------
  /// Allocates `bytes` (0 allowed: returns a unique non-null pointer) of `kind` on `device`
  /// (ignored for host kinds). Throws out_of_memory when the memory is not available.
  void* allocate(memory_kind kind, std::size_t bytes, int device = 0) {
    return do_allocate(kind, bytes, device);
  }
  void deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept {
    do_deallocate(kind, p, bytes);
  }
  [[nodiscard]] pointer_info classify(const void* p) const { return do_classify(p); }
  /// The allocation (or mapped virtual range) that holds `p`; {nullptr, 0} where none is known.
  [[nodiscard]] allocation_extent extent_of(const void* p) const { return do_extent_of(p); }
  /// Free and total device memory as the platform reports it (the driver on cuda).
  [[nodiscard]] memory_info device_memory(int device = 0) { return do_device_memory(device); }

  // ---- managed memory ---------------------------------------------------------------------------
  /// Allocates `bytes` (0 allowed: a unique non-null pointer) of managed memory: one address that
  /// the host and every device reach, whose pages move between host and device memory on first
  /// touch or by prefetch. classify() calls it `managed`, owned by `device`. Throws
  /// out_of_memory when the memory is not available.
  void* allocate_managed(std::size_t bytes, int device = 0) {
    return do_allocate_managed(bytes, device);
  }
  void deallocate_managed(void* p, std::size_t bytes) noexcept { do_deallocate_managed(p, bytes); }
  /// Moves the pages of [p, p + bytes), inside one managed allocation, to `device`'s memory, or
  /// to host memory for device = host_location, in stream order. The contents never change; a
  /// later touch from elsewhere moves the pages again.
  void prefetch(const void* p, std::size_t bytes, int device, stream_ref s) {
    do_prefetch(p, bytes, device, s);
  }

  // ---- streams and events -----------------------------------------------------------------------
  stream_ref create_stream(int device = 0) { return do_create_stream(device); }
  void destroy_stream(stream_ref s) noexcept { do_destroy_stream(s); }
  event_ref create_event(int device = 0) { return do_create_event(device); }
  void destroy_event(event_ref e) noexcept { do_destroy_event(e); }

  /// Copies `bytes` from `src` to `dst` in stream order; direction is inferred from the pointers.
  void copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
    do_copy(dst, src, bytes, s);
  }
  /// Sets `bytes` at `dst` to the byte `value` in stream order.
  void fill(void* dst, int value, std::size_t bytes, stream_ref s) {
    do_fill(dst, value, bytes, s);
  }
  /// Runs a body over an index space in stream order (see launch.hpp).
  void launch(const launch_request& r, stream_ref s) { do_launch(r, s); }
  /// Runs `fn` on a host thread in stream order; the stream's later work waits for it.
  /// `fn` must not call back into the executor's stream operations.
  void host_function(std::function<void()> fn, stream_ref s) { do_host_function(std::move(fn), s); }

  void record(event_ref e, stream_ref s) { do_record(e, s); }
  /// Makes later work on `s` wait until `e` has completed.
  void wait(event_ref e, stream_ref s) { do_wait(e, s); }
  void synchronize(stream_ref s) { do_synchronize_stream(s); }
  void synchronize(event_ref e) { do_synchronize_event(e); }
  [[nodiscard]] bool ready(event_ref e) { return do_ready(e); }

  // ---- virtual memory ---------------------------------------------------------------------------
  /// Allocation granularity of physical memory on `device`; every size and offset below is a
  /// multiple of it.
  [[nodiscard]] std::size_t granularity(int device = 0) { return do_granularity(device); }
  /// Reserves an address range of `bytes` (no memory behind it). Touching it before map faults.
  void* reserve(std::size_t bytes, int device = 0) { return do_reserve(bytes, device); }
  void unreserve(void* va, std::size_t bytes) noexcept { do_unreserve(va, bytes); }
  physical_handle create_physical(std::size_t bytes, int device = 0) {
    return do_create_physical(bytes, device);
  }
  /// Drops the handle; memory still mapped stays until it is unmapped.
  void release_physical(physical_handle h) noexcept { do_release_physical(h); }
  void map(void* va, std::size_t bytes, physical_handle h) { do_map(va, bytes, h); }
  void unmap(void* va, std::size_t bytes) { do_unmap(va, bytes); }
  /// Grants `device` read/write access to a mapped range.
  void set_access(void* va, std::size_t bytes, int device = 0) { do_set_access(va, bytes, device); }

  // ---- graphs -----------------------------------------------------------------------------------
  /// Starts recording the work issued to `s` instead of running it.
  void begin_capture(stream_ref s) { do_begin_capture(s); }
  graph_ref end_capture(stream_ref s) { return do_end_capture(s); }
  /// Re-issues the captured work, on the same addresses, in order on `s`.
  void replay(graph_ref g, stream_ref s) { do_replay(g, s); }
  void destroy_graph(graph_ref g) noexcept { do_destroy_graph(g); }

 private:
  [[nodiscard]] virtual backend do_kind() const noexcept = 0;
  [[nodiscard]] virtual std::string do_name() const = 0;
  [[nodiscard]] virtual int do_device_count() const = 0;
  virtual void* do_allocate(memory_kind kind, std::size_t bytes, int device) = 0;
  virtual void do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept = 0;
  [[nodiscard]] virtual pointer_info do_classify(const void* p) const = 0;
  [[nodiscard]] virtual allocation_extent do_extent_of(const void* p) const = 0;
  virtual memory_info do_device_memory(int device) = 0;
  virtual void* do_allocate_managed(std::size_t bytes, int device) = 0;
  virtual void do_deallocate_managed(void* p, std::size_t bytes) noexcept = 0;
  virtual void do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) = 0;
  virtual stream_ref do_create_stream(int device) = 0;
  virtual void do_destroy_stream(stream_ref s) noexcept = 0;
  virtual event_ref do_create_event(int device) = 0;
  virtual void do_destroy_event(event_ref e) noexcept = 0;
  virtual void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) = 0;
  virtual void do_fill(void* dst, int value, std::size_t bytes, stream_ref s) = 0;
  virtual void do_launch(const launch_request& r, stream_ref s) = 0;
  virtual void do_host_function(std::function<void()> fn, stream_ref s) = 0;
  virtual void do_record(event_ref e, stream_ref s) = 0;
  virtual void do_wait(event_ref e, stream_ref s) = 0;
  virtual void do_synchronize_stream(stream_ref s) = 0;
  virtual void do_synchronize_event(event_ref e) = 0;
  virtual bool do_ready(event_ref e) = 0;
  virtual std::size_t do_granularity(int device) = 0;
  virtual void* do_reserve(std::size_t bytes, int device) = 0;
  virtual void do_unreserve(void* va, std::size_t bytes) noexcept = 0;
  virtual physical_handle do_create_physical(std::size_t bytes, int device) = 0;
  virtual void do_release_physical(physical_handle h) noexcept = 0;
  virtual void do_map(void* va, std::size_t bytes, physical_handle h) = 0;
  virtual void do_unmap(void* va, std::size_t bytes) = 0;
  virtual void do_set_access(void* va, std::size_t bytes, int device) = 0;
  virtual void do_begin_capture(stream_ref s) = 0;
  virtual graph_ref do_end_capture(stream_ref s) = 0;
  virtual void do_replay(graph_ref g, stream_ref s) = 0;
  virtual void do_destroy_graph(graph_ref g) noexcept = 0;
};

/// Declares an override of every executor hook, in the body of a class derived from executor: what
/// a back end, or an adaptor that implements every hook, writes instead of restating the list. The
/// compiler keeps it in step with the hooks above: one it misses leaves the class abstract, one
/// they lack overrides nothing.
#define OFFLOADKIT_EXECUTOR_HOOK_OVERRIDES                                               \
  backend do_kind() const noexcept override;                                             \
  std::string do_name() const override;                                                  \
  int do_device_count() const override;                                                  \
  void* do_allocate(memory_kind kind, std::size_t bytes, int device) override;           \
  void do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept override;    \
  pointer_info do_classify(const void* p) const override;                                \
  allocation_extent do_extent_of(const void* p) const override;                          \
  memory_info do_device_memory(int device) override;                                     \
  void* do_allocate_managed(std::size_t bytes, int device) override;                     \
  void do_deallocate_managed(void* p, std::size_t bytes) noexcept override;              \
  void do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) override; \
  stream_ref do_create_stream(int device) override;                                      \
  void do_destroy_stream(stream_ref s) noexcept override;                                \
  event_ref do_create_event(int device) override;                                        \
  void do_destroy_event(event_ref e) noexcept override;                                  \
  void do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) override;    \
  void do_fill(void* dst, int value, std::size_t bytes, stream_ref s) override;          \
  void do_launch(const launch_request& r, stream_ref s) override;                        \
  void do_host_function(std::function<void()> fn, stream_ref s) override;                \
  void do_record(event_ref e, stream_ref s) override;                                    \
  void do_wait(event_ref e, stream_ref s) override;                                      \
  void do_synchronize_stream(stream_ref s) override;                                     \
  void do_synchronize_event(event_ref e) override;                                       \
  bool do_ready(event_ref e) override;                                                   \
  std::size_t do_granularity(int device) override;                                       \
  void* do_reserve(std::size_t bytes, int device) override;                              \
  void do_unreserve(void* va, std::size_t bytes) noexcept override;                      \
  physical_handle do_create_physical(std::size_t bytes, int device) override;            \
  void do_release_physical(physical_handle h) noexcept override;                         \
  void do_map(void* va, std::size_t bytes, physical_handle h) override;                  \
  void do_unmap(void* va, std::size_t bytes) override;                                   \
  void do_set_access(void* va, std::size_t bytes, int device) override;                  \
  void do_begin_capture(stream_ref s) override;                                          \
  graph_ref do_end_capture(stream_ref s) override;                                       \
  void do_replay(graph_ref g, stream_ref s) override;                                    \
  void do_destroy_graph(graph_ref g) noexcept override;

}  // namespace offloadkit
