// The arena battery's list of properties, the built-in implementations as descriptors, and every
// case for `offloadkit check`.
#include <memory>
#include <utility>

#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/testing/arena_battery.hpp"

namespace offloadkit::testing {

std::vector<check_case> arena_battery(const arena_implementation& impl) {
  // Every case shares one copy of the descriptor; the properties read its promises.
  const auto shared = std::make_shared<const arena_implementation>(impl);
  using property_fn = void (*)(const arena_implementation&, executor&);
  auto make = [&shared](const char* name, property_fn f, int cases) {
    return check_case{"arena", shared->name, name, [shared, f](executor& ex) { f(*shared, ex); },
                      cases};
  };
  namespace props = arena::testing;
  std::vector<check_case> out;
  out.push_back(make("round_trip", &props::prop_round_trip, 60));
  out.push_back(make("event_chain", &props::prop_event_chain, 15));
  // Its figures come from an adaptor, which sees only what goes through the executor.
  if (impl.caps.pinned_steady_state && impl.support.executor_allocations) {
    out.push_back(make("steady_state", &props::prop_steady_state, 30));
  }
  out.push_back(make("lifetime", &props::prop_lifetime, 20));
  // The fault adaptor fails only what passes through the executor.
  if (impl.support.executor_allocations) {
    out.push_back(make("fault_allocation", &props::prop_fault_allocation, 15));
    out.push_back(make("fault_copy", &props::prop_fault_copy, 15));
    out.push_back(make("fault_countdown", &props::prop_fault_countdown, 15));
  }
  out.push_back(make("concurrent", &props::prop_concurrent, 15));
  out.push_back(make("model_sequence", &props::prop_model_sequence, 40));
  // Deterministic: the same edge shapes every case, so one case is the whole check.
  out.push_back(make("boundary_shapes", &props::prop_boundary_shapes, 1));
  // Only where the implementation can be made for a device other than the first.
  if (impl.make_for_device) {
    check_case devices = make("multi_device", &props::prop_multi_device, 10);
    devices.min_devices = 2;
    out.push_back(std::move(devices));
  }
  return out;
}

arena_implementation reference_arena_implementation() {
  arena_implementation impl;
  impl.name = "reference";
  impl.caps = arena::offload_promises{};  // synchronous, pageable, a buffer per tensor
  impl.make = [](executor& ex) {
    return std::unique_ptr<arena::offloader>(std::make_unique<arena::reference_offloader>(ex));
  };
  // Nothing of it belongs to a device: its events are made on the device of the stream it is
  // given, its copies are pageable host memory.
  impl.make_for_device = [](executor& ex, int /*device*/) {
    return std::unique_ptr<arena::offloader>(std::make_unique<arena::reference_offloader>(ex));
  };
  return impl;
}

arena_implementation optimized_arena_implementation() {
  arena_implementation impl;
  impl.name = "optimized";
  impl.caps.asynchronous = true;
  impl.caps.pinned_steady_state = true;
  impl.caps.single_host_buffer = true;
  impl.make = [](executor& ex) {
    return std::unique_ptr<arena::offloader>(std::make_unique<arena::coalesced_offloader>(ex));
  };
  impl.make_for_device = [](executor& ex, int device) {
    arena::coalesced_options o;
    o.device = device;
    return std::unique_ptr<arena::offloader>(std::make_unique<arena::coalesced_offloader>(ex, o));
  };
  return impl;
}

std::vector<arena_implementation> builtin_arena_implementations() {
  return {reference_arena_implementation(), optimized_arena_implementation()};
}

std::vector<check_case> arena_checks() {
  std::vector<check_case> all;
  for (const arena_implementation& impl : builtin_arena_implementations()) {
    for (check_case& c : arena_battery(impl)) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace offloadkit::testing
