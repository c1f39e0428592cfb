// launch(): runs one __host__ __device__ functor over [0, n) on any executor. On the cuda back end
// it is a kernel (one thread per index); on the host back end the same functor runs over the same
// indices on host threads. There is one body per algorithm, never a host-only re-implementation.
//
// The functor is copied (to the kernel's parameters on cuda, to shared storage on host), so it
// must be trivially copyable and hold device pointers, not references. Translation units that
// launch on the cuda back end must be compiled by nvcc (.cu); elsewhere the cuda back end refuses
// the launch with a logic_error.
#pragma once

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

template <class Body>
void device_launch(const void* body, std::size_t n, unsigned block, void* cuda_stream) {
  if (n == 0) return;
  // A fixed cap on the grid keeps the launch shape independent of n's exact value beyond the cap.
  constexpr std::size_t max_blocks = 65535;
  std::size_t blocks = (n + block - 1) / block;
  if (blocks > max_blocks) blocks = max_blocks;
  kernel_for<
      Body>()<<<static_cast<unsigned>(blocks), block, 0, static_cast<cudaStream_t>(cuda_stream)>>>(
      *static_cast<const Body*>(body), n);
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
