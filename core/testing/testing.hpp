// Test support shared by every suite: executor factories for typed batteries (one type per back
// end, registered by type), the GPU-availability check, and the seed every randomized test prints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/host_executor.hpp"

namespace offloadkit::testing {

/// Typed-battery parameter for the host back end.
struct host_backend {
  static constexpr const char* name = "host";
  static std::unique_ptr<executor> make() { return std::make_unique<host_executor>(); }
};

/// Typed-battery parameter for the cuda back end. Suites instantiated with it must carry "Cuda" in
/// their instantiation name so that ctest runs them in the gpu-labelled entry.
struct cuda_backend {
  static constexpr const char* name = "cuda";
  static std::unique_ptr<executor> make() { return std::make_unique<cuda_executor>(); }
};

/// The seed of this test process (OFFLOADKIT_SEED or RC_PARAMS seed, else random), printed once.
std::uint64_t seed();

/// OFFLOADKIT_CASES: the cases per property, fewer or more than each property's default (0 or
/// unset: the defaults).
int cases_from_environment();

}  // namespace offloadkit::testing
