// The host back end of the executor: CUDA's semantics on the CPU with real concurrency.
//
// Memory is host memory recorded in a registry so that classify() and the simulated device
// capacity work as on a GPU. Each stream is a worker thread draining an in-order queue; events are
// markers that the worker of the recording stream signals. A launch runs the functor's host entry
// point over chunks of its index space on a small thread pool. Virtual memory is a PROT_NONE
// reservation into which memfd-backed physical memory is mapped MAP_FIXED, so a stale address
// faults. Graph capture records the operations issued to a stream and replay re-issues them.
#include "offloadkit/host_executor.hpp"

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

namespace offloadkit {
namespace {

/// cudaMalloc returns 256-byte aligned memory; so does the host back end.
constexpr std::size_t allocation_alignment = 256;

/// What an allocation of `bytes` occupies: at least one byte (a 0-byte request still gets its own
/// block, so the pointer is unique and non-null), rounded up to the alignment.
std::size_t padded_size(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + allocation_alignment - 1) / allocation_alignment *
         allocation_alignment;
}
/// CUDA's limit on threads per block; a launch outside [1, max_block] fails on a GPU.
constexpr unsigned max_block = 1024;

/// Set on the executor's own threads (stream workers, launch helpers): CUDA forbids API calls from
/// host functions, and a stream that synchronizes itself from its own worker would deadlock.
thread_local bool tls_executor_thread = false;

std::string errno_text(int e) { return detail::concat(std::strerror(e), " (errno ", e, ")"); }

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

/// Registry key of a pointer (maps keyed by pointer, ordered by std::less).
char* key(const void* p) { return const_cast<char*>(static_cast<const char*>(p)); }

const char* launch_name(const launch_request& r) { return r.name != nullptr ? r.name : "kernel"; }

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

const char* to_string(op::type t) {
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

}  // namespace

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

// ---- construction ------------------------------------------------------------------------------

namespace {
host_executor_options validated(host_executor_options o) {
  const long page = sysconf(_SC_PAGESIZE);
  const std::size_t page_size = page > 0 ? static_cast<std::size_t>(page) : 4096;
  OFFLOADKIT_EXPECTS(o.devices >= 1, out_of_range, "host_executor_options::devices = ", o.devices,
                     " must be at least 1");
  OFFLOADKIT_EXPECTS(o.granularity > 0 && o.granularity % page_size == 0, out_of_range,
                     "host_executor_options::granularity = ", o.granularity,
                     " must be a positive multiple of the page size ", page_size);
  OFFLOADKIT_EXPECTS(o.launch_threads >= 1 && o.launch_threads <= 256, out_of_range,
                     "host_executor_options::launch_threads = ", o.launch_threads,
                     " is outside [1, 256]");
  return o;
}
}  // namespace

host_executor::host_executor(host_executor_options options)
    : impl_(std::make_unique<impl>(validated(options))) {}

host_executor::~host_executor() {
  impl& m = *impl_;
  // Streams first: their queued work may still touch the memory released below.
  std::vector<std::shared_ptr<stream_state>> all;
  {
    std::lock_guard<std::mutex> lk(m.handle_mu);
    for (auto& kv : m.streams) all.push_back(kv.second);
    for (auto& kv : m.default_streams) all.push_back(kv.second);
    for (auto& s : m.orphans) all.push_back(s);
    m.streams.clear();
    m.default_streams.clear();
    m.orphans.clear();
    m.graphs.clear();
    m.events.clear();
  }
  for (auto& s : all) impl::stop_stream(*s);
  for (auto& s : all) {
    if (s->worker.joinable()) s->worker.join();
  }
  std::lock_guard<std::mutex> lk(m.mem_mu);
  // Carved allocations go with their arenas, when the impl is destroyed.
  for (auto& kv : m.allocations) {
    if (!kv.second.carved) std::free(kv.first);
  }
  m.allocations.clear();
  for (auto& kv : m.reservations) munmap(kv.first, kv.second.bytes);
  m.reservations.clear();
  for (auto& kv : m.physicals) {
    if (kv.second.fd >= 0) close(kv.second.fd);
  }
  m.physicals.clear();
}

const host_executor_options& host_executor::options() const noexcept { return impl_->options; }

backend host_executor::do_kind() const noexcept { return backend::host; }

std::string host_executor::do_name() const { return "host"; }

int host_executor::do_device_count() const { return impl_->options.devices; }

// ---- memory ------------------------------------------------------------------------------------

void* host_executor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  impl& m = *impl_;
  OFFLOADKIT_EXPECTS(
      kind == memory_kind::device || kind == memory_kind::pinned || kind == memory_kind::pageable,
      out_of_range, "host_executor::allocate: memory kind ", static_cast<int>(kind),
      " is not one of device, pinned, pageable");
  const bool on_device = kind == memory_kind::device;
  if (on_device) m.check_device(device, "allocate");
  if (bytes > SIZE_MAX - allocation_alignment) {
    OFFLOADKIT_FAIL(out_of_memory, "host_executor::allocate: ", bytes, " bytes of ",
                    to_string(kind), " memory cannot be provided");
  }
  const std::size_t padded = padded_size(bytes);
  if (on_device) {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    m.charge(device, bytes, "allocate");
  }
  if (carving_arena* arena = m.arena_for(kind, device)) {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    char* p = arena->ready(m.options.device_capacity) ? arena->carve(padded) : nullptr;
    if (p == nullptr) {
      if (on_device) m.device_used[device] -= bytes;
      OFFLOADKIT_FAIL(out_of_memory, "host_executor::allocate: no free range of ", padded,
                      " bytes is left in the ", m.options.device_capacity, "-byte reservation for ",
                      to_string(kind), " memory (adjacent_allocations)");
    }
    m.allocations[p] = allocation{kind, bytes, on_device ? device : -1, true};
    return p;
  }
  void* p = impl::host_block(bytes);
  if (p == nullptr) {
    if (on_device) {
      std::lock_guard<std::mutex> lk(m.mem_mu);
      m.device_used[device] -= bytes;
    }
    OFFLOADKIT_FAIL(out_of_memory, "host_executor::allocate: the host could not provide ", bytes,
                    " bytes of ", to_string(kind), " memory");
  }
  std::lock_guard<std::mutex> lk(m.mem_mu);
  m.allocations[key(p)] = allocation{kind, bytes, on_device ? device : -1, false};
  return p;
}

void host_executor::do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  impl& m = *impl_;
  memory_kind registered = kind;
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    auto it = m.allocations.find(key(p));
    const bool deallocate_of_a_live_allocation = it != m.allocations.end();
    OFFLOADKIT_ASSERT_NOEXCEPT(deallocate_of_a_live_allocation);
    if (!deallocate_of_a_live_allocation) return;
    registered = it->second.kind;
    const bool deallocate_of_managed_memory_with_deallocate_managed = !it->second.managed;
    OFFLOADKIT_ASSERT_NOEXCEPT(deallocate_of_managed_memory_with_deallocate_managed);
    if (!deallocate_of_managed_memory_with_deallocate_managed) return;
  }
  const bool deallocate_with_the_allocation_kind = registered == kind;
  OFFLOADKIT_ASSERT_NOEXCEPT(deallocate_with_the_allocation_kind);
  if (registered != memory_kind::pageable && !tls_executor_thread) m.drain_all_streams();
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    auto it = m.allocations.find(key(p));
    // Another thread may have freed it while the streams drained.
    if (it == m.allocations.end()) return;
    if (it->second.kind == memory_kind::device) {
      m.device_used[it->second.device] -=
          std::min(m.device_used[it->second.device], it->second.bytes);
    }
    if (it->second.carved) {
      m.arena_for(it->second.kind, it->second.device)
          ->give_back(it->first, padded_size(it->second.bytes));
      m.allocations.erase(it);
      return;
    }
    m.allocations.erase(it);
  }
  std::free(p);
}

pointer_info host_executor::do_classify(const void* p) const { return impl_->look_up(p).info; }

allocation_extent host_executor::do_extent_of(const void* p) const {
  return impl_->look_up(p).extent;
}

memory_info host_executor::do_device_memory(int device) {
  impl& m = *impl_;
  m.check_device(device, "device_memory");
  std::lock_guard<std::mutex> lk(m.mem_mu);
  return memory_info{m.free_bytes(device), m.options.device_capacity};
}

// ---- managed memory ----------------------------------------------------------------------------
// Managed memory is host memory, which every simulated device reaches at the same address as it
// reaches all host-backend memory. It is not charged to a device's capacity: on a GPU, pages
// count against a device only once they migrate there, and here they never do.

void* host_executor::do_allocate_managed(std::size_t bytes, int device) {
  impl& m = *impl_;
  m.check_device(device, "allocate_managed");
  void* p = impl::host_block(bytes);
  if (p == nullptr) {
    OFFLOADKIT_FAIL(out_of_memory, "host_executor::allocate_managed: the host could not provide ",
                    bytes, " bytes of managed memory");
  }
  allocation a{memory_kind::pageable, bytes, device};
  a.managed = true;
  std::lock_guard<std::mutex> lk(m.mem_mu);
  m.allocations[key(p)] = a;
  return p;
}

void host_executor::do_deallocate_managed(void* p, std::size_t /*bytes*/) noexcept {
  if (p == nullptr) return;
  impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    auto it = m.allocations.find(key(p));
    const bool deallocate_managed_of_a_live_managed_allocation =
        it != m.allocations.end() && it->second.managed;
    OFFLOADKIT_ASSERT_NOEXCEPT(deallocate_managed_of_a_live_managed_allocation);
    if (!deallocate_managed_of_a_live_managed_allocation) return;
  }
  // cudaFree synchronizes the device before the memory goes, and so does the host back end.
  if (!tls_executor_thread) m.drain_all_streams();
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    // Another thread may have freed it while the streams drained.
    if (m.allocations.erase(key(p)) == 0) return;
  }
  std::free(p);
}

void host_executor::do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("prefetch");
  OFFLOADKIT_EXPECTS(device == host_location || (device >= 0 && device < m.options.devices),
                     out_of_range, "host_executor::prefetch: device = ", device, " is outside [0, ",
                     m.options.devices, ") and is not host_location (", host_location, ")");
  if (bytes == 0) {
    (void)m.find_stream(s, "prefetch");  // still reject a bad stream
    return;
  }
  // As cudaMemPrefetchAsync, only managed memory can be prefetched.
  const pointer_info info = m.look_up(p).info;
  OFFLOADKIT_EXPECTS(info.kind == pointer_kind::managed, logic_error, "host_executor::prefetch: [",
                     p, ", +", bytes, ") is ", to_string(info.kind),
                     " memory; only managed memory (allocate_managed) can be prefetched");
  m.check_extent(p, bytes, "prefetch");
  // The pages are host memory wherever they are prefetched to, so the operation moves nothing,
  // but it is a stream operation like any other: it runs after the work issued before it, later
  // work waits for it, and a capture records it.
  op o;
  o.t = op::type::prefetch;
  o.src = p;
  o.bytes = bytes;
  o.value = device;
  m.issue(s, std::move(o), "prefetch");
}

// ---- streams and events
// --------------------------------------------------------------------------

stream_ref host_executor::do_create_stream(int device) {
  impl& m = *impl_;
  m.check_device(device, "create_stream");
  auto s = m.start_stream(device, false);
  std::lock_guard<std::mutex> lk(m.handle_mu);
  m.streams[s.get()] = s;
  return stream_ref{s.get(), device};
}

void host_executor::do_destroy_stream(stream_ref ref) noexcept {
  impl& m = *impl_;
  if (ref.native == nullptr) return;  // the default stream lives as long as the executor
  std::shared_ptr<stream_state> s;
  {
    std::lock_guard<std::mutex> lk(m.handle_mu);
    auto it = m.streams.find(ref.native);
    const bool destroy_stream_of_a_live_stream = it != m.streams.end();
    OFFLOADKIT_ASSERT_NOEXCEPT(destroy_stream_of_a_live_stream);
    if (!destroy_stream_of_a_live_stream) return;
    s = std::move(it->second);
    m.streams.erase(it);
    if (tls_executor_thread) {
      // Joining from a worker could be joining itself; the destructor joins it instead.
      impl::stop_stream(*s);
      m.orphans.push_back(std::move(s));
      return;
    }
  }
  impl::stop_stream(*s);
  impl::join_stream(*s);
}

event_ref host_executor::do_create_event(int device) {
  impl& m = *impl_;
  m.check_device(device, "create_event");
  auto e = std::make_shared<event_state>();
  e->device = device;
  std::lock_guard<std::mutex> lk(m.handle_mu);
  m.events[e.get()] = e;
  return event_ref{e.get(), device};
}

void host_executor::do_destroy_event(event_ref e) noexcept {
  impl& m = *impl_;
  // Queued records and waits hold their own markers, so they complete normally (as on CUDA).
  std::lock_guard<std::mutex> lk(m.handle_mu);
  const bool destroy_event_of_a_live_event = m.events.erase(e.native) == 1;
  OFFLOADKIT_ASSERT_NOEXCEPT(destroy_event_of_a_live_event);
}

void host_executor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("copy");
  if (bytes == 0) return;
  OFFLOADKIT_EXPECTS(dst != nullptr && src != nullptr, logic_error,
                     "host_executor::copy: null pointer (dst = ", dst, ", src = ", src, ") for ",
                     bytes, " bytes");
  m.check_extent(dst, bytes, "copy destination");
  m.check_extent(src, bytes, "copy source");
  const std::uintptr_t d = address(dst);
  const std::uintptr_t r = address(src);
  OFFLOADKIT_EXPECTS(d + bytes <= r || r + bytes <= d, logic_error, "host_executor::copy: source [",
                     src, ", +", bytes, ") and destination [", dst, ", +", bytes, ") overlap");
  op o;
  o.t = op::type::copy;
  o.dst = dst;
  o.src = src;
  o.bytes = bytes;
  m.issue(s, std::move(o), "copy");
}

void host_executor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("fill");
  if (bytes == 0) return;
  OFFLOADKIT_EXPECTS(dst != nullptr, logic_error, "host_executor::fill: null destination for ",
                     bytes, " bytes");
  m.check_extent(dst, bytes, "fill");
  op o;
  o.t = op::type::fill;
  o.dst = dst;
  o.value = static_cast<unsigned char>(value);
  o.bytes = bytes;
  m.issue(s, std::move(o), "fill");
}

void host_executor::do_launch(const launch_request& r, stream_ref s) {
  impl& m = *impl_;
  OFFLOADKIT_EXPECTS(r.host_run != nullptr, logic_error, "host_executor::launch: '", launch_name(r),
                     "' has no host entry point (host_run is null); build requests with "
                     "offloadkit::make_launch");
  OFFLOADKIT_EXPECTS(r.block >= 1 && r.block <= max_block, out_of_range, "host_executor::launch: '",
                     launch_name(r), "' block = ", r.block, " is outside [1, ", max_block, "]");
  if (r.n == 0) {
    (void)m.find_stream(s, "launch");  // still reject a bad stream
    return;
  }
  op o;
  o.t = op::type::launch;
  o.request = r;
  m.issue(s, std::move(o), "launch");
}

void host_executor::do_host_function(std::function<void()> fn, stream_ref s) {
  OFFLOADKIT_EXPECTS(static_cast<bool>(fn), logic_error,
                     "host_executor::host_function: the function is empty");
  op o;
  o.t = op::type::host_function;
  o.fn = std::move(fn);
  impl_->issue(s, std::move(o), "host_function");
}

void host_executor::do_record(event_ref e, stream_ref s) {
  impl& m = *impl_;
  auto ev = m.find_event(e, "record");
  OFFLOADKIT_EXPECTS(ev->device == s.device, logic_error, "host_executor::record: event ", e.native,
                     " of device ", ev->device, " cannot be recorded on a stream of device ",
                     s.device, " (CUDA requires the same device)");
  op o;
  o.t = op::type::record;
  o.event = std::move(ev);
  m.issue(s, std::move(o), "record");
}

void host_executor::do_wait(event_ref e, stream_ref s) {
  impl& m = *impl_;
  op o;
  o.t = op::type::wait;
  o.event = m.find_event(e, "wait");
  m.issue(s, std::move(o), "wait");
}

void host_executor::do_synchronize_stream(stream_ref ref) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("synchronize(stream)");
  auto s = m.find_stream(ref, "synchronize");
  std::unique_lock<std::mutex> lk(s->mu);
  OFFLOADKIT_EXPECTS(!s->capture, state_error, "host_executor::synchronize: stream ", ref.native,
                     " is capturing; end the capture first");
  const std::uint64_t target = s->enqueued;
  s->done_cv.wait(lk, [&] { return s->completed >= target; });
  if (s->sticky) {
    std::exception_ptr error = std::exchange(s->sticky, nullptr);
    lk.unlock();
    std::rethrow_exception(error);
  }
}

void host_executor::do_synchronize_event(event_ref e) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("synchronize(event)");
  auto ev = m.find_event(e, "synchronize");
  std::unique_lock<std::mutex> lk(m.signal_mu);
  std::shared_ptr<marker> mark = ev->latest;
  if (!mark) return;
  m.signal_cv.wait(lk, [&] { return mark->done; });
}

bool host_executor::do_ready(event_ref e) {
  impl& m = *impl_;
  auto ev = m.find_event(e, "ready");
  std::lock_guard<std::mutex> lk(m.signal_mu);
  return !ev->latest || ev->latest->done;
}

// ---- virtual memory
// ------------------------------------------------------------------------------

std::size_t host_executor::do_granularity(int device) {
  impl_->check_device(device, "granularity");
  return impl_->options.granularity;
}

void* host_executor::do_reserve(std::size_t bytes, int device) {
  impl& m = *impl_;
  m.check_device(device, "reserve");
  m.check_granular(bytes, "reserve");
  const std::size_t g = m.options.granularity;
  OFFLOADKIT_EXPECTS(bytes <= SIZE_MAX - g, out_of_range, "host_executor::reserve: bytes = ", bytes,
                     " is too large to reserve");
  // Over-reserve by one granule and trim both ends, so the range starts on a granule boundary.
  void* raw =
      mmap(nullptr, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    const int e = errno;
    OFFLOADKIT_FAIL(out_of_memory, "host_executor::reserve: no address range of ", bytes,
                    " bytes is available: ", errno_text(e));
  }
  const std::size_t head = (g - address(raw) % g) % g;
  char* base = static_cast<char*>(raw) + head;
  if (head > 0) munmap(raw, head);
  if (g - head > 0) munmap(base + bytes, g - head);
  std::lock_guard<std::mutex> lk(m.mem_mu);
  reservation r;
  r.bytes = bytes;
  r.device = device;
  m.reservations[base] = std::move(r);
  return base;
}

void host_executor::do_unreserve(void* va, std::size_t bytes) noexcept {
  impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.mem_mu);
  auto it = m.reservations.find(key(va));
  const bool unreserve_of_a_reserved_base = it != m.reservations.end();
  OFFLOADKIT_ASSERT_NOEXCEPT(unreserve_of_a_reserved_base);
  if (!unreserve_of_a_reserved_base) return;
  const bool unreserve_with_the_reserved_size = it->second.bytes == bytes;
  OFFLOADKIT_ASSERT_NOEXCEPT(unreserve_with_the_reserved_size);
  // Whatever is still mapped goes with the range (its physical memory stays while not released).
  for (auto& kv : it->second.mappings) m.drop_mapping(kv.second.handle);
  munmap(va, it->second.bytes);
  m.reservations.erase(it);
}

physical_handle host_executor::do_create_physical(std::size_t bytes, int device) {
  impl& m = *impl_;
  m.check_device(device, "create_physical");
  m.check_granular(bytes, "create_physical");
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    m.charge(device, bytes, "create_physical");
    id = m.next_physical++;
  }
  auto uncharge = [&] {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    m.device_used[device] -= std::min(m.device_used[device], bytes);
  };
  const int fd = memfd_create("offloadkit-physical", MFD_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    uncharge();
    OFFLOADKIT_FAIL(runtime_error,
                    "host_executor::create_physical: memfd_create failed: ", errno_text(e));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    close(fd);
    uncharge();
    if (e == ENOMEM || e == ENOSPC || e == EFBIG) {
      OFFLOADKIT_FAIL(out_of_memory, "host_executor::create_physical: ", bytes, " bytes on device ",
                      device, " are not available: ", errno_text(e));
    }
    OFFLOADKIT_FAIL(runtime_error, "host_executor::create_physical: ftruncate to ", bytes,
                    " bytes failed: ", errno_text(e));
  }
  std::lock_guard<std::mutex> lk(m.mem_mu);
  m.physicals[id] = physical{fd, bytes, device, false, 0};
  return physical_handle{id, device, bytes};
}

void host_executor::do_release_physical(physical_handle h) noexcept {
  impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.mem_mu);
  auto it = m.physicals.find(h.value);
  const bool release_of_a_live_physical_handle = it != m.physicals.end() && !it->second.released;
  OFFLOADKIT_ASSERT_NOEXCEPT(release_of_a_live_physical_handle);
  if (!release_of_a_live_physical_handle) return;
  physical& ph = it->second;
  // The mappings keep the memfd's pages alive; the memory goes with the last of them.
  close(ph.fd);
  ph.fd = -1;
  ph.released = true;
  if (ph.maps == 0) {
    m.device_used[ph.device] -= std::min(m.device_used[ph.device], ph.bytes);
    m.physicals.erase(it);
  }
}

void host_executor::do_map(void* va, std::size_t bytes, physical_handle h) {
  impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.mem_mu);
  auto pt = m.physicals.find(h.value);
  OFFLOADKIT_EXPECTS(pt != m.physicals.end() && !pt->second.released, logic_error,
                     "host_executor::map: physical handle ", h.value,
                     " is unknown or already released");
  physical& ph = pt->second;
  OFFLOADKIT_EXPECTS(bytes == ph.bytes, logic_error, "host_executor::map: bytes = ", bytes,
                     " differs from the size of physical handle ", h.value, " (", ph.bytes,
                     "); map whole physical allocations");
  std::size_t offset = 0;
  reservation& r = m.find_reservation(va, bytes, "map", offset);
  // An existing mapping overlaps [offset, offset + bytes) if it starts before the end and ends
  // after the start; only the one just before `offset + bytes` can.
  auto next = r.mappings.lower_bound(offset + bytes);
  if (next != r.mappings.begin()) {
    auto prev = std::prev(next);
    OFFLOADKIT_EXPECTS(prev->first + prev->second.bytes <= offset, logic_error,
                       "host_executor::map: [", va, ", +", bytes,
                       ") overlaps the mapping already at offset ", prev->first, " (+",
                       prev->second.bytes, ") of its reservation; unmap it first");
  }
  void* got = mmap(va, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, ph.fd, 0);
  if (got == MAP_FAILED) {
    const int e = errno;
    // A failed MAP_FIXED may have removed the old mapping: put the reservation's back.
    (void)mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
               0);
    OFFLOADKIT_FAIL(runtime_error, "host_executor::map: mmap of ", bytes, " bytes at ", va,
                    " failed: ", errno_text(e));
  }
  r.mappings[offset] = mapping{h.value, bytes};
  ++ph.maps;
}

void host_executor::do_unmap(void* va, std::size_t bytes) {
  impl& m = *impl_;
  m.check_granular(bytes, "unmap");
  std::lock_guard<std::mutex> lk(m.mem_mu);
  std::size_t offset = 0;
  reservation& r = m.find_reservation(va, bytes, "unmap", offset);
  // As cuMemUnmap: the range must consist of whole mappings, with no gap.
  std::vector<std::map<std::size_t, mapping>::iterator> covered;
  std::size_t at = offset;
  while (at < offset + bytes) {
    auto it = r.mappings.find(at);
    OFFLOADKIT_EXPECTS(it != r.mappings.end() && at + it->second.bytes <= offset + bytes,
                       logic_error, "host_executor::unmap: [", va, ", +", bytes,
                       ") is not a sequence of whole mappings (nothing maps offset ", at,
                       " of the reservation as a mapping's start within the range)");
    covered.push_back(it);
    at += it->second.bytes;
  }
  void* got =
      mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (got == MAP_FAILED) {
    const int e = errno;
    OFFLOADKIT_FAIL(runtime_error, "host_executor::unmap: replacing ", bytes, " bytes at ", va,
                    " failed: ", errno_text(e));
  }
  for (auto& it : covered) {
    const std::uint64_t handle = it->second.handle;
    r.mappings.erase(it);
    m.drop_mapping(handle);
  }
}

void host_executor::do_set_access(void* va, std::size_t bytes, int device) {
  impl& m = *impl_;
  m.check_device(device, "set_access");
  m.check_granular(bytes, "set_access");
  std::lock_guard<std::mutex> lk(m.mem_mu);
  std::size_t offset = 0;
  reservation& r = m.find_reservation(va, bytes, "set_access", offset);
  // Every byte of the range must be mapped, as for cuMemSetAccess.
  std::size_t at = offset;
  while (at < offset + bytes) {
    auto next = r.mappings.upper_bound(at);
    bool mapped = next != r.mappings.begin();
    if (mapped) {
      auto it = std::prev(next);
      mapped = at < it->first + it->second.bytes;
      if (mapped) at = it->first + it->second.bytes;
    }
    OFFLOADKIT_EXPECTS(mapped, logic_error, "host_executor::set_access: offset ", at,
                       " of the range [", va, ", +", bytes, ") is not mapped");
  }
  if (mprotect(va, bytes, PROT_READ | PROT_WRITE) != 0) {
    const int e = errno;
    OFFLOADKIT_FAIL(runtime_error, "host_executor::set_access: mprotect of ", bytes, " bytes at ",
                    va, " failed: ", errno_text(e));
  }
}

// ---- graphs ------------------------------------------------------------------------------------

void host_executor::do_begin_capture(stream_ref ref) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("begin_capture");
  auto s = m.find_stream(ref, "begin_capture");
  std::lock_guard<std::mutex> lk(s->mu);
  OFFLOADKIT_EXPECTS(!s->capture, state_error, "host_executor::begin_capture: stream ", ref.native,
                     " is already capturing");
  s->capture = std::make_unique<graph_state>();
  s->capture->device = s->device;
}

graph_ref host_executor::do_end_capture(stream_ref ref) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("end_capture");
  auto s = m.find_stream(ref, "end_capture");
  std::unique_ptr<graph_state> g;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    OFFLOADKIT_EXPECTS(s->capture != nullptr, state_error, "host_executor::end_capture: stream ",
                       ref.native, " is not capturing");
    g = std::move(s->capture);
  }
  graph_ref out{g.get()};
  std::lock_guard<std::mutex> lk(m.handle_mu);
  m.graphs[g.get()] = std::move(g);
  return out;
}

void host_executor::do_replay(graph_ref g, stream_ref ref) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("replay");
  std::vector<op> ops;
  {
    std::lock_guard<std::mutex> lk(m.handle_mu);
    auto it = m.graphs.find(g.native);
    OFFLOADKIT_EXPECTS(it != m.graphs.end(), logic_error, "host_executor::replay: graph ", g.native,
                       " is not a live graph of this executor");
    OFFLOADKIT_EXPECTS(it->second->device == ref.device, logic_error,
                       "host_executor::replay: the graph was captured on device ",
                       it->second->device, " and cannot run on a stream of device ", ref.device);
    ops = it->second->ops;  // queued copies: the graph may be destroyed right after replay
  }
  auto s = m.find_stream(ref, "replay");
  // One lock for the whole graph, so its operations stay contiguous on the stream.
  std::lock_guard<std::mutex> lk(s->mu);
  for (auto& o : ops) m.issue_locked(*s, std::move(o), "replay");
}

void host_executor::do_destroy_graph(graph_ref g) noexcept {
  impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.handle_mu);
  auto it = m.graphs.find(g.native);
  const bool destroy_graph_of_a_live_graph = it != m.graphs.end();
  OFFLOADKIT_ASSERT_NOEXCEPT(destroy_graph_of_a_live_graph);
  if (!destroy_graph_of_a_live_graph) return;
  m.graphs.erase(it);
}

}  // namespace offloadkit
