// The interposer's counts and delays, looked up in the process (see the header).
#include "offloadkit/testing/driver_instruments.hpp"

#include <dlfcn.h>
#include <rapidcheck.h>

#include <sstream>
#include <utility>
#include <vector>

#include "offloadkit/interpose/control.h"

namespace offloadkit::testing {

std::optional<driver_counts> read_driver_counts() {
  const auto counts =
      reinterpret_cast<okit_interpose_counts_fn>(dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_COUNTS_SYMBOL));
  if (counts == nullptr) return std::nullopt;
  okit_interpose_counts_t c{};
  c.struct_size = sizeof c;
  if (counts(&c) != 0 || c.struct_size < sizeof c || c.counting == 0) return std::nullopt;
  driver_counts d;
  d.device_allocations = c.device_allocations;
  d.pinned_allocations = c.pinned_allocations;
  d.physical_handles = c.physical_handles;
  d.reservations = c.reservations;
  d.mappings = c.mappings;
  d.outstanding_device_allocations = c.outstanding_device_allocations;
  d.outstanding_pinned_allocations = c.outstanding_pinned_allocations;
  d.outstanding_physical_handles = c.outstanding_physical_handles;
  d.outstanding_reservations = c.outstanding_reservations;
  d.delays = c.delays;
  return d;
}

std::string driver_growth(const driver_counts& before, const driver_counts& now, unsigned which) {
  struct row {
    driver_resource kind;
    const char* what;
    std::uint64_t before, now;
  };
  const row rows[] = {
      {driver_device_allocations, "device allocations (cuMemAlloc, cudaMalloc)",
       before.device_allocations, now.device_allocations},
      {driver_pinned_allocations,
       "pinned allocations (cuMemAllocHost, cuMemHostAlloc, cudaHostAlloc, cudaMallocHost)",
       before.pinned_allocations, now.pinned_allocations},
      {driver_physical_handles, "physical handles (cuMemCreate)", before.physical_handles,
       now.physical_handles},
      {driver_reservations, "reservations (cuMemAddressReserve)", before.reservations,
       now.reservations},
  };
  std::ostringstream grew;
  for (const row& r : rows) {
    if ((which & r.kind) == 0 || r.now <= r.before) continue;
    grew << (grew.tellp() > 0 ? ", " : "") << r.now - r.before << " more " << r.what;
  }
  if (grew.tellp() == 0) return "";
  return "the driver's count (offloadkit's interposer, which sees the CUDA calls the code makes "
         "itself) found " +
         grew.str() + " after the first cycle, where the steady state must create none";
}

driver_delays::driver_delays() {
  set_ = dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_SET_DELAYS_SYMBOL);
  if (set_ == nullptr) return;
  seed_ = *rc::gen::arbitrary<std::uint64_t>();
  // Up to 5 ms in steps of 100 us: shrinking lowers it toward 0 (no delay), and a maximum it keeps
  // is long enough to lose a race every time, not a few microseconds that lose it by chance.
  max_us_ = 100 * *rc::gen::inRange<std::uint32_t>(0, 51);
  RC_LOG() << "driver delays (interposer): seed " << seed_ << ", up to " << max_us_ << " us\n";
  reinterpret_cast<okit_interpose_set_delays_fn>(set_)(seed_, max_us_);
}

void driver_delays::set_active(bool on) noexcept {
  if (set_ == nullptr) return;
  reinterpret_cast<okit_interpose_set_delays_fn>(set_)(seed_ + activations_, on ? max_us_ : 0);
  if (on) ++activations_;
}

driver_delays::~driver_delays() {
  if (set_ != nullptr) reinterpret_cast<okit_interpose_set_delays_fn>(set_)(0, 0);
}

}  // namespace offloadkit::testing
