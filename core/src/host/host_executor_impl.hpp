// The host executor's state, shared by the files that implement it by concern: memory
// (host_memory.cpp), streams and events (host_streams.cpp), virtual memory
// (host_virtual_memory.cpp), graphs (host_graphs.cpp), construction (host_executor.cpp). Private
// to offloadkit_core.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"

namespace offloadkit::detail::host {

/// cudaMalloc returns 256-byte aligned memory; so does the host back end.
inline constexpr std::size_t allocation_alignment = 256;

/// What an allocation of `bytes` occupies: at least one byte (a 0-byte request still gets its own
/// block, so the pointer is unique and non-null), rounded up to the alignment.
inline std::size_t padded_size(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + allocation_alignment - 1) / allocation_alignment *
         allocation_alignment;
}
/// CUDA's limit on threads per block; a launch outside [1, max_block] fails on a GPU.
inline constexpr unsigned max_block = 1024;

/// Set on the executor's own threads (stream workers, launch helpers): CUDA forbids API calls from
/// host functions, and a stream that synchronizes itself from its own worker would deadlock.
inline thread_local bool tls_executor_thread = false;

inline std::string errno_text(int e) {
  return detail::concat(std::strerror(e), " (errno ", e, ")");
}

inline std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

/// Registry key of a pointer (maps keyed by pointer, ordered by std::less).
inline char* key(const void* p) { return const_cast<char*>(static_cast<const char*>(p)); }

inline const char* launch_name(const launch_request& r) {
  return r.name != nullptr ? r.name : "kernel";
}

/// A record() that has been issued; the worker of its stream sets `done` (under signal_mu).
struct marker {
  bool done = false;
};

struct event_state {
  int device = 0;
  /// The most recent record, or null before the first one (guarded by signal_mu).
  std::shared_ptr<marker> latest;
};

/// One stream operation, as queued on a stream or kept in a captured graph.
struct op {
  enum class type { copy, fill, launch, host_function, record, wait, prefetch };
  type t = type::copy;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  int value = 0;
  launch_request request;
  std::function<void()> fn;
  /// record/wait in a graph: the event, resolved to a marker when the op is issued.
  std::shared_ptr<event_state> event;
  /// record/wait on a queue: the marker to signal or to wait for.
  std::shared_ptr<marker> mark;
};

inline const char* to_string(op::type t) {
  switch (t) {
    case op::type::copy:
      return "copy";
    case op::type::fill:
      return "fill";
    case op::type::launch:
      return "launch";
    case op::type::host_function:
      return "host_function";
    case op::type::record:
      return "record";
    case op::type::wait:
      return "wait";
    case op::type::prefetch:
      return "prefetch";
  }
  return "op";
}

struct graph_state {
  int device = 0;
  std::vector<op> ops;
};

struct stream_state {
  int device = 0;
  bool is_default = false;
  std::mutex mu;
  std::condition_variable work_cv;  ///< the worker waits here for operations
  std::condition_variable done_cv;  ///< synchronize() waits here for completions
  std::deque<op> queue;
  std::uint64_t enqueued = 0;
  std::uint64_t completed = 0;
  bool stopping = false;
  std::exception_ptr sticky;
  std::unique_ptr<graph_state> capture;  ///< non-null while capturing
  std::thread worker;
};

/// One launch's index space, split into chunks that the stream's worker and the pool's helpers
/// take in turn. The worker that issued it waits until every chunk is done.
struct launch_job {
  void (*host_run)(const void*, std::size_t, std::size_t) = nullptr;
  std::shared_ptr<const void> body;
  std::size_t n = 0;
  std::size_t chunk = 1;
  std::size_t chunks = 0;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable cv;
  std::size_t done = 0;
  std::exception_ptr error;

  void work() {
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= chunks) return;
      if (!failed.load()) {
        const std::size_t begin = i * chunk;
        const std::size_t end = std::min(n, begin + chunk);
        try {
          host_run(body.get(), begin, end);
        } catch (...) {
          std::lock_guard<std::mutex> lk(mu);
          if (!error) error = std::current_exception();
          failed.store(true);
        }
      }
      std::lock_guard<std::mutex> lk(mu);
      if (++done == chunks) cv.notify_all();
    }
  }

  void wait() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done == chunks; });
  }
};

/// Helper threads for launches. They only ever run chunks, which never block on other work, so
/// every queued job makes progress even while all helpers are busy (its worker takes chunks too).
class launch_pool {
 public:
  explicit launch_pool(unsigned helpers) {
    threads_.reserve(helpers);
    for (unsigned i = 0; i < helpers; ++i) threads_.emplace_back([this] { run(); });
  }
  ~launch_pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  launch_pool(const launch_pool&) = delete;
  launch_pool& operator=(const launch_pool&) = delete;

  [[nodiscard]] std::size_t helpers() const noexcept { return threads_.size(); }

  void offer(const std::shared_ptr<launch_job>& job, std::size_t copies) {
    if (copies == 0) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (std::size_t i = 0; i < copies; ++i) jobs_.push_back(job);
    }
    cv_.notify_all();
  }

 private:
  void run() {
    tls_executor_thread = true;
    for (;;) {
      std::shared_ptr<launch_job> job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job->work();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<launch_job>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

struct allocation {
  memory_kind kind = memory_kind::pageable;
  std::size_t bytes = 0;
  int device = -1;
  bool carved = false;  ///< from a carving_arena (adjacent_allocations), not from the heap
  /// Managed memory: host memory like `pageable`, classified as managed and owned by `device`.
  bool managed = false;
};

/// One contiguous reservation from which allocations are carved first-fit by address, so that
/// consecutive allocations are adjacent, as cudaMalloc's can be (adjacent_allocations). The
/// reservation is MAP_NORESERVE: only touched pages cost memory, and freed whole pages are given
/// back to the system.
class carving_arena {
 public:
  carving_arena() = default;
  carving_arena(const carving_arena&) = delete;
  carving_arena& operator=(const carving_arena&) = delete;
  ~carving_arena() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }

  /// Maps the reservation on first use; false when the system refuses it.
  bool ready(std::size_t bytes) {
    if (base_ != nullptr) return true;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    base_ = static_cast<char*>(p);
    bytes_ = bytes;
    free_[0] = bytes;
    return true;
  }

  /// The lowest free range that holds `padded` bytes, or nullptr.
  char* carve(std::size_t padded) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < padded) continue;
      const std::size_t offset = it->first, length = it->second;
      free_.erase(it);
      if (length > padded) free_[offset + padded] = length - padded;
      return base_ + offset;
    }
    return nullptr;
  }

  /// Returns [p, p + padded) to the free ranges, merged with its free neighbours.
  void give_back(char* p, std::size_t padded) noexcept {
    std::size_t offset = static_cast<std::size_t>(p - base_), length = padded;
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && next->first == offset + length) {
      length += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        length += prev->second;
        free_.erase(prev);
      }
    }
    free_[offset] = length;
    // Whole pages inside the freed block go back to the system (they read as zero when reused).
    const long page_size = sysconf(_SC_PAGESIZE);
    const std::size_t page = page_size > 0 ? static_cast<std::size_t>(page_size) : 4096;
    const std::size_t first = (address(p) + page - 1) / page * page;
    const std::size_t last = (address(p) + padded) / page * page;
    if (last > first) {
      // Only a hint: memory that stays committed is still correct, so a refusal is ignored.
      (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    }
  }

 private:
  char* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::map<std::size_t, std::size_t> free_;  ///< offset -> length, disjoint and never touching
};

struct mapping {
  std::uint64_t handle = 0;
  std::size_t bytes = 0;
};

struct reservation {
  std::size_t bytes = 0;
  int device = 0;
  std::map<std::size_t, mapping> mappings;  ///< by offset from the reservation's base
};

struct physical {
  int fd = -1;
  std::size_t bytes = 0;
  int device = 0;
  bool released = false;
  std::size_t maps = 0;
};

}  // namespace offloadkit::detail::host

namespace offloadkit {

// The host executor's files speak of its state by these names.
using namespace detail::host;  // NOLINT(google-build-using-namespace)

struct host_executor::impl {
  explicit impl(host_executor_options o)
      : options(o),
        device_used(static_cast<std::size_t>(std::max(o.devices, 0)), 0),
        pool(std::max(o.launch_threads, 1U) - 1) {
    for (int d = 0; d < o.devices; ++d) device_arenas.push_back(std::make_unique<carving_arena>());
  }

  /// The arena that carves `kind` memory of `device`, or nullptr where allocations come from the
  /// heap (adjacent_allocations off, or pageable memory).
  carving_arena* arena_for(memory_kind kind, int device) {
    if (!options.adjacent_allocations) return nullptr;
    if (kind == memory_kind::device) return device_arenas[static_cast<std::size_t>(device)].get();
    if (kind == memory_kind::pinned) return &pinned_arena;
    return nullptr;
  }

  host_executor_options options;

  // ---- memory registry (guarded by mem_mu) ----
  mutable std::mutex mem_mu;
  std::map<char*, allocation> allocations;
  std::map<char*, reservation> reservations;
  std::map<std::uint64_t, physical> physicals;
  std::uint64_t next_physical = 1;
  std::vector<std::size_t> device_used;
  /// adjacent_allocations: one arena per device, and one for pinned memory.
  std::vector<std::unique_ptr<carving_arena>> device_arenas;
  carving_arena pinned_arena;

  // ---- handles (guarded by handle_mu) ----
  std::mutex handle_mu;
  std::map<const void*, std::shared_ptr<stream_state>> streams;
  std::map<int, std::shared_ptr<stream_state>> default_streams;
  std::map<const void*, std::shared_ptr<event_state>> events;
  std::map<const void*, std::unique_ptr<graph_state>> graphs;
  /// Streams destroyed from one of the executor's own threads, joined by the destructor.
  std::vector<std::shared_ptr<stream_state>> orphans;

  // ---- event markers ----
  std::mutex signal_mu;
  std::condition_variable signal_cv;

  launch_pool pool;

  // ---- checks ----
  void check_device(int device, const char* what) const {
    OFFLOADKIT_EXPECTS(device >= 0 && device < options.devices, out_of_range,
                       "host_executor::", what, ": device = ", device, " is outside [0, ",
                       options.devices, ")");
  }

  void check_granular(std::size_t bytes, const char* what) const {
    OFFLOADKIT_EXPECTS(bytes > 0 && bytes % options.granularity == 0, out_of_range,
                       "host_executor::", what, ": bytes = ", bytes,
                       " is not a positive multiple of the granularity ", options.granularity);
  }

  static void check_not_on_executor_thread(const char* what) {
    OFFLOADKIT_EXPECTS(!tls_executor_thread, logic_error, "host_executor::", what,
                       " was called from a host function or launch body; like CUDA, the host "
                       "back end does not allow stream operations from there");
  }

  [[nodiscard]] std::size_t free_bytes(int device) const {
    return options.device_capacity - std::min(options.device_capacity, device_used[device]);
  }

  /// A fresh block of host memory for an allocation of `bytes`: a 0-byte request still gets its
  /// own block, so the pointer is unique and non-null. Null when the host cannot provide it.
  static void* host_block(std::size_t bytes) noexcept {
    if (bytes > SIZE_MAX - allocation_alignment) return nullptr;
    void* p = nullptr;
    if (posix_memalign(&p, allocation_alignment, padded_size(bytes)) != 0) return nullptr;
    return p;
  }

  /// Counts `bytes` against `device`'s capacity or throws out_of_memory (mem_mu held).
  void charge(int device, std::size_t bytes, const char* what) {
    const std::size_t free = free_bytes(device);
    if (bytes > free) {
      OFFLOADKIT_FAIL(out_of_memory, "host_executor::", what, ": ", bytes,
                      " bytes requested on device ", device, " but only ", free,
                      " bytes are free of ", options.device_capacity);
    }
    device_used[device] += bytes;
  }

  /// The allocation or reservation that contains p, as [base, base + size) (mem_mu held).
  bool find_extent(const void* p, const char*& base, std::size_t& size, pointer_info& info) const {
    const std::uintptr_t a = address(p);
    auto it = allocations.upper_bound(key(p));
    if (it != allocations.begin()) {
      --it;
      const std::size_t extent = std::max<std::size_t>(it->second.bytes, 1);
      if (a - address(it->first) < extent) {
        base = it->first;
        size = it->second.bytes;
        info.kind = it->second.managed                       ? pointer_kind::managed
                    : it->second.kind == memory_kind::device ? pointer_kind::device
                    : it->second.kind == memory_kind::pinned ? pointer_kind::pinned
                                                             : pointer_kind::pageable;
        info.device =
            it->second.kind == memory_kind::device || it->second.managed ? it->second.device : -1;
        return true;
      }
    }
    auto rt = reservations.upper_bound(key(p));
    if (rt != reservations.begin()) {
      --rt;
      if (a - address(rt->first) < rt->second.bytes) {
        base = rt->first;
        size = rt->second.bytes;
        info.kind = pointer_kind::device;
        info.device = rt->second.device;
        return true;
      }
    }
    return false;
  }

  /// What the registry knows of an address: its allocation or reservation and what kind it is
  /// (pageable host memory of no known extent where it knows nothing).
  struct registry_entry {
    allocation_extent extent;
    pointer_info info{pointer_kind::pageable, -1};
  };
  registry_entry look_up(const void* p) const {
    std::lock_guard<std::mutex> lk(mem_mu);
    const char* base = nullptr;
    std::size_t size = 0;
    registry_entry e;
    if (find_extent(p, base, size, e.info)) e.extent = allocation_extent{base, size};
    return e;
  }

  /// Rejects a stream operation that runs past the end of a known allocation or reservation, which
  /// a GPU reports as an invalid argument or an illegal address.
  void check_extent(const void* p, std::size_t bytes, const char* what) const {
    std::lock_guard<std::mutex> lk(mem_mu);
    const char* base = nullptr;
    std::size_t size = 0;
    pointer_info info;
    if (!find_extent(p, base, size, info)) return;
    const std::size_t offset = address(p) - address(base);
    OFFLOADKIT_EXPECTS(bytes <= size && offset <= size - bytes, out_of_range,
                       "host_executor::", what, ": [", p, ", +", bytes,
                       ") runs past the end of its ", to_string(info.kind), " memory [",
                       static_cast<const void*>(base), ", +", size, ")");
  }

  /// The reservation that holds [va, va + bytes), with va's offset in it (mem_mu held).
  reservation& find_reservation(void* va, std::size_t bytes, const char* what,
                                std::size_t& offset) {
    auto it = reservations.upper_bound(key(va));
    if (it != reservations.begin()) {
      --it;
      const std::size_t off = address(va) - address(it->first);
      if (off < it->second.bytes && bytes <= it->second.bytes - off) {
        OFFLOADKIT_EXPECTS(off % options.granularity == 0, logic_error, "host_executor::", what,
                           ": va = ", va, " is at offset ", off,
                           " of its reservation, not a multiple of the granularity ",
                           options.granularity);
        offset = off;
        return it->second;
      }
    }
    OFFLOADKIT_FAIL(out_of_range, "host_executor::", what, ": [", va, ", +", bytes,
                    ") does not lie inside one reserved range");
  }

  /// Drops one mapping of a physical allocation; frees it when it is released and unmapped.
  void drop_mapping(std::uint64_t handle) {
    auto it = physicals.find(handle);
    if (it == physicals.end()) return;
    physical& ph = it->second;
    if (ph.maps > 0) --ph.maps;
    if (ph.released && ph.maps == 0) {
      device_used[ph.device] -= std::min(device_used[ph.device], ph.bytes);
      physicals.erase(it);
    }
  }

  // ---- streams ----
  std::shared_ptr<stream_state> start_stream(int device, bool is_default) {
    auto s = std::make_shared<stream_state>();
    s->device = device;
    s->is_default = is_default;
    stream_state* raw = s.get();
    s->worker = std::thread([this, raw] { run_worker(*raw); });
    return s;
  }

  std::shared_ptr<stream_state> find_stream(stream_ref ref, const char* what) {
    std::lock_guard<std::mutex> lk(handle_mu);
    if (ref.native == nullptr) {
      // The null stream, as on CUDA, is each device's default stream; it is created on first use.
      check_device(ref.device, what);
      auto& s = default_streams[ref.device];
      if (!s) s = start_stream(ref.device, true);
      return s;
    }
    auto it = streams.find(ref.native);
    OFFLOADKIT_EXPECTS(it != streams.end(), logic_error, "host_executor::", what, ": stream ",
                       ref.native, " is not a live stream of this executor");
    OFFLOADKIT_EXPECTS(it->second->device == ref.device, logic_error, "host_executor::", what,
                       ": stream ", ref.native, " belongs to device ", it->second->device,
                       " but the handle says device ", ref.device);
    return it->second;
  }

  std::shared_ptr<event_state> find_event(event_ref ref, const char* what) {
    std::lock_guard<std::mutex> lk(handle_mu);
    auto it = events.find(ref.native);
    OFFLOADKIT_EXPECTS(it != events.end(), logic_error, "host_executor::", what, ": event ",
                       ref.native, " is not a live event of this executor");
    return it->second;
  }

  static void stop_stream(stream_state& s) noexcept {
    {
      std::lock_guard<std::mutex> lk(s.mu);
      s.stopping = true;
      s.capture.reset();
    }
    s.work_cv.notify_all();
  }

  /// Waits for the worker to drain its queue and exit; reports (debug) an error nobody collected.
  static void join_stream(stream_state& s) noexcept {
    if (s.worker.joinable()) s.worker.join();
    const bool stream_error_collected_before_destroy = !s.sticky;
    OFFLOADKIT_ASSERT_NOEXCEPT(stream_error_collected_before_destroy);
  }

  /// Issues one operation to a stream whose mutex `lk` holds: recorded while capturing, queued
  /// otherwise. record/wait resolve their event to a marker here, at issue time, as CUDA does.
  void issue_locked(stream_state& s, op o, const char* what) {
    if (s.capture) {
      s.capture->ops.push_back(std::move(o));
      return;
    }
    OFFLOADKIT_EXPECTS(!s.stopping, logic_error, "host_executor::", what,
                       ": the stream is being destroyed");
    if (o.t == op::type::record) {
      auto m = std::make_shared<marker>();
      {
        std::lock_guard<std::mutex> lk(signal_mu);
        o.event->latest = m;
      }
      o.mark = std::move(m);
      o.event.reset();
    } else if (o.t == op::type::wait) {
      {
        std::lock_guard<std::mutex> lk(signal_mu);
        o.mark = o.event->latest;
        // Never recorded, or its latest record is already complete: nothing to wait for.
        if (!o.mark || o.mark->done) return;
      }
      o.event.reset();
    }
    s.queue.push_back(std::move(o));
    ++s.enqueued;
    s.work_cv.notify_one();
  }

  void issue(stream_ref ref, op o, const char* what) {
    check_not_on_executor_thread(what);
    auto s = find_stream(ref, what);
    std::lock_guard<std::mutex> lk(s->mu);
    issue_locked(*s, std::move(o), what);
  }

  void run_worker(stream_state& s) {
    tls_executor_thread = true;
    for (;;) {
      op o;
      {
        std::unique_lock<std::mutex> lk(s.mu);
        s.work_cv.wait(lk, [&] { return s.stopping || !s.queue.empty(); });
        if (s.queue.empty()) return;
        o = std::move(s.queue.front());
        s.queue.pop_front();
      }
      std::exception_ptr error = execute(o);
      o = op{};  // drop the body and function before reporting completion
      {
        std::lock_guard<std::mutex> lk(s.mu);
        // Moved, not copied: the exception then belongs to whoever synchronizes.
        if (error && !s.sticky) s.sticky = std::move(error);
        error = nullptr;
        ++s.completed;
      }
      s.done_cv.notify_all();
    }
  }

  std::exception_ptr execute(op& o) noexcept {
    try {
      switch (o.t) {
        case op::type::copy:
          std::memcpy(o.dst, o.src, o.bytes);
          break;
        case op::type::fill:
          std::memset(o.dst, o.value, o.bytes);
          break;
        case op::type::launch:
          run_launch(o.request);
          break;
        case op::type::host_function:
          o.fn();
          break;
        case op::type::prefetch:
          break;
        case op::type::record: {
          std::lock_guard<std::mutex> lk(signal_mu);
          o.mark->done = true;
          signal_cv.notify_all();
          break;
        }
        case op::type::wait: {
          std::unique_lock<std::mutex> lk(signal_mu);
          signal_cv.wait(lk, [&] { return o.mark->done; });
          break;
        }
      }
      return nullptr;
    } catch (const runtime_error&) {
      return std::current_exception();
    } catch (const std::exception& e) {
      return std::make_exception_ptr(runtime_error(detail::concat(
          "host_executor: a ", to_string(o.t), " operation", o.t == op::type::launch ? " '" : "",
          o.t == op::type::launch ? launch_name(o.request) : "", o.t == op::type::launch ? "'" : "",
          " failed on its stream: ", e.what())));
    } catch (...) {
      return std::make_exception_ptr(
          runtime_error(detail::concat("host_executor: a ", to_string(o.t),
                                       " operation failed on its stream with an exception "
                                       "that is not a std::exception")));
    }
  }

  void run_launch(const launch_request& r) {
    auto job = std::make_shared<launch_job>();
    job->host_run = r.host_run;
    job->body = r.body;
    job->n = r.n;
    const std::size_t threads = pool.helpers() + 1;
    // A few chunks per thread balance uneven bodies; small index spaces get one index per chunk,
    // so even tiny launches run concurrently and exercise the bodies' atomics.
    const std::size_t target = std::min<std::size_t>(r.n, threads * 4);
    job->chunk = (r.n + target - 1) / target;
    job->chunks = (r.n + job->chunk - 1) / job->chunk;
    pool.offer(job, std::min(pool.helpers(), job->chunks - 1));
    job->work();
    job->wait();
    // Take the error out of the job: a helper may drop the last reference to the job later.
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lk(job->mu);
      error = std::move(job->error);
    }
    if (error) std::rethrow_exception(error);
  }

  /// Waits for everything issued so far to every stream: cudaFree and cudaFreeHost synchronize
  /// the device before the memory goes, and so does the host back end.
  void drain_all_streams() noexcept {
    std::vector<std::shared_ptr<stream_state>> all;
    {
      std::lock_guard<std::mutex> lk(handle_mu);
      for (auto& kv : streams) all.push_back(kv.second);
      for (auto& kv : default_streams) all.push_back(kv.second);
    }
    for (auto& s : all) {
      std::unique_lock<std::mutex> lk(s->mu);
      const std::uint64_t target = s->enqueued;
      s->done_cv.wait(lk, [&] { return s->completed >= target; });
    }
  }
};

}  // namespace offloadkit
