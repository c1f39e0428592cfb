// The arena battery's list of properties, the built-in implementations as descriptors, and every
// case for `offloadkit check`.
#include <memory>
#include <utility>

#include "arena_properties.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/testing/arena_battery.hpp"
#include "offloadkit/testing/battery_list.hpp"

namespace offloadkit::testing {

std::vector<check_case> arena_battery(const arena_implementation& impl) {
  namespace props = arena::testing;
  battery_list<arena_implementation> list("arena", impl);
  list.add("round_trip", &props::prop_round_trip, 60);
  list.add("event_chain", &props::prop_event_chain, 15);
  // Its figures come from an adaptor, which sees only what goes through the executor.
  list.add_if(
      impl.caps.pinned_steady_state && impl.support.executor_allocations, "steady_state",
      &props::prop_steady_state, 30,
      impl.caps.pinned_steady_state
          ? allocations_not_through_executor()
          : "profile says a repeated shape may allocate (pinned_steady_state not declared)");
  list.add("lifetime", &props::prop_lifetime, 20);
  for (const auto& [name, body] : {std::pair{"fault_allocation", &props::prop_fault_allocation},
                                   std::pair{"fault_copy", &props::prop_fault_copy},
                                   std::pair{"fault_countdown", &props::prop_fault_countdown}}) {
    list.add_if(impl.support.executor_allocations, name, body, 15,
                allocations_not_through_executor());
  }
  list.add("concurrent", &props::prop_concurrent, 15);
  // Every profile copies in stream order on the caller's stream: a hold of 300 to 400 ms a case.
  list.add("caller_writes_late", &props::prop_caller_writes_late, 5);
  list.add("model_sequence", &props::prop_model_sequence, 40);
  // Deterministic: the same edge shapes every case, so one case is the whole check.
  list.add("boundary_shapes", &props::prop_boundary_shapes, 1);
  check_case& multi = list.add_if(
      static_cast<bool>(impl.make_for_device), "multi_device", &props::prop_multi_device, 10,
      "profile says it cannot be told a device (a plugin's create() takes none): it runs on "
      "device 0 only");
  multi.min_devices = 2;
  multi.reads_free_memory = true;
  return std::move(list).take();
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
