// The paged-stash battery's list of properties, the built-in implementations as descriptors, and
// every case that `offloadkit check` runs.
#include <memory>
#include <string>
#include <utility>

#include "offloadkit/error.hpp"
#include "offloadkit/stash/eager_stash.hpp"
#include "offloadkit/stash/paged_stash.hpp"
#include "offloadkit/testing/battery_list.hpp"
#include "offloadkit/testing/stash_battery.hpp"
#include "stash_properties.hpp"

namespace offloadkit::testing {

std::vector<check_case> stash_battery(const stash_implementation& impl) {
  namespace props = stash::testing;
  // The first-overflow prediction and the graph replay's status checks are written for the
  // per-key status word and split placement; model_based checks every declared policy.
  const std::string other_overflow_policy = offloadkit::detail::concat(
      "profile says overflow is a ", to_string(impl.caps.overflow), " with ",
      to_string(impl.caps.placement),
      ": this property predicts the per-key status word of a split placement (model_based "
      "checks the declared policy)");
  battery_list<stash_implementation> list("stash", impl);
  list.add("round_trip_and_conservation", &props::prop_round_trip, 200);
  list.add_if(impl.caps.default_overflow_policy(), "capacity_sweep_first_overflow",
              &props::prop_capacity_sweep, 80, other_overflow_policy);
  list.add("key_limits", &props::prop_key_limits, 30);
  list.add("config_limits", &props::prop_config_limits, 30);
  list.add_if(impl.support.executor_allocations, "injected_faults_countdown",
              &props::prop_injected_faults, 15, allocations_not_through_executor());
  list.add("model_based", &props::prop_model, 200);
  // Every profile reads the source and row count in the order of the caller's stream: a hold of
  // 300 to 400 ms a case.
  list.add("caller_writes_late", &props::prop_caller_writes_late, 5);
  list.add("batch_matches_per_key", &props::prop_batch_matches_per_key, 60);
  list.add_if(impl.caps.capturable && impl.caps.default_overflow_policy(),
              "graph_replay_row_counts", &props::prop_graph_replay, 40,
              impl.caps.capturable ? other_overflow_policy
                                   : "profile says stash() and restore() synchronize the host "
                                     "(capturable not declared): no graph can capture them");
  check_case& multi = list.add("multi_device", &props::prop_multi_device, 8);
  multi.min_devices = 2;
  multi.reads_free_memory = true;
  return std::move(list).take();
}

std::vector<check_case> stash_codec_checks(const stash::testing::key_codecs& codecs) {
  using codec_property = void (*)(const stash::testing::key_codecs&);
  auto make = [&codecs](const char* implementation, const char* name, codec_property f) {
    check_case c;
    c.feature = "stash";
    c.implementation = implementation;
    c.name = name;
    c.property = [codecs, f](executor&) { f(codecs); };
    c.default_cases = 500;
    return c;
  };
  namespace props = stash::testing;
  return {make("key_codec", "fixed_width_codec_injective", &props::prop_codec_injective),
          make("legacy_codec", "legacy_codec_round_trips_below_1000", &props::prop_legacy_in_range),
          make("legacy_codec", "legacy_codec_claim_agrees_with_round_trip",
               &props::prop_legacy_claim_agrees)};
}

std::vector<check_case> stash_codec_checks() {
  return stash_codec_checks(stash::testing::builtin_codecs());
}

stash_implementation reference_stash_implementation() {
  stash_implementation impl;
  impl.name = "reference";
  impl.caps.capturable = false;  // reads the row count on the host after every stash
  impl.caps.page_ids = false;    // exact-size buffers, no pages
  impl.make = [](executor& ex, const stash::stash_config& c, stream_ref s) {
    return std::unique_ptr<stash::stash_interface>(std::make_unique<stash::eager_stash>(ex, c, s));
  };
  return impl;
}

stash_implementation optimized_stash_implementation() {
  stash_implementation impl;
  impl.name = "optimized";
  impl.caps.capturable = true;
  impl.caps.page_ids = true;
  impl.make = [](executor& ex, const stash::stash_config& c, stream_ref s) {
    return std::unique_ptr<stash::stash_interface>(std::make_unique<stash::paged_stash>(ex, c, s));
  };
  return impl;
}

std::vector<stash_implementation> builtin_stash_implementations() {
  return {reference_stash_implementation(), optimized_stash_implementation()};
}

std::vector<check_case> stash_checks() {
  std::vector<check_case> out = stash_codec_checks();
  for (const stash_implementation& impl : builtin_stash_implementations()) {
    for (check_case& c : stash_battery(impl)) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace offloadkit::testing
