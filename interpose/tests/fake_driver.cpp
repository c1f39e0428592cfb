// A stand-in for the CUDA driver library (built as libcuda.so.1 in a folder of its own) for the
// interposer's tests on machines without a GPU. It implements the functions the interposer wraps
// with host memory and the same contracts as the driver: a reservation is a PROT_NONE range, a
// physical allocation is a memfd, cuMemMap maps it over the reservation, cuMemSetAccess makes it
// readable and writable, cuMemUnmap puts the reservation back; device and pinned allocations are
// heap memory. Unknown handles and pointers are refused with CUDA_ERROR_INVALID_VALUE, as the
// driver refuses them, so that a double release shows. cuGetProcAddress(_v2) hands out the same
// functions by base name and version. okit_fake_driver_live() counts what is still held, for
// tests that compare it with the interposer's ledger.
//
// Streams, for black boxes that order work themselves: each stream is a worker thread running a
// FIFO of its work (asynchronous copies and fills, host functions, event records and waits); the
// legacy and per-thread default streams are one such stream. A copy or fill issued to a stream
// that is idle (nothing queued, nothing running) runs at once in the calling thread, which the
// asynchronous contract allows and which makes the order of a black box's work deterministic while
// nothing holds its stream back; behind queued work (a delay's host function, say) it waits its
// turn on the worker. Host functions always run on the worker. Kernels cannot run here.
#include <cuda.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#undef cuGetProcAddress

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct state {
  std::mutex mutex;
  std::map<CUdeviceptr, std::size_t> reservations;
  std::map<CUmemGenericAllocationHandle, std::pair<int, std::size_t>> handles;  // memfd, size
  std::map<CUdeviceptr, std::size_t> mappings;
  std::map<std::uintptr_t, std::size_t> device;
  std::map<std::uintptr_t, std::size_t> pinned;
  CUmemGenericAllocationHandle next_handle = 1;
  bool initialized = false;
};

state& driver() {
  static state s;
  return s;
}

bool page_aligned(std::uint64_t v) {
  return v % static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)) == 0;
}

// The reservation that holds [ptr, ptr + size), or none.
bool reserved(const state& s, CUdeviceptr ptr, std::size_t size) {
  for (const auto& [base, bytes] : s.reservations) {
    if (ptr >= base && ptr - base <= bytes && size <= bytes - (ptr - base)) return true;
  }
  return false;
}

}  // namespace

FAKE_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(driver().mutex);
  driver().initialized = true;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t /*alignment*/,
                                         CUdeviceptr /*addr*/, unsigned long long flags) {
  if (ptr == nullptr || size == 0 || !page_aligned(size) || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(driver().mutex);
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  driver().reservations[*ptr] = size;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> lock(driver().mutex);
  auto it = driver().reservations.find(ptr);
  if (it == driver().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [va, bytes] : driver().mappings) {
    if (va >= ptr && va - ptr < size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  }
  munmap(reinterpret_cast<void*>(ptr), size);
  driver().reservations.erase(it);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                 const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || size == 0 || !page_aligned(size) || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int fd = memfd_create("fake-cuda-physical", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(driver().mutex);
  *handle = driver().next_handle++;
  driver().handles[*handle] = {fd, size};
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> lock(driver().mutex);
  auto it = driver().handles.find(handle);
  if (it == driver().handles.end()) return CUDA_ERROR_INVALID_VALUE;
  // A mapping keeps the memory alive after the release, as on the driver: mmap holds the file.
  close(it->second.first);
  driver().handles.erase(it);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags) {
  std::lock_guard<std::mutex> lock(driver().mutex);
  state& s = driver();
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || flags != 0 || offset != 0 || size == 0 || size > it->second.second ||
      !reserved(s, ptr, size) || s.mappings.count(ptr) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                 it->second.first, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  s.mappings[ptr] = size;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> lock(driver().mutex);
  state& s = driver();
  auto it = s.mappings.find(ptr);
  if (it == s.mappings.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  // Back to a reserved, inaccessible range, as cuMemAddressReserve left it.
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_UNKNOWN;
  s.mappings.erase(it);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                    size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(driver().mutex);
  auto it = driver().mappings.find(ptr);
  if (it == driver().mappings.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  if (mprotect(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = std::malloc(bytes);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(driver().mutex);
  driver().device[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(driver().mutex);
  if (driver().device.erase(static_cast<std::uintptr_t>(dptr)) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(reinterpret_cast<void*>(dptr));
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int /*flags*/) {
  if (pp == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = std::malloc(bytes);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(driver().mutex);
  driver().pinned[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  *pp = p;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytes) {
  return cuMemHostAlloc(pp, bytes, 0);
}

FAKE_EXPORT CUresult cuMemFreeHost(void* p) {
  std::lock_guard<std::mutex> lock(driver().mutex);
  if (driver().pinned.erase(reinterpret_cast<std::uintptr_t>(p)) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(p);
  return CUDA_SUCCESS;
}

// ---- streams and events ------------------------------------------------------------------------

namespace {

class fake_stream {
 public:
  fake_stream() : worker_([this] { run(); }) {}
  fake_stream(const fake_stream&) = delete;
  fake_stream& operator=(const fake_stream&) = delete;
  ~fake_stream() {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
      stop_ = true;
    }
    ready_.notify_all();
    worker_.join();
  }

  /// Queues `op`; with `inline_if_idle`, runs it here and now when the stream is idle.
  void issue(std::function<void()> op, bool inline_if_idle) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (inline_if_idle && queue_.empty() && !busy_) {
      busy_ = true;
      lock.unlock();
      op();
      lock.lock();
      busy_ = false;
      lock.unlock();
      ready_.notify_all();
      idle_.notify_all();
      return;
    }
    queue_.push_back(std::move(op));
    lock.unlock();
    ready_.notify_all();
  }
  void synchronize() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }
  bool idle() {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.empty() && !busy_;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return stop_ || (!queue_.empty() && !busy_); });
      if (stop_) return;
      std::function<void()> op = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      op();
      lock.lock();
      busy_ = false;
      idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_, idle_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread worker_;  // last: started once the members it uses exist
};

/// Records count up; a record completes when the stream reaches it.
struct fake_event {
  std::mutex mutex;
  std::condition_variable done;
  std::uint64_t recorded = 0;
  std::uint64_t completed = 0;
  /// How many records were issued so far.
  std::uint64_t recorded_now() {
    const std::lock_guard<std::mutex> lock(mutex);
    return recorded;
  }
  /// Waits until the first `target` records have completed.
  void wait_for(std::uint64_t target) {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [&] { return completed >= target; });
  }
  /// Waits until the work recorded so far has completed.
  void wait_for_recorded() { wait_for(recorded_now()); }
};

// Never destroyed: a worker still running at exit must not meet a destroyed stream.
fake_stream& default_stream() {
  static fake_stream* s = new fake_stream();
  return *s;
}

fake_stream& stream_of(CUstream s) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return default_stream();
  return *reinterpret_cast<fake_stream*>(s);
}

CUresult copy_async(void* dst, const void* src, std::size_t bytes, CUstream s) {
  if ((dst == nullptr || src == nullptr) && bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_SUCCESS;
  stream_of(s).issue([dst, src, bytes] { std::memcpy(dst, src, bytes); }, true);
  return CUDA_SUCCESS;
}

void* as_pointer(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }

}  // namespace

FAKE_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int /*Flags*/) {
  if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *phStream = reinterpret_cast<CUstream>(new fake_stream());
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
  if (hStream == nullptr || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  delete reinterpret_cast<fake_stream*>(hStream);  // runs what is queued first, as the driver does
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
  stream_of(hStream).synchronize();
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamQuery(CUstream hStream) {
  return stream_of(hStream).idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream /*hStream*/,
                                         CUstreamCaptureStatus* captureStatus) {
  if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;  // nothing here captures
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  stream_of(hStream).issue([fn, userData] { fn(userData); }, false);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                   CUstream hStream) {
  return copy_async(as_pointer(dst), as_pointer(src), ByteCount, hStream);
}

FAKE_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost,
                                          size_t ByteCount, CUstream hStream) {
  return copy_async(as_pointer(dstDevice), srcHost, ByteCount, hStream);
}

FAKE_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream) {
  return copy_async(dstHost, as_pointer(srcDevice), ByteCount, hStream);
}

FAKE_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                          size_t ByteCount, CUstream hStream) {
  return copy_async(as_pointer(dstDevice), as_pointer(srcDevice), ByteCount, hStream);
}

FAKE_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                     CUstream hStream) {
  if (dstDevice == 0 && N != 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = as_pointer(dstDevice);
  stream_of(hStream).issue([p, uc, N] { std::memset(p, uc, N); }, true);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                      CUstream hStream) {
  if (dstDevice == 0 && N != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* p = static_cast<unsigned int*>(as_pointer(dstDevice));
  stream_of(hStream).issue(
      [p, ui, N] {
        for (size_t i = 0; i < N; ++i) p[i] = ui;
      },
      true);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventCreate(CUevent* phEvent, unsigned int /*Flags*/) {
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *phEvent = reinterpret_cast<CUevent>(new fake_event());
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
  if (hEvent == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto* ev = reinterpret_cast<fake_event*>(hEvent);
  // The driver defers the release until recorded work completes; so does this.
  ev->wait_for_recorded();
  delete ev;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  if (hEvent == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto* ev = reinterpret_cast<fake_event*>(hEvent);
  std::uint64_t n = 0;
  {
    std::lock_guard<std::mutex> lock(ev->mutex);
    n = ++ev->recorded;
  }
  stream_of(hStream).issue(
      [ev, n] {
        {
          std::lock_guard<std::mutex> lock(ev->mutex);
          if (ev->completed < n) ev->completed = n;
        }
        ev->done.notify_all();
      },
      true);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
  if (hEvent == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  reinterpret_cast<fake_event*>(hEvent)->wait_for_recorded();
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventQuery(CUevent hEvent) {
  if (hEvent == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto* ev = reinterpret_cast<fake_event*>(hEvent);
  std::lock_guard<std::mutex> lock(ev->mutex);
  return ev->completed >= ev->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKE_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int /*Flags*/) {
  if (hEvent == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto* ev = reinterpret_cast<fake_event*>(hEvent);
  const std::uint64_t target = ev->recorded_now();
  stream_of(hStream).issue([ev, target] { ev->wait_for(target); }, false);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult* status);

// The driver's exported name (cuda.h defines it to cuGetProcAddress_v2, undefined above).
// NOLINTNEXTLINE(readability-identifier-naming)
FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                      cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                         cuuint64_t /*flags*/,
                                         CUdriverProcAddressQueryResult* status) {
  struct entry {
    const char* name;
    int since;
    void* fn;
  };
  const entry table[] = {
      {"cuInit", 2000, reinterpret_cast<void*>(&cuInit)},
      {"cuDriverGetVersion", 2020, reinterpret_cast<void*>(&cuDriverGetVersion)},
      {"cuGetProcAddress", 12000, reinterpret_cast<void*>(&cuGetProcAddress_v2)},
      {"cuGetProcAddress", 11030, reinterpret_cast<void*>(&cuGetProcAddress)},
      {"cuMemAlloc", 3020, reinterpret_cast<void*>(&cuMemAlloc_v2)},
      {"cuMemFree", 3020, reinterpret_cast<void*>(&cuMemFree_v2)},
      {"cuMemAllocHost", 3020, reinterpret_cast<void*>(&cuMemAllocHost_v2)},
      {"cuMemHostAlloc", 2020, reinterpret_cast<void*>(&cuMemHostAlloc)},
      {"cuMemFreeHost", 2000, reinterpret_cast<void*>(&cuMemFreeHost)},
      {"cuMemAddressReserve", 10020, reinterpret_cast<void*>(&cuMemAddressReserve)},
      {"cuMemAddressFree", 10020, reinterpret_cast<void*>(&cuMemAddressFree)},
      {"cuMemCreate", 10020, reinterpret_cast<void*>(&cuMemCreate)},
      {"cuMemRelease", 10020, reinterpret_cast<void*>(&cuMemRelease)},
      {"cuMemMap", 10020, reinterpret_cast<void*>(&cuMemMap)},
      {"cuMemUnmap", 10020, reinterpret_cast<void*>(&cuMemUnmap)},
      {"cuMemSetAccess", 10020, reinterpret_cast<void*>(&cuMemSetAccess)},
      {"cuStreamCreate", 2000, reinterpret_cast<void*>(&cuStreamCreate)},
      {"cuStreamDestroy", 4000, reinterpret_cast<void*>(&cuStreamDestroy_v2)},
      {"cuStreamSynchronize", 2000, reinterpret_cast<void*>(&cuStreamSynchronize)},
      {"cuStreamQuery", 2000, reinterpret_cast<void*>(&cuStreamQuery)},
      {"cuStreamIsCapturing", 10000, reinterpret_cast<void*>(&cuStreamIsCapturing)},
      {"cuStreamWaitEvent", 3020, reinterpret_cast<void*>(&cuStreamWaitEvent)},
      {"cuLaunchHostFunc", 10000, reinterpret_cast<void*>(&cuLaunchHostFunc)},
      {"cuMemcpyAsync", 4000, reinterpret_cast<void*>(&cuMemcpyAsync)},
      {"cuMemcpyHtoDAsync", 3020, reinterpret_cast<void*>(&cuMemcpyHtoDAsync_v2)},
      {"cuMemcpyDtoHAsync", 3020, reinterpret_cast<void*>(&cuMemcpyDtoHAsync_v2)},
      {"cuMemcpyDtoDAsync", 3020, reinterpret_cast<void*>(&cuMemcpyDtoDAsync_v2)},
      {"cuMemsetD8Async", 3020, reinterpret_cast<void*>(&cuMemsetD8Async)},
      {"cuMemsetD32Async", 3020, reinterpret_cast<void*>(&cuMemsetD32Async)},
      {"cuEventCreate", 2000, reinterpret_cast<void*>(&cuEventCreate)},
      {"cuEventDestroy", 4000, reinterpret_cast<void*>(&cuEventDestroy_v2)},
      {"cuEventRecord", 2000, reinterpret_cast<void*>(&cuEventRecord)},
      {"cuEventSynchronize", 2000, reinterpret_cast<void*>(&cuEventSynchronize)},
      {"cuEventQuery", 2000, reinterpret_cast<void*>(&cuEventQuery)},
  };
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool named = false;
  for (const entry& e : table) {
    if (std::strcmp(symbol, e.name) != 0) continue;
    named = true;
    if (version < e.since) continue;
    *pfn = e.fn;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  *pfn = nullptr;
  if (status != nullptr) {
    *status =
        named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return CUDA_ERROR_NOT_FOUND;
}

/// What the stand-in still holds: physical handles, reservations, mappings, device and pinned
/// allocations, summed.
FAKE_EXPORT int okit_fake_driver_live(void) {
  std::lock_guard<std::mutex> lock(driver().mutex);
  const state& s = driver();
  return static_cast<int>(s.handles.size() + s.reservations.size() + s.mappings.size() +
                          s.device.size() + s.pinned.size());
}
