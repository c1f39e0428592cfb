// The cuda back end: runtime API for memory, streams, events, kernels and graphs; the driver's
// virtual-memory calls through cudaGetDriverEntryPointByVersion, so that nothing links libcuda and
// every binary starts where no driver is installed. Every call that touches a device makes that
// device current for its duration and restores the caller's current device.
#include "offloadkit/cuda_executor.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "offloadkit/detail/cuda_try.hpp"
#include "offloadkit/detail/device_guard.hpp"
#include "offloadkit/detail/driver_vmm.hpp"
#include "offloadkit/error.hpp"

namespace offloadkit {
namespace detail {

namespace {

// The driver's entry points, resolved once per process. The version asked for is the oldest that
// has every function in its current ABI, so any driver that runs this runtime provides them.
constexpr unsigned driver_api_version = 12000;

struct driver_api : driver_vmm_calls {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 get_granularity = nullptr;
  PFN_cuMemGetAddressRange_v3020 address_range = nullptr;
  std::string missing;  ///< why an entry point could not be resolved; empty when all were
};

template <class Fn>
void resolve(const char* symbol, Fn& fn, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &p, driver_api_version, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    if (missing.empty()) {
      missing = concat("driver entry point ", symbol, " (CUDA ", driver_api_version / 1000, ".",
                       driver_api_version % 1000 / 10, " ABI) is unavailable: ",
                       status != cudaSuccess ? runtime_error_text(status)
                       : found == cudaDriverEntryPointVersionNotSufficent
                           ? std::string("the driver is too old")
                           : std::string("symbol not found"));
    }
    return;
  }
  fn = reinterpret_cast<Fn>(p);
}

const driver_api& driver() {
  static const driver_api api = [] {
    driver_api a;
    resolve("cuGetErrorName", a.get_error_name, a.missing);
    resolve("cuGetErrorString", a.get_error_string, a.missing);
    resolve("cuMemGetAllocationGranularity", a.get_granularity, a.missing);
    resolve("cuMemAddressReserve", a.reserve, a.missing);
    resolve("cuMemAddressFree", a.address_free, a.missing);
    resolve("cuMemCreate", a.create, a.missing);
    resolve("cuMemRelease", a.release, a.missing);
    resolve("cuMemMap", a.map, a.missing);
    resolve("cuMemUnmap", a.unmap, a.missing);
    resolve("cuMemSetAccess", a.set_access, a.missing);
    resolve("cuMemGetAddressRange", a.address_range, a.missing);
    return a;
  }();
  return api;
}

// The VMM entry points, or a cuda_error that says which one is missing.
const driver_api& vmm_driver() {
  const driver_api& d = driver();
  if (!d.missing.empty()) throw cuda_error(d.missing, static_cast<int>(cudaErrorNotSupported));
  return d;
}

}  // namespace

std::string driver_error_text(CUresult status) {
  const driver_api& d = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.get_error_name != nullptr) (void)d.get_error_name(status, &name);
  if (d.get_error_string != nullptr) (void)d.get_error_string(status, &text);
  if (name == nullptr) return concat("CUresult ", static_cast<int>(status));
  return concat(name, ": ", text != nullptr ? text : "no description");
}

void report_noexcept_failure(const char* call, const std::string& error, const char* file,
                             int line) noexcept {
#ifndef NDEBUG
  std::fprintf(stderr, "offloadkit: %s failed in a noexcept path: %s (%s:%d)\n", call,
               error.c_str(), file, line);
#else
  (void)call;
  (void)error;
  (void)file;
  (void)line;
#endif
}

}  // namespace detail

namespace {

using detail::concat;
using detail::device_guard;

struct availability {
  cudaError_t status = cudaSuccess;
  std::string reason;  ///< empty when usable
  int devices = 0;
};

availability probe() {
  availability a;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    a.status = status;
    int driver_version = 0;
    // A zero driver version means libcuda itself was not found: say so rather than "insufficient".
    if (cudaDriverGetVersion(&driver_version) == cudaSuccess && driver_version == 0) {
      a.reason = concat("no CUDA driver is installed (cudaGetDeviceCount: ",
                        detail::runtime_error_text(status), ")");
    } else {
      int runtime_version = 0;
      (void)cudaRuntimeGetVersion(&runtime_version);
      a.reason = concat("cudaGetDeviceCount failed: ", detail::runtime_error_text(status),
                        " (driver supports CUDA ", driver_version / 1000, ".",
                        driver_version % 1000 / 10, ", runtime is CUDA ", runtime_version / 1000,
                        ".", runtime_version % 1000 / 10, ")");
    }
    (void)cudaGetLastError();
    return a;
  }
  if (count < 1) {
    a.status = cudaErrorNoDevice;
    a.reason = "no CUDA device found (cudaGetDeviceCount reports 0 devices)";
    return a;
  }
  a.devices = count;
  return a;
}

constexpr std::size_t pageable_alignment = 64;

// A host function handed to cudaLaunchHostFunc. Outside capture it runs once and deletes itself;
// captured, it runs on every replay and belongs to the graph record.
struct host_payload {
  std::function<void()> fn;
  bool captured = false;
};

void CUDART_CB run_host_payload(void* data) {
  auto* payload = static_cast<host_payload*>(data);
  // The driver's callback thread cannot take an exception: report it and carry on.
  try {
    payload->fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offloadkit: a host function threw on the CUDA callback thread: %s\n",
                 e.what());
  } catch (...) {
    std::fprintf(stderr, "offloadkit: a host function threw on the CUDA callback thread\n");
  }
  if (!payload->captured) delete payload;
}

cudaStream_t native(stream_ref s) noexcept { return static_cast<cudaStream_t>(s.native); }
cudaEvent_t native(event_ref e) noexcept { return static_cast<cudaEvent_t>(e.native); }

// What graph_ref::native points to: the instantiated graph, its source graph, the host functions
// its nodes call, and an event recorded after each replay so that those host functions are freed
// only once no replay can still call them.
struct graph_record {
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  int device = 0;
  cudaEvent_t last_replay = nullptr;
  std::vector<std::unique_ptr<host_payload>> host_functions;

  // True when no replay is pending (or the state cannot be known, e.g. after a device fault).
  bool idle() const noexcept {
    if (last_replay == nullptr) return true;
    const cudaError_t status = cudaEventQuery(last_replay);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    if (status != cudaSuccess) (void)cudaGetLastError();
    return true;
  }

  void wait_idle() const noexcept {
    if (last_replay != nullptr) OFFLOADKIT_CUDA_ASSERT_OK(cudaEventSynchronize(last_replay));
  }

  // Frees the CUDA objects; the host functions go with the record.
  void release() noexcept {
    device_guard guard(device, std::nothrow);
    if (exec != nullptr) OFFLOADKIT_CUDA_ASSERT_OK(cudaGraphExecDestroy(exec));
    if (graph != nullptr) OFFLOADKIT_CUDA_ASSERT_OK(cudaGraphDestroy(graph));
    if (last_replay != nullptr) OFFLOADKIT_CUDA_ASSERT_OK(cudaEventDestroy(last_replay));
    exec = nullptr;
    graph = nullptr;
    last_replay = nullptr;
  }
};

}  // namespace

std::string cuda_unavailable_reason() {
  try {
    return probe().reason;
  } catch (const std::exception& e) {
    return concat("probing for CUDA devices failed: ", e.what());
  } catch (...) {
    return "probing for CUDA devices failed";
  }
}

struct cuda_executor::impl {
  cuda_executor_options options;
  int devices = 0;

  std::mutex mutex;
  std::vector<std::size_t> granularity;  ///< per device; 0 until queried
  /// Host functions issued to a capturing stream, by capture id, until end_capture.
  std::unordered_map<unsigned long long, std::vector<std::unique_ptr<host_payload>>> capturing;
  /// The capture id begun on each origin stream, so that end_capture finds the capture's host
  /// functions even when the driver no longer reports the id (an invalidated capture).
  std::unordered_map<void*, unsigned long long> capture_of_stream;
  /// Destroyed graphs whose last replay had not finished; freed once it has.
  std::vector<std::unique_ptr<graph_record>> retired;

  void check_device(int device, const char* what) const {
    OFFLOADKIT_EXPECTS(device >= 0 && device < devices, out_of_range, what, ": device = ", device,
                       " is outside [0, ", devices, ")");
  }

  void check_stream(stream_ref s, const char* what) const {
    OFFLOADKIT_EXPECTS(s.native != nullptr, logic_error, what,
                       ": null stream (use a stream from create_stream)");
    check_device(s.device, what);
  }

  // Caller holds `mutex`.
  void reap_retired() noexcept {
    auto idle = std::stable_partition(retired.begin(), retired.end(),
                                      [](const auto& r) { return !r->idle(); });
    for (auto it = idle; it != retired.end(); ++it) (*it)->release();
    retired.erase(idle, retired.end());
  }

  // Queues `payload` on `s`, or records it with the stream's capture so that the graph owns it.
  void enqueue_host(std::unique_ptr<host_payload> payload, stream_ref s) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    unsigned long long capture_id = 0;
    OFFLOADKIT_CUDA_TRY(cudaStreamGetCaptureInfo(native(s), &capture, &capture_id));
    OFFLOADKIT_EXPECTS(capture != cudaStreamCaptureStatusInvalidated, state_error,
                       "host_function: the stream's capture was invalidated by an earlier "
                       "failure; end_capture it and capture again");
    payload->captured = capture == cudaStreamCaptureStatusActive;
    if (!payload->captured) {
      OFFLOADKIT_CUDA_TRY(cudaLaunchHostFunc(native(s), &run_host_payload, payload.get()));
      (void)payload.release();  // run_host_payload deletes it after it runs
      return;
    }
    // Room first, so that once the node exists, keeping its payload cannot fail.
    std::lock_guard<std::mutex> lock(mutex);
    auto& kept = capturing[capture_id];
    kept.reserve(kept.size() + 1);
    OFFLOADKIT_CUDA_TRY(cudaLaunchHostFunc(native(s), &run_host_payload, payload.get()));
    kept.push_back(std::move(payload));
  }
};

cuda_executor::cuda_executor(cuda_executor_options options) : impl_(std::make_unique<impl>()) {
  const availability a = probe();
  if (!a.reason.empty()) {
    throw cuda_error(concat("cuda_executor: the cuda back end is not usable here: ", a.reason),
                     static_cast<int>(a.status));
  }
  OFFLOADKIT_EXPECTS(
      options.devices == -1 || (options.devices >= 1 && options.devices <= a.devices), out_of_range,
      "cuda_executor_options::devices = ", options.devices, " is outside [1, ", a.devices,
      "] (or -1 for all devices)");
  impl_->options = options;
  impl_->devices = options.devices == -1 ? a.devices : options.devices;
  impl_->granularity.assign(static_cast<std::size_t>(impl_->devices), 0);
}

cuda_executor::~cuda_executor() {
  // Retired graphs may still be running: wait for their last replay (their own event, not the
  // device) before their host functions go. Captures never ended never ran anything.
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (auto& r : impl_->retired) {
    r->wait_idle();
    r->release();
  }
}

const cuda_executor_options& cuda_executor::options() const noexcept { return impl_->options; }

backend cuda_executor::do_kind() const noexcept { return backend::cuda; }

std::string cuda_executor::do_name() const { return "cuda"; }

int cuda_executor::do_device_count() const { return impl_->devices; }

// ---- memory -------------------------------------------------------------------------------------

void* cuda_executor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  // Zero bytes still gets a unique, non-null pointer: allocate one byte.
  const std::size_t n = std::max<std::size_t>(bytes, 1);
  void* p = nullptr;
  switch (kind) {
    case memory_kind::device: {
      impl_->check_device(device, "allocate(device)");
      device_guard guard(device);
      OFFLOADKIT_CUDA_TRY_CTX(cudaMalloc(&p, n), "allocating ", bytes, " bytes on device ", device);
      return p;
    }
    case memory_kind::pinned: {
      // Mapped so that device-side operations (memset, kernels) reach it at the same address.
      OFFLOADKIT_CUDA_TRY_CTX(cudaHostAlloc(&p, n, cudaHostAllocPortable | cudaHostAllocMapped),
                              "allocating ", bytes, " bytes of pinned host memory");
      return p;
    }
    case memory_kind::pageable: {
      const std::size_t rounded =
          (n + pageable_alignment - 1) / pageable_alignment * pageable_alignment;
      OFFLOADKIT_EXPECTS(rounded >= n, out_of_memory, "allocate(pageable): bytes = ", bytes,
                         " exceeds the address space");
      p = std::aligned_alloc(pageable_alignment, rounded);
      OFFLOADKIT_EXPECTS(p != nullptr, out_of_memory, "allocate(pageable): ", bytes,
                         " bytes of pageable host memory are not available");
      return p;
    }
  }
  OFFLOADKIT_FAIL(out_of_range, "allocate: memory_kind = ", static_cast<int>(kind),
                  " is not device, pinned or pageable");
}

void cuda_executor::do_deallocate(memory_kind kind, void* p, std::size_t /*bytes*/) noexcept {
  if (p == nullptr) return;
  switch (kind) {
    case memory_kind::device:
      OFFLOADKIT_CUDA_ASSERT_OK(cudaFree(p));
      return;
    case memory_kind::pinned:
      OFFLOADKIT_CUDA_ASSERT_OK(cudaFreeHost(p));
      return;
    case memory_kind::pageable:
      std::free(p);
      return;
  }
}

pointer_info cuda_executor::do_classify(const void* p) const {
  pointer_info info;
  if (p == nullptr) return info;
  cudaPointerAttributes attr{};
  const cudaError_t status = cudaPointerGetAttributes(&attr, p);
  if (status == cudaErrorInvalidValue) {
    // An address CUDA does not know (e.g. reserved but unmapped): ordinary host memory to it.
    (void)cudaGetLastError();
    return info;
  }
  OFFLOADKIT_CUDA_TRY_CTX(status, "classifying pointer ", p);
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      info.kind = pointer_kind::device;
      info.device = attr.device;
      break;
    case cudaMemoryTypeManaged:
      info.kind = pointer_kind::managed;
      info.device = attr.device;
      break;
    case cudaMemoryTypeHost:
      info.kind = pointer_kind::pinned;
      break;
    case cudaMemoryTypeUnregistered:
    default:
      info.kind = pointer_kind::pageable;
      break;
  }
  return info;
}

allocation_extent cuda_executor::do_extent_of(const void* p) const {
  const pointer_info info = do_classify(p);
  const detail::driver_api& d = detail::driver();
  if (info.kind == pointer_kind::pageable || d.address_range == nullptr) return {};
  // The driver answers for the current context: make the owner's (for host memory, the current
  // device's) primary context current first.
  int device = info.device;
  if (device < 0) OFFLOADKIT_CUDA_TRY(cudaGetDevice(&device));
  device_guard guard(device);
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  if (d.address_range(&base, &bytes, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return {};
  return allocation_extent{reinterpret_cast<const void*>(base), bytes};
}

memory_info cuda_executor::do_device_memory(int device) {
  impl_->check_device(device, "device_memory");
  device_guard guard(device);
  memory_info m;
  OFFLOADKIT_CUDA_TRY_CTX(cudaMemGetInfo(&m.free, &m.total), "device ", device);
  return m;
}

// ---- managed memory -----------------------------------------------------------------------------

void* cuda_executor::do_allocate_managed(std::size_t bytes, int device) {
  impl_->check_device(device, "allocate_managed");
  device_guard guard(device);
  void* p = nullptr;
  // Zero bytes still gets a unique, non-null pointer: allocate one byte.
  OFFLOADKIT_CUDA_TRY_CTX(
      cudaMallocManaged(&p, std::max<std::size_t>(bytes, 1), cudaMemAttachGlobal), "allocating ",
      bytes, " bytes of managed memory for device ", device);
  return p;
}

void cuda_executor::do_deallocate_managed(void* p, std::size_t /*bytes*/) noexcept {
  if (p == nullptr) return;
  OFFLOADKIT_CUDA_ASSERT_OK(cudaFree(p));
}

void cuda_executor::do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) {
  impl_->check_stream(s, "prefetch");
  OFFLOADKIT_EXPECTS(device == host_location || (device >= 0 && device < impl_->devices),
                     out_of_range, "prefetch: device = ", device, " is outside [0, ",
                     impl_->devices, ") and is not host_location (", host_location, ")");
  if (bytes == 0) return;
  OFFLOADKIT_EXPECTS(p != nullptr, logic_error, "prefetch: null pointer for ", bytes, " bytes");
  cudaMemLocation where{};
  where.type = device == host_location ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  where.id = device == host_location ? 0 : device;
  const std::string to = device == host_location ? "the host" : concat("device ", device);
  device_guard guard(s.device);
  OFFLOADKIT_CUDA_TRY_CTX(cudaMemPrefetchAsync(p, bytes, where, 0, native(s)), "prefetching ",
                          bytes, " bytes at ", p, " to ", to);
}

// ---- streams and events -------------------------------------------------------------------------

stream_ref cuda_executor::do_create_stream(int device) {
  impl_->check_device(device, "create_stream");
  device_guard guard(device);
  cudaStream_t s = nullptr;
  OFFLOADKIT_CUDA_TRY_CTX(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "device ", device);
  return stream_ref{s, device};
}

void cuda_executor::do_destroy_stream(stream_ref s) noexcept {
  if (s.native == nullptr) return;
  device_guard guard(s.device, std::nothrow);
  OFFLOADKIT_CUDA_ASSERT_OK(cudaStreamDestroy(native(s)));
}

event_ref cuda_executor::do_create_event(int device) {
  impl_->check_device(device, "create_event");
  device_guard guard(device);
  cudaEvent_t e = nullptr;
  OFFLOADKIT_CUDA_TRY_CTX(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "device ", device);
  return event_ref{e, device};
}

void cuda_executor::do_destroy_event(event_ref e) noexcept {
  if (e.native == nullptr) return;
  device_guard guard(e.device, std::nothrow);
  OFFLOADKIT_CUDA_ASSERT_OK(cudaEventDestroy(native(e)));
}

void cuda_executor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  impl_->check_stream(s, "copy");
  if (bytes == 0) return;
  OFFLOADKIT_EXPECTS(dst != nullptr && src != nullptr, logic_error,
                     "copy: null pointer (dst = ", dst, ", src = ", src, ") for ", bytes, " bytes");
  device_guard guard(s.device);
  OFFLOADKIT_CUDA_TRY_CTX(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(s)),
                          "copying ", bytes, " bytes from ", src, " to ", dst);
}

void cuda_executor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  impl_->check_stream(s, "fill");
  if (bytes == 0) return;
  OFFLOADKIT_EXPECTS(dst != nullptr, logic_error, "fill: null pointer for ", bytes, " bytes");
  device_guard guard(s.device);
  if (do_classify(dst).kind == pointer_kind::pageable) {
    // The device cannot reach pageable memory: set it on a host thread, still in stream order.
    auto payload = std::make_unique<host_payload>();
    payload->fn = [dst, value, bytes] { std::memset(dst, value, bytes); };
    impl_->enqueue_host(std::move(payload), s);
    return;
  }
  OFFLOADKIT_CUDA_TRY_CTX(cudaMemsetAsync(dst, value, bytes, native(s)), "setting ", bytes,
                          " bytes at ", dst, " to ", value);
}

void cuda_executor::do_launch(const launch_request& r, stream_ref s) {
  OFFLOADKIT_EXPECTS(r.device_launch != nullptr, logic_error, "launch '", r.name,
                     "': launch body was not compiled by nvcc (issue it from a .cu file)");
  OFFLOADKIT_EXPECTS(r.body != nullptr, logic_error, "launch '", r.name, "': no body");
  OFFLOADKIT_EXPECTS(r.block >= 1 && r.block <= 1024, out_of_range, "launch '", r.name,
                     "': block = ", r.block, " is outside [1, 1024]");
  impl_->check_stream(s, "launch");
  device_guard guard(s.device);
  (void)cudaGetLastError();  // a stale error from elsewhere must not be blamed on this launch
  // The functor is copied into the kernel's parameters (and into a captured node), so r.body
  // need not outlive this call.
  r.device_launch(r.body.get(), r.n, r.block, s.native);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    detail::throw_runtime_status(status, "launch", __FILE__, __LINE__,
                                 concat("kernel '", r.name, "' over n = ", r.n,
                                        ", block = ", r.block, " on device ", s.device));
  }
}

void cuda_executor::do_host_function(std::function<void()> fn, stream_ref s) {
  OFFLOADKIT_EXPECTS(static_cast<bool>(fn), logic_error, "host_function: empty function");
  impl_->check_stream(s, "host_function");
  device_guard guard(s.device);
  auto payload = std::make_unique<host_payload>();
  payload->fn = std::move(fn);
  impl_->enqueue_host(std::move(payload), s);
}

void cuda_executor::do_record(event_ref e, stream_ref s) {
  OFFLOADKIT_EXPECTS(e.native != nullptr, logic_error, "record: null event");
  impl_->check_stream(s, "record");
  OFFLOADKIT_EXPECTS(e.device == s.device, logic_error, "record: the event belongs to device ",
                     e.device, " but the stream to device ", s.device);
  device_guard guard(s.device);
  OFFLOADKIT_CUDA_TRY(cudaEventRecord(native(e), native(s)));
}

void cuda_executor::do_wait(event_ref e, stream_ref s) {
  OFFLOADKIT_EXPECTS(e.native != nullptr, logic_error, "wait: null event");
  impl_->check_stream(s, "wait");
  device_guard guard(s.device);
  OFFLOADKIT_CUDA_TRY(cudaStreamWaitEvent(native(s), native(e), 0));
}

void cuda_executor::do_synchronize_stream(stream_ref s) {
  impl_->check_stream(s, "synchronize");
  device_guard guard(s.device);
  OFFLOADKIT_CUDA_TRY(cudaStreamSynchronize(native(s)));
}

void cuda_executor::do_synchronize_event(event_ref e) {
  OFFLOADKIT_EXPECTS(e.native != nullptr, logic_error, "synchronize: null event");
  device_guard guard(e.device);
  OFFLOADKIT_CUDA_TRY(cudaEventSynchronize(native(e)));
}

bool cuda_executor::do_ready(event_ref e) {
  OFFLOADKIT_EXPECTS(e.native != nullptr, logic_error, "ready: null event");
  device_guard guard(e.device);
  const cudaError_t status = cudaEventQuery(native(e));
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to leave behind
    return false;
  }
  OFFLOADKIT_CUDA_TRY(status);
  return true;
}

// ---- virtual memory -----------------------------------------------------------------------------

namespace {

CUmemAllocationProp device_allocation_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUdeviceptr as_deviceptr(const void* p) noexcept {
  return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
}

}  // namespace

std::size_t cuda_executor::do_granularity(int device) {
  impl_->check_device(device, "granularity");
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    const std::size_t cached = impl_->granularity[static_cast<std::size_t>(device)];
    if (cached != 0) return cached;
  }
  const detail::driver_api& d = detail::vmm_driver();
  device_guard guard(device);
  const CUmemAllocationProp prop = device_allocation_prop(device);
  std::size_t g = 0;
  OFFLOADKIT_CU_TRY_CTX(d.get_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "device ",
                        device);
  if (g == 0) {
    throw cuda_error(concat("granularity: the driver reported 0 for device ", device),
                     static_cast<int>(CUDA_ERROR_INVALID_VALUE));
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->granularity[static_cast<std::size_t>(device)] = g;
  return g;
}

void* cuda_executor::do_reserve(std::size_t bytes, int device) {
  const std::size_t g = do_granularity(device);
  OFFLOADKIT_EXPECTS(bytes > 0 && bytes % g == 0, out_of_range, "reserve: bytes = ", bytes,
                     " is not a positive multiple of the granularity ", g, " of device ", device);
  const detail::driver_api& d = detail::vmm_driver();
  device_guard guard(device);
  CUdeviceptr va = 0;
  OFFLOADKIT_CU_TRY_CTX(d.reserve(&va, bytes, g, 0, 0), "reserving ", bytes,
                        " bytes of address space");
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(va));
}

void cuda_executor::do_unreserve(void* va, std::size_t bytes) noexcept {
  if (va == nullptr) return;
  const detail::driver_api& d = detail::driver();
  if (d.address_free == nullptr) return;
  OFFLOADKIT_CU_ASSERT_OK(d.address_free(as_deviceptr(va), bytes));
}

physical_handle cuda_executor::do_create_physical(std::size_t bytes, int device) {
  const std::size_t g = do_granularity(device);
  OFFLOADKIT_EXPECTS(bytes > 0 && bytes % g == 0, out_of_range, "create_physical: bytes = ", bytes,
                     " is not a positive multiple of the granularity ", g, " of device ", device);
  const detail::driver_api& d = detail::vmm_driver();
  device_guard guard(device);
  const CUmemAllocationProp prop = device_allocation_prop(device);
  CUmemGenericAllocationHandle handle = 0;
  OFFLOADKIT_CU_TRY_CTX(d.create(&handle, bytes, &prop, 0), "creating ", bytes,
                        " bytes of physical memory on device ", device);
  return physical_handle{static_cast<std::uint64_t>(handle), device, bytes};
}

void cuda_executor::do_release_physical(physical_handle h) noexcept {
  if (h.value == 0) return;
  const detail::driver_api& d = detail::driver();
  if (d.release == nullptr) return;
  OFFLOADKIT_CU_ASSERT_OK(d.release(static_cast<CUmemGenericAllocationHandle>(h.value)));
}

void cuda_executor::do_map(void* va, std::size_t bytes, physical_handle h) {
  OFFLOADKIT_EXPECTS(h.value != 0, logic_error, "map: empty physical handle");
  const std::size_t g = do_granularity(h.device);
  OFFLOADKIT_EXPECTS(va != nullptr && as_deviceptr(va) % g == 0, out_of_range, "map: va = ", va,
                     " is not aligned to the granularity ", g);
  OFFLOADKIT_EXPECTS(bytes > 0 && bytes % g == 0, out_of_range, "map: bytes = ", bytes,
                     " is not a positive multiple of the granularity ", g);
  OFFLOADKIT_EXPECTS(bytes <= h.bytes, out_of_range, "map: bytes = ", bytes,
                     " exceeds the physical allocation's ", h.bytes, " bytes");
  const detail::driver_api& d = detail::vmm_driver();
  device_guard guard(h.device);
  OFFLOADKIT_CU_TRY_CTX(
      d.map(as_deviceptr(va), bytes, 0, static_cast<CUmemGenericAllocationHandle>(h.value), 0),
      "mapping ", bytes, " bytes at ", va);
}

void cuda_executor::do_unmap(void* va, std::size_t bytes) {
  OFFLOADKIT_EXPECTS(va != nullptr && bytes > 0, out_of_range, "unmap: va = ", va,
                     ", bytes = ", bytes, ": need a mapped, non-empty range");
  const detail::driver_api& d = detail::vmm_driver();
  // The mapping's device, made current so that the call works on a thread with no context yet.
  std::optional<device_guard> guard;
  const pointer_info info = do_classify(va);
  if (info.device >= 0 && info.device < impl_->devices) guard.emplace(info.device);
  OFFLOADKIT_CU_TRY_CTX(d.unmap(as_deviceptr(va), bytes), "unmapping ", bytes, " bytes at ", va);
}

void cuda_executor::do_set_access(void* va, std::size_t bytes, int device) {
  impl_->check_device(device, "set_access");
  const std::size_t g = do_granularity(device);
  OFFLOADKIT_EXPECTS(va != nullptr && as_deviceptr(va) % g == 0, out_of_range,
                     "set_access: va = ", va, " is not aligned to the granularity ", g);
  OFFLOADKIT_EXPECTS(bytes > 0 && bytes % g == 0, out_of_range, "set_access: bytes = ", bytes,
                     " is not a positive multiple of the granularity ", g);
  const detail::driver_api& d = detail::vmm_driver();
  device_guard guard(device);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  OFFLOADKIT_CU_TRY_CTX(d.set_access(as_deviceptr(va), bytes, &access, 1), "granting device ",
                        device, " access to ", bytes, " bytes at ", va);
}

// ---- graphs
// ---------------------------------------------------------------------------------------

namespace {

/// Relaxes the calling thread's stream capture mode while it lives, so that a call which the
/// thread's open captures would refuse can run; restores the mode after
/// (cudaThreadExchangeStreamCaptureMode both ways).
class relaxed_capture_mode {
 public:
  relaxed_capture_mode() { OFFLOADKIT_CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&previous_)); }
  relaxed_capture_mode(const relaxed_capture_mode&) = delete;
  relaxed_capture_mode& operator=(const relaxed_capture_mode&) = delete;
  ~relaxed_capture_mode() {
    // Exchanging a thread's own mode back fails only where the runtime itself is gone; the
    // destructor cannot report it, and the mode then no longer matters to this thread.
    (void)cudaThreadExchangeStreamCaptureMode(&previous_);
  }

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace

void cuda_executor::do_begin_capture(stream_ref s) {
  impl_->check_stream(s, "begin_capture");
  device_guard guard(s.device);
  OFFLOADKIT_CUDA_TRY(cudaStreamBeginCapture(native(s), cudaStreamCaptureModeThreadLocal));
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  OFFLOADKIT_CUDA_TRY(cudaStreamGetCaptureInfo(native(s), &capture, &capture_id));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->capture_of_stream[s.native] = capture_id;
}

graph_ref cuda_executor::do_end_capture(stream_ref s) {
  impl_->check_stream(s, "end_capture");
  device_guard guard(s.device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  OFFLOADKIT_CUDA_TRY(cudaStreamGetCaptureInfo(native(s), &capture, &capture_id));
  OFFLOADKIT_EXPECTS(capture != cudaStreamCaptureStatusNone, state_error,
                     "end_capture: the stream is not capturing (call begin_capture first)");

  auto record = std::make_unique<graph_record>();
  record->device = s.device;
  {
    // The host functions go with the graph whatever happens next: freed with it on failure.
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (auto origin = impl_->capture_of_stream.find(s.native);
        origin != impl_->capture_of_stream.end()) {
      capture_id = origin->second;
      impl_->capture_of_stream.erase(origin);
    }
    auto it = impl_->capturing.find(capture_id);
    if (it != impl_->capturing.end()) {
      record->host_functions = std::move(it->second);
      impl_->capturing.erase(it);
    }
  }
  struct releaser {
    graph_record* r;
    ~releaser() {
      if (r != nullptr) r->release();
    }
  } on_failure{record.get()};

  OFFLOADKIT_CUDA_TRY_CTX(cudaStreamEndCapture(native(s), &record->graph),
                          capture == cudaStreamCaptureStatusInvalidated
                              ? "the capture had been invalidated by an earlier failed operation"
                              : "ending the capture begun on this stream");
  {
    // Another capture may still be open on this thread: one per device, begun together and ended
    // one after the other, as a thread that drives several GPUs captures a collective. Its
    // thread-local mode refuses "unsafe" calls such as instantiation while it lasts, yet
    // instantiating this graph enqueues nothing into that capture, so the thread's mode is
    // relaxed around it and restored after.
    relaxed_capture_mode relaxed;
    OFFLOADKIT_CUDA_TRY(cudaGraphInstantiate(&record->exec, record->graph, 0));
    OFFLOADKIT_CUDA_TRY(cudaEventCreateWithFlags(&record->last_replay, cudaEventDisableTiming));
  }
  on_failure.r = nullptr;
  return graph_ref{record.release()};
}

void cuda_executor::do_replay(graph_ref g, stream_ref s) {
  OFFLOADKIT_EXPECTS(g.native != nullptr, logic_error, "replay: null graph");
  impl_->check_stream(s, "replay");
  auto* record = static_cast<graph_record*>(g.native);
  OFFLOADKIT_EXPECTS(record->device == s.device, logic_error,
                     "replay: the graph was captured on "
                     "device ",
                     record->device, " but the stream belongs to device ", s.device);
  device_guard guard(s.device);
  OFFLOADKIT_CUDA_TRY(cudaGraphLaunch(record->exec, native(s)));
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  OFFLOADKIT_CUDA_TRY(cudaStreamIsCapturing(native(s), &capture));
  // Replaying into another capture nests the graph; its owner then keeps it alive.
  if (capture == cudaStreamCaptureStatusNone) {
    OFFLOADKIT_CUDA_TRY(cudaEventRecord(record->last_replay, native(s)));
  }
}

void cuda_executor::do_destroy_graph(graph_ref g) noexcept {
  if (g.native == nullptr) return;
  std::unique_ptr<graph_record> record(static_cast<graph_record*>(g.native));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->reap_retired();
  if (record->idle()) {
    record->release();
  } else {
    // A replay is still running and may call the host functions: free them once it is done. The
    // CUDA objects themselves would be freed safely now, but they go together for simplicity.
    impl_->retired.push_back(std::move(record));
  }
}

}  // namespace offloadkit
