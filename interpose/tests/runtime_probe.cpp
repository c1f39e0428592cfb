// A program that allocates through the CUDA runtime the way PyTorch's allocators do, for the
// interposer's tests: it loads a runtime library by path (RTLD_LOCAL, as Python loads extension
// modules), binds the allocation functions with dlsym() on its handle, and makes one device
// allocation and two pinned ones (cudaMallocHost, cudaHostAlloc), then releases them.
//
//   runtime_probe RUNTIME MODE
//     MODE  clean  releases everything
//           leak   keeps the cudaHostAlloc allocation (a pinned leak)
//
// Prints "probe: FUNCTION failed with error N" for a failed call, "probe: live N" (what the
// stand-in runtime still holds, when it can say) and "probe: ok". Exit status: 0 ok, 1 a call
// failed, 2 bad usage or setup.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

namespace {

using malloc_fn = cudaError_t (*)(void**, size_t);
using free_fn = cudaError_t (*)(void*);
using host_alloc_fn = cudaError_t (*)(void**, size_t, unsigned int);
using live_fn = int (*)();

constexpr std::size_t bytes = std::size_t{64} * 1024;

template <class Fn>
Fn bind(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

bool ok(const char* function, cudaError_t e) {
  if (e == cudaSuccess) return true;
  std::printf("probe: %s failed with error %d\n", function, static_cast<int>(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[2], "clean") != 0 && std::strcmp(argv[2], "leak") != 0)) {
    std::fprintf(stderr, "usage: runtime_probe RUNTIME clean|leak\n");
    return 2;
  }
  const bool leak = std::strcmp(argv[2], "leak") == 0;
  void* handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "runtime_probe: %s\n", dlerror());
    return 2;
  }
  const auto device_alloc = bind<malloc_fn>(handle, "cudaMalloc");
  const auto device_free = bind<free_fn>(handle, "cudaFree");
  const auto host_alloc = bind<host_alloc_fn>(handle, "cudaHostAlloc");
  const auto malloc_host = bind<malloc_fn>(handle, "cudaMallocHost");
  const auto free_host = bind<free_fn>(handle, "cudaFreeHost");
  const auto live = bind<live_fn>(handle, "okit_fake_runtime_live");
  if (device_alloc == nullptr || device_free == nullptr || host_alloc == nullptr ||
      malloc_host == nullptr || free_host == nullptr) {
    std::fprintf(stderr, "runtime_probe: %s lacks an allocation function\n", argv[1]);
    return 2;
  }
  void* device = nullptr;
  void* pinned = nullptr;
  void* mapped = nullptr;
  if (!ok("cudaMalloc", device_alloc(&device, bytes)) ||
      !ok("cudaMallocHost", malloc_host(&pinned, bytes)) ||
      !ok("cudaHostAlloc", host_alloc(&mapped, bytes, cudaHostAllocDefault)) ||
      !ok("cudaFree", device_free(device)) || !ok("cudaFreeHost", free_host(pinned)) ||
      (!leak && !ok("cudaFreeHost", free_host(mapped)))) {
    return 1;
  }
  if (live != nullptr) std::printf("probe: live %d\n", live());
  std::printf("probe: ok\n");
  return 0;
}
