// OFFLOADKIT_HD marks a function that runs both as device code (when compiled by nvcc) and as
// host code (when the host executor runs the same body over the same index space).
#pragma once

#if defined(__CUDACC__)
#define OFFLOADKIT_HD __host__ __device__
#else
#define OFFLOADKIT_HD
#endif

namespace offloadkit {

/// In a body launched programmatically (launch.hpp: `programmatic_launch`), waits until the
/// kernels before it in the stream have finished and their writes are visible; the body reads and
/// writes global memory only after it. Compiled for compute capability 9.0 or later it is
/// `griddepcontrol.wait` (which returns at once in a kernel launched without the attribute);
/// elsewhere, and on host threads, there is nothing to wait for.
OFFLOADKIT_HD inline void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace offloadkit
