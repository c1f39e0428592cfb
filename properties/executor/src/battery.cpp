// The executor battery's list of properties: the same for every back end, named after the
// executor they run on.
#include <string>
#include <vector>

#include "executor_properties.hpp"
#include "offloadkit/testing/executor_battery.hpp"

namespace offloadkit::testing {

std::vector<check_case> executor_battery(const std::string& executor_name) {
  namespace props = executor_properties;
  auto make = [&executor_name](const char* name, void (*property)(executor&), int cases) {
    check_case c;
    c.feature = "executor";
    c.implementation = executor_name;
    c.name = name;
    c.property = property;
    c.default_cases = cases;
    return c;
  };
  check_case devices = make("device_placement", &props::device_placement, 10);
  devices.min_devices = 2;
  return {
      make("copy_round_trip", &props::copy_round_trip, 100),
      make("fill", &props::fill_property, 100),
      make("launch_count", &props::launch_count, 100),
      make("stream_order", &props::stream_order, 100),
      make("event_ordering", &props::event_ordering, 30),
      make("missing_wait_is_observable", &props::missing_wait_is_observable, 5),
      make("vmm_remap", &props::vmm_remap, 20),
      make("graph_replay_after_remap", &props::graph_replay_after_remap, 20),
      make("fault_injection_leaves_executor_usable", &props::fault_injection_leaves_executor_usable,
           10),
      make("counting_adaptor_counts", &props::counting_adaptor_counts, 100),
      make("extent_of_names_the_allocation", &props::extent_of_names_the_allocation, 100),
      make("managed_round_trip", &props::managed_round_trip, 50),
      devices,
  };
}

}  // namespace offloadkit::testing
