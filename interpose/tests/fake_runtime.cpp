// A stand-in CUDA runtime for the interposer's tests without a GPU: the allocation functions the
// interposer wraps (cudaMalloc, cudaFree, cudaHostAlloc, cudaMallocHost, cudaFreeHost), each over
// the host heap, counting what is still held. Built as libcudart.so.13 in a folder of its own and
// loaded by path only (runtime_probe), so that no program of the build or of a GPU machine finds
// it by name.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>

namespace {
std::atomic<int> live{0};

cudaError_t allocate(void** p, size_t size) {
  if (p == nullptr) return cudaErrorInvalidValue;
  *p = std::malloc(size == 0 ? 1 : size);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  live.fetch_add(1);
  return cudaSuccess;
}

cudaError_t release(void* p) {
  if (p == nullptr) return cudaSuccess;
  std::free(p);
  live.fetch_sub(1);
  return cudaSuccess;
}
}  // namespace

extern "C" {

// The runtime's own parameter names (cuda_runtime_api.h).
__attribute__((visibility("default"))) cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return allocate(devPtr, size);
}

__attribute__((visibility("default"))) cudaError_t cudaFree(void* devPtr) {
  return release(devPtr);
}

__attribute__((visibility("default"))) cudaError_t cudaHostAlloc(void** pHost, size_t size,
                                                                 unsigned int /*flags*/) {
  return allocate(pHost, size);
}

__attribute__((visibility("default"))) cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return allocate(ptr, size);
}

__attribute__((visibility("default"))) cudaError_t cudaFreeHost(void* ptr) { return release(ptr); }

/// What the stand-in still holds: allocations made and not released.
__attribute__((visibility("default"))) int okit_fake_runtime_live() { return live.load(); }

}  // extern "C"
