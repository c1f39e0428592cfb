// Device bodies used by the executor battery. They are issued through offloadkit::launch() from
// executor_kernels.cu, compiled by nvcc, so that the cuda back end runs them as kernels and the
// host back end runs the same bodies; callers see plain C++ functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "offloadkit/detail/splitmix64.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/host_device.hpp"

namespace offloadkit::executor_checks {

/// The value launch checks expect at index i: a cheap mix of i and a salt, so that a write to the
/// wrong index or a missed index shows up as a wrong value.
OFFLOADKIT_HD inline std::uint64_t index_value(std::uint64_t i, std::uint64_t salt) {
  return detail::splitmix64_mix(i * detail::splitmix64_gamma + salt);
}

/// For every i in [0, n): atomically adds 1 to *counter (cuda::atomic_ref, device scope) and sets
/// out[i] = index_value(i, salt).
void launch_count_and_write(executor& ex, std::size_t n, unsigned long long* counter,
                            std::uint64_t* out, std::uint64_t salt, unsigned block, stream_ref s);

/// words[i] = words[i] * a + b (mod 2^32) for every i in [0, n).
void launch_affine(executor& ex, std::size_t n, std::uint32_t* words, std::uint32_t a,
                   std::uint32_t b, stream_ref s);

}  // namespace offloadkit::executor_checks
