// Device bodies of the executor battery (see executor_kernels.hpp), written once as OFFLOADKIT_HD
// functors: a kernel on the cuda back end, a loop over the same indices on the host back end.
#include <cstdint>
#include <cuda/atomic>

#include "executor_kernels.hpp"
#include "offloadkit/launch.hpp"

namespace offloadkit::executor_checks {
namespace bodies {

struct count_and_write {
  unsigned long long* counter;
  std::uint64_t* out;
  std::uint64_t salt;

  OFFLOADKIT_HD void operator()(std::size_t i) const {
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> c(*counter);
    c.fetch_add(1ull, cuda::std::memory_order_relaxed);
    out[i] = index_value(i, salt);
  }
};

struct affine {
  std::uint32_t* words;
  std::uint32_t a;
  std::uint32_t b;

  OFFLOADKIT_HD void operator()(std::size_t i) const { words[i] = words[i] * a + b; }
};

}  // namespace bodies

void launch_count_and_write(executor& ex, std::size_t n, unsigned long long* counter,
                            std::uint64_t* out, std::uint64_t salt, unsigned block, stream_ref s) {
  launch(ex, n, bodies::count_and_write{counter, out, salt}, "executor_battery.count_and_write",
         block, s);
}

void launch_affine(executor& ex, std::size_t n, std::uint32_t* words, std::uint32_t a,
                   std::uint32_t b, stream_ref s) {
  launch(ex, n, bodies::affine{words, a, b}, "executor_battery.affine", s);
}

}  // namespace offloadkit::executor_checks
