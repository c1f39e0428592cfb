// launch(): runs one __host__ __device__ functor over [0, n) on any executor. On the cuda back end
// it is a kernel (one thread per index); on the host back end the same functor runs over the same
// indices on host threads. There is one body per algorithm, never a host-only re-implementation.
//
// The functor is copied (to the kernel's parameters on cuda, to shared storage on host), so it
// must be trivially copyable and hold device pointers, not references. A functor that declares
// `static constexpr bool programmatic_launch = true` touches global memory only after
// wait_for_prior_grids() (host_device.hpp); on GPUs that support it its kernel is then launched
// with programmatic stream serialization, so that its launch overlaps the end of the kernel before
// it in the stream. Translation units that launch on the cuda back end must be compiled by nvcc
// (.cu); elsewhere the cuda back end refuses the launch with a logic_error.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <type_traits>

#include "offloadkit/executor.hpp"
#include "offloadkit/host_device.hpp"

namespace offloadkit {
namespace detail {

#if defined(__CUDACC__)
template <class Body>
__device__ inline void run_indices(const Body& body, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    body(i);
  }
}

template <class Body>
__global__ void launch_kernel(Body body, std::size_t n) {
  run_indices(body, n);
}

/// The kernel of a body that declares `max_block_threads` and `min_blocks_per_sm`: compiled so
/// that that many blocks of at most that many threads fit on a multiprocessor at once.
template <class Body>
__global__ void __launch_bounds__(Body::max_block_threads, Body::min_blocks_per_sm)
    bounded_launch_kernel(Body body, std::size_t n) {
  run_indices(body, n);
}

template <class Body, class = void>
struct has_launch_bounds : std::false_type {};
template <class Body>
struct has_launch_bounds<Body, std::void_t<decltype(Body::min_blocks_per_sm)>> : std::true_type {};

/// The kernel that runs `Body` (for launches and occupancy queries).
template <class Body>
constexpr auto kernel_for() {
  if constexpr (has_launch_bounds<Body>::value) {
    return &bounded_launch_kernel<Body>;
  } else {
    return &launch_kernel<Body>;
  }
}

template <class Body, class = void>
struct has_programmatic_launch : std::false_type {};
template <class Body>
struct has_programmatic_launch<Body, std::void_t<decltype(Body::programmatic_launch)>>
    : std::bool_constant<Body::programmatic_launch> {};

/// Whether `kernel` may run with programmatic stream serialization on `device`: the device has
/// compute capability 9.0 or later and the code it runs was compiled from PTX of 9.0 or later,
/// which holds wait_for_prior_grids' wait (code compiled from older PTX has none, and launched
/// early would read before the kernel before it had finished). False when a query fails: the
/// launch then runs in plain stream order, which is always correct.
inline bool programmatic_launch_allowed(const void* kernel, int device) {
  int major = 0;
  cudaFuncAttributes attributes{};
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9 && cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
         attributes.ptxVersion >= 90;
}

/// programmatic_launch_allowed for Body's kernel on the current device, asked once per device.
template <class Body>
bool programmatic_launch_allowed_here() {
  constexpr int known_devices = 64;
  static std::atomic<unsigned char> known[known_devices] = {};  // 0 not asked, 1 yes, 2 no
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  const auto* kernel = reinterpret_cast<const void*>(kernel_for<Body>());
  if (device < 0 || device >= known_devices) return programmatic_launch_allowed(kernel, device);
  unsigned char answer = known[device].load(std::memory_order_relaxed);
  if (answer == 0) {
    answer = programmatic_launch_allowed(kernel, device) ? 1 : 2;
    known[device].store(answer, std::memory_order_relaxed);
  }
  return answer == 1;
}

template <class Body>
void device_launch(const void* body, std::size_t n, unsigned block, void* cuda_stream) {
  if (n == 0) return;
  // A fixed cap on the grid keeps the launch shape independent of n's exact value beyond the cap.
  constexpr std::size_t max_blocks = 65535;
  std::size_t blocks = (n + block - 1) / block;
  if (blocks > max_blocks) blocks = max_blocks;
  const auto kernel = kernel_for<Body>();
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  if constexpr (has_programmatic_launch<Body>::value) {
    if (programmatic_launch_allowed_here<Body>()) {
      // The kernel may be placed on the GPU as soon as every block of the kernel before it has
      // exited (no early trigger), before that kernel's writes are flushed: its launch and its
      // first steps overlap that kernel's end, and wait_for_prior_grids holds its memory accesses.
      cudaLaunchAttribute attribute{};
      attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attribute.val.programmaticStreamSerializationAllowed = 1;
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(static_cast<unsigned>(blocks));
      config.blockDim = dim3(block);
      config.stream = stream;
      config.attrs = &attribute;
      config.numAttrs = 1;
      // An error is left for the caller's cudaGetLastError, as with the launch below.
      static_cast<void>(cudaLaunchKernelEx(&config, kernel, *static_cast<const Body*>(body), n));
      return;
    }
  }
  kernel<<<static_cast<unsigned>(blocks), block, 0, stream>>>(*static_cast<const Body*>(body), n);
}
#endif

template <class Body>
void host_run(const void* body, std::size_t begin, std::size_t end) {
  const Body& b = *static_cast<const Body*>(body);
  for (std::size_t i = begin; i < end; ++i) b(i);
}

}  // namespace detail

/// Builds the launch request for `body` over [0, n) without issuing it.
template <class Body>
launch_request make_launch(std::size_t n, const Body& body, const char* name = "kernel",
                           unsigned block = 256) {
  static_assert(std::is_trivially_copyable_v<Body>,
                "launch bodies are copied to the device: capture device pointers by value");
  launch_request r;
  r.n = n;
  r.block = block;
  r.body = std::make_shared<Body>(body);
  r.host_run = &detail::host_run<Body>;
#if defined(__CUDACC__)
  r.device_launch = &detail::device_launch<Body>;
#endif
  r.name = name;
  return r;
}

/// Runs `body(i)` for every i in [0, n) in stream order on `s`, as a kernel called `name` (in
/// errors and traces) with `block` threads per block on the cuda back end.
template <class Body>
void launch(executor& ex, std::size_t n, const Body& body, const char* name, unsigned block,
            stream_ref s) {
  ex.launch(make_launch(n, body, name, block), s);
}
template <class Body>
void launch(executor& ex, std::size_t n, const Body& body, const char* name, stream_ref s) {
  launch(ex, n, body, name, 256, s);
}
template <class Body>
void launch(executor& ex, std::size_t n, const Body& body, stream_ref s) {
  launch(ex, n, body, "kernel", 256, s);
}

}  // namespace offloadkit
