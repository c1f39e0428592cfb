// One shape for a feature's list of properties: every property of the battery is listed for every
// implementation, run where the implementation's declared profile calls for it and otherwise
// listed as not applicable, with what the profile says, so that a report shows the whole battery.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/executor.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::testing {

template <class Implementation>
class battery_list {
 public:
  using body = std::function<void(executor&, const Implementation&)>;

  battery_list(std::string feature, const Implementation& impl)
      : feature_(std::move(feature)),
        impl_(std::make_shared<const Implementation>(impl)),
        profile_(profile_of(impl)) {}

  /// Lists property `name` (its body gets the executor and the descriptor), run `cases` times by
  /// default. Returns the case, to set min_devices or reads_free_memory on.
  check_case& add(const char* name, body b, int cases) {
    check_case c;
    c.feature = feature_;
    c.implementation = impl_->name;
    c.name = name;
    // Every case shares one copy of the descriptor.
    c.property = [impl = impl_, b = std::move(b)](executor& ex) { b(ex, *impl); };
    c.default_cases = cases;
    c.profile = profile_;
    cases_.push_back(std::move(c));
    return cases_.back();
  }

  /// Lists `name` where `applies`, otherwise as not applicable because of `why_not` (what the
  /// profile says: "profile says ..."). Returns the case.
  check_case& add_if(bool applies, const char* name, body b, int cases,
                     const std::string& why_not) {
    if (applies) return add(name, std::move(b), cases);
    cases_.push_back(not_applicable_case(feature_, impl_->name, name, why_not));
    cases_.back().profile = profile_;
    return cases_.back();
  }

  [[nodiscard]] std::vector<check_case> take() && { return std::move(cases_); }

 private:
  std::string feature_;
  std::shared_ptr<const Implementation> impl_;
  /// What every case carries for reports: the descriptor's flags, read once.
  profile_flags profile_;
  std::vector<check_case> cases_;
};

/// Why a fault-injection property does not apply to an implementation that does not declare
/// executor_allocations.
inline std::string allocations_not_through_executor() {
  return "profile says it allocates and copies without the executor (executor_allocations not "
         "declared): offloadkit's fault adaptor cannot fail those calls (--driver-faults can)";
}

}  // namespace offloadkit::testing
