// The paged-stash battery's non-template entry points: implementation factories and the list of
// every case that `offloadkit check` runs.
#include "offloadkit/stash/battery.hpp"

#include "offloadkit/stash/eager_stash.hpp"
#include "offloadkit/stash/paged_stash.hpp"

namespace offloadkit::stash {

std::unique_ptr<stash_interface> reference_impl::make(executor& ex, const stash_config& c,
                                                      stream_ref s) {
  return std::make_unique<eager_stash>(ex, c, s);
}

std::unique_ptr<stash_interface> optimized_impl::make(executor& ex, const stash_config& c,
                                                      stream_ref s) {
  return std::make_unique<paged_stash>(ex, c, s);
}

std::vector<check_case> stash_codec_checks() {
  std::vector<check_case> out;
  check_case c;
  c.feature = "stash";
  c.implementation = "key_codec";
  c.name = "fixed_width_codec_injective";
  c.property = testing::prop_codec_injective;
  c.default_cases = 500;
  out.push_back(c);
  c.implementation = "legacy_codec";
  c.name = "legacy_codec_round_trips_below_1000";
  c.property = testing::prop_legacy_in_range;
  out.push_back(c);
  return out;
}

std::vector<check_case> stash_checks() {
  std::vector<check_case> out = stash_codec_checks();
  for (auto& c : stash_battery<reference_impl>()) out.push_back(std::move(c));
  for (auto& c : stash_battery<optimized_impl>()) out.push_back(std::move(c));
  return out;
}

}  // namespace offloadkit::stash
