// CUPTI recorder: loads libcupti with dlopen, resolves the entry points it needs with dlsym, and
// turns activity records and API callbacks into timeline records. CUPTI's headers are used for
// types only.
#include "offloadkit/traces/cupti_recorder.hpp"

#include <cupti.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "offloadkit/error.hpp"

namespace offloadkit::traces {
namespace {

// ---- the loaded library -------------------------------------------------------------------------

struct cupti_api {
  void* handle = nullptr;
  std::string path;
  std::string reason;  // why it is unusable, "" when usable
  decltype(&cuptiActivityEnable) activity_enable = nullptr;
  decltype(&cuptiActivityDisable) activity_disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;  // optional
  decltype(&cuptiGetTimestamp) get_timestamp = nullptr;
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;       // optional
  decltype(&cuptiSetThreadIdType) set_thread_id_type = nullptr;  // optional
};

std::vector<std::string> candidate_paths() {
  std::vector<std::string> v;
  if (const char* p = std::getenv("OFFLOADKIT_CUPTI_PATH"); p != nullptr && *p != '\0') {
    v.emplace_back(p);
  }
  // The loader's own search first (LD_LIBRARY_PATH, rpath, ld.so.cache), then the usual toolkit
  // locations, with and without the extras/CUPTI layout of older toolkits.
  v.emplace_back("libcupti.so.13");
  v.emplace_back("libcupti.so");
  std::vector<std::string> roots;
  if (const char* h = std::getenv("CUDA_HOME"); h != nullptr && *h != '\0') roots.emplace_back(h);
  if (const char* h = std::getenv("CUDA_PATH"); h != nullptr && *h != '\0') roots.emplace_back(h);
  roots.emplace_back("/usr/local/cuda");
  for (const auto& r : roots) {
    for (const char* sub : {"/lib64/", "/extras/CUPTI/lib64/", "/targets/x86_64-linux/lib/"}) {
      for (const char* name : {"libcupti.so.13", "libcupti.so"}) v.push_back(r + sub + name);
    }
  }
  return v;
}

template <class F>
bool resolve(cupti_api& a, F& fn, const char* name, bool required) {
  fn = reinterpret_cast<F>(dlsym(a.handle, name));
  if (fn == nullptr && required) {
    a.reason = std::string("CUPTI at ") + a.path + " lacks the symbol " + name;
    return false;
  }
  return true;
}

const cupti_api& api() {
  static const cupti_api loaded = [] {
    cupti_api a;
    std::string tried;
    for (const auto& p : candidate_paths()) {
      // RTLD_GLOBAL: NVTX_INJECTION64_PATH may point at the same file; one copy must serve both.
      a.handle = dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (a.handle != nullptr) {
        a.path = p;
        Dl_info info;
        char link[4096];
        // Report the real file when the loader found it by bare name.
        if (dladdr(dlsym(a.handle, "cuptiGetTimestamp"), &info) != 0 && info.dli_fname) {
          a.path = info.dli_fname;
        } else if (realpath(p.c_str(), link) != nullptr) {
          a.path = link;
        }
        break;
      }
      tried += (tried.empty() ? "" : ", ") + p;
    }
    if (a.handle == nullptr) {
      a.reason = "CUPTI not found (tried " + tried + "; set OFFLOADKIT_CUPTI_PATH)";
      return a;
    }
    const bool ok = resolve(a, a.activity_enable, "cuptiActivityEnable", true) &&
                    resolve(a, a.activity_disable, "cuptiActivityDisable", true) &&
                    resolve(a, a.register_callbacks, "cuptiActivityRegisterCallbacks", true) &&
                    resolve(a, a.flush_all, "cuptiActivityFlushAll", true) &&
                    resolve(a, a.next_record, "cuptiActivityGetNextRecord", true) &&
                    resolve(a, a.get_timestamp, "cuptiGetTimestamp", true) &&
                    resolve(a, a.subscribe, "cuptiSubscribe", true) &&
                    resolve(a, a.unsubscribe, "cuptiUnsubscribe", true) &&
                    resolve(a, a.enable_callback, "cuptiEnableCallback", true) &&
                    resolve(a, a.dropped_records, "cuptiActivityGetNumDroppedRecords", false) &&
                    resolve(a, a.result_string, "cuptiGetResultString", false) &&
                    resolve(a, a.set_thread_id_type, "cuptiSetThreadIdType", false);
    (void)ok;
    return a;
  }();
  return loaded;
}

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  if (api().result_string != nullptr) api().result_string(r, &s);
  return std::string(s != nullptr ? s : "unknown CUPTI error") + " (" +
         std::to_string(static_cast<int>(r)) + ")";
}

#define OFFLOADKIT_CUPTI_TRY(call)                                                       \
  do {                                                                                   \
    const CUptiResult r_ = (call);                                                       \
    if (r_ != CUPTI_SUCCESS) {                                                           \
      OFFLOADKIT_FAIL(::offloadkit::runtime_error, #call, " failed: ", result_text(r_)); \
    }                                                                                    \
  } while (0)

// ---- process-wide recording state (CUPTI's callbacks are plain functions) --------------------

struct open_range {
  std::string name;
  std::int64_t start = 0;
  std::uint64_t thread = 0;
};

struct recording_state {
  std::mutex mu;
  std::vector<record> records;
  std::map<std::uint32_t, open_range> open_ranges;
  /// Correlation ids of event polls (cudaEventQuery, cuEventQuery), whose synchronization records
  /// are polls, not host waits. A runtime poll and the driver poll beneath it are partners (the
  /// record carries one of the two ids; both go once it comes). query_order keeps them oldest
  /// first, bounded so that polls whose record never comes cannot grow the table without limit.
  std::unordered_map<std::uint32_t, std::uint32_t> query_partner;  // id -> partner id or 0
  std::deque<std::uint32_t> query_order;
  std::uint64_t dropped = 0;
  std::size_t buffer_bytes = std::size_t{8} << 20;
  std::atomic<bool> active{false};
  CUpti_SubscriberHandle subscriber = nullptr;
  bool callbacks_registered = false;
};

recording_state& state() {
  // Leaked on purpose: CUPTI may deliver buffers from its own thread during process exit.
  static auto* s = new recording_state;
  return *s;
}

std::uint64_t this_thread_id() { return static_cast<std::uint64_t>(syscall(SYS_gettid)); }

memory_location location_of(std::uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE:
      return memory_location::pageable;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED:
      return memory_location::pinned;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
      return memory_location::device;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC:
      return memory_location::managed;
    default:
      return memory_location::unknown;
  }
}

copy_direction direction_of_kind(std::uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return copy_direction::h2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return copy_direction::d2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return copy_direction::d2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return copy_direction::h2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return copy_direction::p2p;
    default:
      return copy_direction::unknown;
  }
}

sync_kind sync_of(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return sync_kind::event;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return sync_kind::stream_wait_event;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return sync_kind::stream;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return sync_kind::context;
    default:
      return sync_kind::unknown;
  }
}

/// The span and place every device activity record (kernel, copy, memset) has.
template <class Activity>
void set_device_span(record& r, const Activity* a) {
  r.start_ns = static_cast<std::int64_t>(a->start);
  r.end_ns = static_cast<std::int64_t>(a->end);
  r.device = static_cast<int>(a->deviceId);
  r.stream = a->streamId;
}

/// A copy record: its direction's name, its ends' kinds, its bytes and its span.
template <class Memcpy>
void set_copy(record& r, const Memcpy* m, copy_direction d) {
  r.kind = record_kind::memcpy;
  r.direction = d;
  r.src = location_of(m->srcKind);
  r.dst = location_of(m->dstKind);
  r.name = std::string("memcpy ") + to_string(d);
  r.bytes = m->bytes;
  set_device_span(r, m);
}

/// Converts one activity record; called with the state's mutex held.
void convert(const CUpti_Activity* a, recording_state& s) {
  record r;
  switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
      r.kind = record_kind::kernel;
      r.name = k->name != nullptr ? k->name : "kernel";
      set_device_span(r, k);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
      set_copy(r, m, direction_of_kind(m->copyKind));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
      set_copy(r, reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(a), copy_direction::p2p);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
      r.kind = record_kind::memset;
      r.name = "memset";
      r.dst = location_of(static_cast<std::uint8_t>(m->memoryKind));
      r.bytes = m->bytes;
      set_device_span(r, m);
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto* y = reinterpret_cast<const CUpti_ActivitySynchronization2*>(a);
      r.kind = record_kind::sync;
      r.sync = sync_of(y->type);
      if (r.sync == sync_kind::event) {
        auto q = s.query_partner.find(y->correlationId);
        if (q != s.query_partner.end()) {
          r.sync = sync_kind::event_query;
          const std::uint32_t partner = q->second;
          s.query_partner.erase(q);
          if (partner != 0) s.query_partner.erase(partner);
        }
      }
      r.name = std::string("sync ") + to_string(r.sync);
      r.start_ns = static_cast<std::int64_t>(y->start);
      r.end_ns = static_cast<std::int64_t>(y->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(a);
      const std::uint64_t thread = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ||
                                           m->objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS
                                       ? m->objectId.pt.threadId
                                       : 0;
      const auto ts = static_cast<std::int64_t>(m->timestamp);
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
        s.open_ranges[m->id] = {m->name != nullptr ? m->name : "", ts, thread};
        return;
      }
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        auto it = s.open_ranges.find(m->id);
        if (it == s.open_ranges.end()) return;
        r.kind = record_kind::range;
        r.name = std::move(it->second.name);
        r.start_ns = it->second.start;
        r.end_ns = std::max(ts, it->second.start);
        r.thread = it->second.thread;
        s.open_ranges.erase(it);
        break;
      }
      if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) {
        r.kind = record_kind::range;
        r.name = m->name != nullptr ? m->name : "";
        r.start_ns = r.end_ns = ts;
        r.thread = thread;
        break;
      }
      return;
    }
    default:
      return;
  }
  s.records.push_back(std::move(r));
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  const std::size_t bytes = state().buffer_bytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, bytes));
  *size = *buffer != nullptr ? bytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t,
                               size_t valid) {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    CUpti_Activity* rec = nullptr;
    while (api().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) convert(rec, s);
    if (api().dropped_records != nullptr) {
      size_t dropped = 0;
      if (api().dropped_records(ctx, stream_id, &dropped) == CUPTI_SUCCESS) s.dropped += dropped;
    }
  }
  std::free(buffer);
}

// Runtime pinned-allocation calls reach the driver's own; count each allocation once.
thread_local int runtime_depth = 0;

struct api_info {
  api_kind kind;
  const char* name;
};

/// The callbacks this recorder enables, and what each one means.
const std::map<std::pair<int, unsigned>, api_info>& watched() {
  static const std::map<std::pair<int, unsigned>, api_info> m = {
      {{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020},
       {api_kind::pinned_alloc, "cudaHostAlloc"}},
      {{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020},
       {api_kind::pinned_alloc, "cudaMallocHost"}},
      {{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020},
       {api_kind::pinned_free, "cudaFreeHost"}},
      {{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000},
       {api_kind::pinned_register, "cudaHostRegister"}},
      {{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaHostUnregister_v4000},
       {api_kind::pinned_free, "cudaHostUnregister"}},
      {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc},
       {api_kind::pinned_alloc, "cuMemHostAlloc"}},
      {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2},
       {api_kind::pinned_alloc, "cuMemAllocHost"}},
      {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost},
       {api_kind::pinned_free, "cuMemFreeHost"}},
      {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2},
       {api_kind::pinned_register, "cuMemHostRegister"}},
      {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister},
       {api_kind::pinned_free, "cuMemHostUnregister"}},
      {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemMap},
       {api_kind::mem_map, "cuMemMap"}},
      {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap},
       {api_kind::mem_unmap, "cuMemUnmap"}},
  };
  return m;
}

// Parameter layouts of the watched calls (from CUDA's generated *_meta.h headers); only the size
// argument is read.
struct ptr_size_params {
  void* p;
  std::size_t size;
};

std::uint64_t bytes_of(int domain, unsigned cbid, const void* params) {
  if (params == nullptr) return 0;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020:
      case CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020:
      case CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000:
        return static_cast<const ptr_size_params*>(params)->size;
      default:
        return 0;
    }
  }
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap:
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap:  // (ptr, size, offset, ...)
      return static_cast<const ptr_size_params*>(params)->size;
    default:
      return 0;
  }
}

bool is_event_query(int domain, unsigned cbid) {
  return (domain == CUPTI_CB_DOMAIN_RUNTIME_API &&
          cbid == CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020) ||
         (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuEventQuery);
}

// The correlation id of the runtime event poll this thread is inside, 0 when none.
thread_local std::uint32_t runtime_query = 0;

/// Remembers an event poll's correlation id, paired with the runtime poll it serves, if any.
void note_event_query(recording_state& s, std::uint32_t id, std::uint32_t partner) {
  // Records come with the activity buffer (8 MiB by default, about 100k records), so a poll
  // older than this many later ones has lost its record.
  constexpr std::size_t max_pending = std::size_t{1} << 20;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.query_partner.emplace(id, partner).second) return;
  if (partner != 0) s.query_partner[partner] = id;
  s.query_order.push_back(id);
  while (s.query_order.size() > max_pending) {
    const auto q = s.query_partner.find(s.query_order.front());
    if (q != s.query_partner.end()) {
      if (q->second != 0) s.query_partner.erase(q->second);
      s.query_partner.erase(q);
    }
    s.query_order.pop_front();
  }
  // Polls whose record already came were erased from the table: drop them from the front too.
  while (!s.query_order.empty() && s.query_partner.count(s.query_order.front()) == 0) {
    s.query_order.pop_front();
  }
}

void CUPTIAPI api_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                           const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  auto& s = state();
  if (!s.active.load(std::memory_order_relaxed) || cb == nullptr) return;
  if (is_event_query(static_cast<int>(domain), static_cast<unsigned>(cbid))) {
    const bool in_runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
    if (cb->callbackSite == CUPTI_API_ENTER) {
      note_event_query(s, cb->correlationId, in_runtime ? 0 : runtime_query);
      if (in_runtime) runtime_query = cb->correlationId;
    } else if (in_runtime) {
      runtime_query = 0;
    }
    return;
  }
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (runtime) ++runtime_depth;
    std::uint64_t ts = 0;
    api().get_timestamp(&ts);
    if (cb->correlationData != nullptr) *cb->correlationData = ts;
    return;
  }
  if (runtime) --runtime_depth;
  if (!runtime && runtime_depth > 0) return;  // the driver half of a runtime call
  auto it = watched().find({static_cast<int>(domain), static_cast<unsigned>(cbid)});
  if (it == watched().end()) return;
  std::uint64_t end = 0;
  api().get_timestamp(&end);
  record r;
  r.kind = record_kind::api;
  r.api = it->second.kind;
  r.name = it->second.name;
  r.start_ns =
      static_cast<std::int64_t>(cb->correlationData != nullptr ? *cb->correlationData : end);
  r.end_ns = std::max(r.start_ns, static_cast<std::int64_t>(end));
  r.bytes = bytes_of(static_cast<int>(domain), static_cast<unsigned>(cbid), cb->functionParams);
  r.thread = this_thread_id();
  std::lock_guard<std::mutex> lock(s.mu);
  s.records.push_back(std::move(r));
}

constexpr CUpti_ActivityKind kernel_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
constexpr CUpti_ActivityKind copy_kinds[] = {CUPTI_ACTIVITY_KIND_MEMCPY,
                                             CUPTI_ACTIVITY_KIND_MEMCPY2};

}  // namespace

struct cupti_recorder::impl {
  std::vector<CUpti_ActivityKind> enabled;
  bool owns = false;
};

cupti_recorder::cupti_recorder() : impl_(std::make_unique<impl>()) {}

cupti_recorder::~cupti_recorder() {
  if (impl_->owns) stop();
}

std::string cupti_recorder::unavailable_reason() { return api().reason; }
std::string cupti_recorder::library_path() { return api().path; }

std::int64_t cupti_recorder::timestamp_ns() noexcept {
  std::uint64_t t = 0;
  if (api().get_timestamp != nullptr && api().get_timestamp(&t) == CUPTI_SUCCESS) {
    return static_cast<std::int64_t>(t);
  }
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool cupti_recorder::active() const noexcept { return impl_->owns; }

void cupti_recorder::start(const options& o) {
  const auto& a = api();
  OFFLOADKIT_EXPECTS(a.reason.empty(), runtime_error, "skipped: ", a.reason);
  auto& s = state();
  bool expected = false;
  OFFLOADKIT_EXPECTS(s.active.compare_exchange_strong(expected, true), state_error,
                     "another cupti_recorder is already recording in this process");
  impl_->owns = true;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.query_partner.clear();
    s.query_order.clear();
  }
  try {
    s.buffer_bytes = o.buffer_bytes < 4096 ? 4096 : o.buffer_bytes;
    // NVTX routes its calls to CUPTI only through this variable, read at NVTX's first call.
    if (o.nvtx) setenv("NVTX_INJECTION64_PATH", a.path.c_str(), 0);
    if (a.set_thread_id_type != nullptr) a.set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    if (!s.callbacks_registered) {
      OFFLOADKIT_CUPTI_TRY(a.register_callbacks(buffer_requested, buffer_completed));
      s.callbacks_registered = true;
    }
    std::vector<CUpti_ActivityKind> kinds;
    if (o.kernels) kinds.insert(kinds.end(), std::begin(kernel_kinds), std::end(kernel_kinds));
    if (o.memcpys) kinds.insert(kinds.end(), std::begin(copy_kinds), std::end(copy_kinds));
    if (o.memsets) kinds.push_back(CUPTI_ACTIVITY_KIND_MEMSET);
    if (o.syncs) kinds.push_back(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    if (o.nvtx) kinds.push_back(CUPTI_ACTIVITY_KIND_MARKER);
    for (auto k : kinds) {
      OFFLOADKIT_CUPTI_TRY(a.activity_enable(k));
      impl_->enabled.push_back(k);
    }
    if (o.api_callbacks) {
      OFFLOADKIT_CUPTI_TRY(a.subscribe(&s.subscriber, api_callback, nullptr));
      for (const auto& [key, info] : watched()) {
        OFFLOADKIT_CUPTI_TRY(a.enable_callback(1, s.subscriber,
                                               static_cast<CUpti_CallbackDomain>(key.first),
                                               static_cast<CUpti_CallbackId>(key.second)));
      }
      OFFLOADKIT_CUPTI_TRY(a.enable_callback(1, s.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                                             CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020));
      OFFLOADKIT_CUPTI_TRY(a.enable_callback(1, s.subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                                             CUPTI_DRIVER_TRACE_CBID_cuEventQuery));
    }
  } catch (...) {
    stop();
    throw;
  }
}

void cupti_recorder::flush() {
  if (api().flush_all != nullptr)
    OFFLOADKIT_CUPTI_TRY(api().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
}

void cupti_recorder::stop() noexcept {
  if (!impl_->owns) return;
  const auto& a = api();
  auto& s = state();
  for (auto k : impl_->enabled) a.activity_disable(k);
  impl_->enabled.clear();
  a.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (s.subscriber != nullptr) {
    a.unsubscribe(s.subscriber);
    s.subscriber = nullptr;
  }
  s.active.store(false);
  impl_->owns = false;
}

timeline cupti_recorder::take() {
  auto& s = state();
  timeline t;
  t.source = "cupti";
  std::lock_guard<std::mutex> lock(s.mu);
  t.records = std::move(s.records);
  s.records.clear();
  t.dropped = s.dropped;
  s.dropped = 0;
  t.sort();
  return t;
}

}  // namespace offloadkit::traces
