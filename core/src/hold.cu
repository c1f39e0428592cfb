// The body delay_adaptor enqueues to hold a stream: a one-thread launch that waits out its
// duration. On a GPU it is a kernel that spins on the global timer, so it holds only its own
// stream; a host function would be run by the driver's one callback thread and would also hold
// back host functions queued on every other stream, which narrows the race windows the delays
// are there to widen. On the host back end the same body sleeps on the stream's worker thread.
#include <chrono>
#include <cstdint>
#include <thread>

#include "hold.hpp"
#include "offloadkit/launch.hpp"

namespace offloadkit::detail {
namespace {

struct hold_body {
  std::int64_t ns;

  OFFLOADKIT_HD void operator()(std::size_t /*i*/) const {
#if defined(__CUDA_ARCH__)
    const std::uint64_t start = now();
    while (static_cast<std::int64_t>(now() - start) < ns) __nanosleep(1000);
#else
    std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
#endif
  }

#if defined(__CUDA_ARCH__)
  __device__ static std::uint64_t now() {
    std::uint64_t t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
#endif
};

}  // namespace

launch_request hold_request(std::chrono::microseconds d) {
  return make_launch(1, hold_body{std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()},
                     "offloadkit_hold", 1);
}

}  // namespace offloadkit::detail
