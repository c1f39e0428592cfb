// The suite catches the classic activation-offload bugs: each planted offloader (test-only, behind
// the same interface) runs against the whole battery, with delays injected on its copy and upload
// streams where a property injects them, and the set of properties that fail must be exactly the
// one that guards against its bug. The same offloader without the bug passes every property.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "battery_support.hpp"
#include "battery_tests.hpp"
#include "hooks_offloader.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/testing/activation_battery.hpp"
#include "planted_offloader.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::activation;
using offloadkit::activation::testing::bug;
using offloadkit::activation::testing::planted_offloader;

// The race bugs are real data races on host memory; ThreadSanitizer reports them (rightly) and
// fails the process, so under TSan those tests step aside and the uninstrumented build shows that
// the property catches them.
#if defined(__SANITIZE_THREAD__)
#define OFFLOADKIT_SKIP_PLANTED_RACE() \
  GTEST_SKIP() << "planted data race: ThreadSanitizer reports it; run the uninstrumented build"
#else
#define OFFLOADKIT_SKIP_PLANTED_RACE() \
  do {                                 \
  } while (0)
#endif

/// planted_offloader<B>'s descriptor: the optimized offloader's capabilities, which the compact
/// offloader claims too (every bound, the device of origin, backward-order prefetch).
template <bug B>
offloadkit::testing::activation_implementation planted() {
  offloadkit::testing::activation_implementation impl =
      offloadkit::testing::optimized_activation_implementation();
  impl.name = "planted";
  impl.make = [](executor& ex, const offload_options& o) {
    return std::unique_ptr<offloader>(std::make_unique<planted_offloader<B>>(ex, o));
  };
  return impl;
}

/// Cases per property when a planted offloader faces the whole battery (OFFLOADKIT_CASES raises
/// or lowers it): enough for every property to meet its bug, few enough to stay fast.
constexpr int planted_cases = 60;

/// Runs every property of the battery on `impl` with one host executor (two simulated devices)
/// and returns the names of those that failed, printing each failure.
std::set<std::string> failing_properties(
    const offloadkit::testing::activation_implementation& impl) {
  offloadkit::testing::planted_run run;
  run.cases = planted_cases;
  run.fresh_executor = false;
  return offloadkit::testing::failing_properties(offloadkit::testing::activation_battery(impl),
                                                 run);
}

/// The same for planted_offloader<B>.
template <bug B>
std::set<std::string> failing_properties() {
  return failing_properties(planted<B>());
}

#define OFFLOADKIT_EXPECT_FAILING(bug_, ...)                                       \
  EXPECT_EQ(failing_properties<bug::bug_>(), (std::set<std::string>{__VA_ARGS__})) \
      << "the planted bug " #bug_ " fails other properties than expected (seed "   \
      << offloadkit::testing::seed() << ")"

TEST(ActivationPlanted, NothingWithoutABug) {
  EXPECT_EQ(failing_properties<bug::none>(), std::set<std::string>{});
}

TEST(ActivationPlanted, MiscountedStatsOnlyInRoundTrip) {
  OFFLOADKIT_EXPECT_FAILING(uncounted_kept, "round_trip");
}
TEST(ActivationPlanted, UnpackOntoTheCurrentDeviceOnlyInTwoDevices) {
  OFFLOADKIT_EXPECT_FAILING(current_device, "two_devices");
}
TEST(ActivationPlanted, LentSlackOutsideTheBoundOnlyInPrefetchMemoryBound) {
  OFFLOADKIT_EXPECT_FAILING(ignores_lent_slack, "prefetch_memory_bound");
}
TEST(ActivationPlanted, PendingBoundPerTensorOnlyInPendingSourceBound) {
  OFFLOADKIT_EXPECT_FAILING(per_tensor_pending, "pending_source_bound");
}
TEST(ActivationPlanted, SourceReleasedInProducerStreamOrderOnlyInSourceReuse) {
  OFFLOADKIT_SKIP_PLANTED_RACE();
  OFFLOADKIT_EXPECT_FAILING(stream_ordered_release, "source_reuse_other_stream");
}
TEST(ActivationPlanted, PrefetchInForwardOrderOnlyInPrefetchOrder) {
  OFFLOADKIT_EXPECT_FAILING(forward_order_prefetch, "prefetch_order");
}
TEST(ActivationPlanted, PrefetchOneLayerLateOnlyInSteadyStateDemandUploads) {
  OFFLOADKIT_EXPECT_FAILING(late_prefetch, "steady_state_demand_uploads");
}
TEST(ActivationPlanted, ZeroPrefetchLayersAsUnlimitedOnlyInConfigEdges) {
  OFFLOADKIT_EXPECT_FAILING(zero_layers_unlimited, "config_edges");
}
TEST(ActivationPlanted, SourceGivenBackByAFailedPackOnlyInFaultCountdown) {
  OFFLOADKIT_EXPECT_FAILING(release_on_failed_pack, "fault_countdown");
}
TEST(ActivationPlanted, PackNotWaitingForTheCallerOnlyInCallerWritesLate) {
  OFFLOADKIT_EXPECT_FAILING(no_caller_wait, "caller_writes_late");
}

// Bugs that more than one property sees, each for its own reason.
TEST(ActivationPlanted, PrefetchBeyondTheBound) {
  OFFLOADKIT_EXPECT_FAILING(unbounded_prefetch, "prefetch_memory_bound", "config_edges");
}
TEST(ActivationPlanted, SourcesHeldBeyondThePendingBound) {
  OFFLOADKIT_EXPECT_FAILING(unbounded_pending, "pending_source_bound", "config_edges");
}

// ---- declared policies: the saved-tensor-hooks doubles and their planted variants -------------

namespace doubles = offloadkit::activation::testing_doubles;
using names = std::set<std::string>;

/// The properties `impl`'s profile rules out, each with its reason.
names not_applicable(const offloadkit::testing::activation_implementation& impl) {
  names out;
  for (const check_case& c : offloadkit::testing::activation_battery(impl)) {
    if (c.not_applicable.empty()) continue;
    EXPECT_NE(c.not_applicable.find("profile says"), std::string::npos) << c.name;
    out.insert(c.name);
  }
  return out;
}

TEST(ActivationProfiles, CurrentDeviceHooksPassTheirProfile) {
  const auto impl = doubles::current_device_hooks_implementation();
  EXPECT_EQ(failing_properties(impl), names{});
  EXPECT_EQ(not_applicable(impl),
            (names{"prefetch_order", "steady_state_demand_uploads", "storage_dedup"}));
}
TEST(ActivationProfiles, ReturningOnTheOriginWhileDeclaringCurrentOnlyInTwoDevices) {
  EXPECT_EQ(failing_properties(doubles::current_device_hooks_implementation(
                doubles::hooks_planted::returns_on_origin)),
            names{"two_devices"});
}
TEST(ActivationProfiles, PredicateHooksPassTheirProfile) {
  EXPECT_EQ(failing_properties(doubles::predicate_hooks_implementation()), names{});
}
TEST(ActivationProfiles, AKeptTensorCopiedOffOnlyInRoundTrip) {
  EXPECT_EQ(failing_properties(
                doubles::predicate_hooks_implementation(doubles::hooks_planted::copies_kept)),
            names{"round_trip"});
}
TEST(ActivationProfiles, DedupHooksPassTheirProfile) {
  const auto impl = doubles::dedup_hooks_implementation();
  EXPECT_EQ(failing_properties(impl), names{});
  EXPECT_EQ(not_applicable(impl), (names{"prefetch_order", "steady_state_demand_uploads"}));
}
TEST(ActivationProfiles, OneReleasePerSharedCopyOnlyInStorageDedup) {
  EXPECT_EQ(failing_properties(
                doubles::dedup_hooks_implementation(doubles::hooks_planted::one_release_per_copy)),
            names{"storage_dedup"});
}
TEST(ActivationProfiles, AllPoliciesAtOncePassTheirProfile) {
  EXPECT_EQ(failing_properties(doubles::all_policies_hooks_implementation()), names{});
}
TEST(ActivationProfiles, TheSameCodeUnderTheDefaultProfileFailsWhereItDiffers) {
  // Declared with offloadkit's default profile, the current-device hooks fail two_devices and the
  // predicate hooks (which keep some tensors above the threshold) round_trip: each policy is
  // checked as declared, not assumed.
  auto current = doubles::current_device_hooks_implementation();
  current.caps.return_device = offloadkit::testing::activation_return_device::origin;
  EXPECT_EQ(failing_properties(current).count("two_devices"), 1u);
  auto predicate = doubles::predicate_hooks_implementation();
  predicate.caps.decision = offloadkit::testing::activation_offload_decision::size_threshold;
  EXPECT_EQ(failing_properties(predicate).count("round_trip"), 1u);
}

// Races that every property running a step may see by chance, since the host executor's streams
// are real threads, delays or not: races_with_delays, built to see them, must see each of them.
template <bug B>
check_outcome run_races() {
  host_executor ex;
  return offloadkit::activation::testing::run_named(
      offloadkit::testing::activation_battery(planted<B>()), "races_with_delays", ex, 200);
}
TEST(ActivationPlanted, RacesCatchSourceReleasedBeforeItsCopy) {
  OFFLOADKIT_SKIP_PLANTED_RACE();
  const check_outcome o = run_races<bug::early_release>();
  EXPECT_FALSE(o.passed) << "races_with_delays passed an offloader that gives the source back "
                            "before its copy has completed";
}
TEST(ActivationPlanted, RacesCatchUploadEventBeforeTheCopy) {
  OFFLOADKIT_SKIP_PLANTED_RACE();
  const check_outcome o = run_races<bug::early_upload_event>();
  EXPECT_FALSE(o.passed) << "races_with_delays passed an offloader that records the upload's "
                            "event before the upload";
}
TEST(ActivationPlanted, RacesCatchUnpackNotWaitingOnTheUpload) {
  OFFLOADKIT_SKIP_PLANTED_RACE();
  const check_outcome o = run_races<bug::unpack_no_wait>();
  EXPECT_FALSE(o.passed) << "races_with_delays passed an offloader whose unpack does not wait on "
                            "the upload";
}

}  // namespace
