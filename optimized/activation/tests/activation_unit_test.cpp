// Unit checks of the activation offloaders on both executors: typed errors for bad input, the
// keep-on-device threshold, and no new pinned or device allocation once a repeated training step
// has warmed the pools. Failed calls and sources given back exactly once (also on destruction)
// are the battery's fault_countdown property, which every implementation faces.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/adaptors.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/workloads/training_step.hpp"
#include "testing.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::activation;

using factory = std::function<std::unique_ptr<offloader>(executor&, offload_options)>;

std::vector<factory> implementations() {
  return {[](executor& ex, offload_options o) -> std::unique_ptr<offloader> {
            return std::make_unique<reference_offloader>(ex, o);
          },
          [](executor& ex, offload_options o) -> std::unique_ptr<offloader> {
            return std::make_unique<async_offloader>(ex, o);
          }};
}

// The fixture's name is the test suite's name in gtest's output and filters.
template <class Backend>
// NOLINTNEXTLINE(readability-identifier-naming)
class ActivationUnit : public ::testing::Test {
 protected:
  std::unique_ptr<executor> ex_ = Backend::make();
};
TYPED_TEST_SUITE_P(ActivationUnit);

TYPED_TEST_P(ActivationUnit, BadInputThrowsTypedErrors) {
  executor& ex = *this->ex_;
  stream s(ex);
  buffer b(ex, memory_kind::device, 64);
  for (const auto& make : implementations()) {
    auto off = make(ex, {});
    tensor t{b.data(), 64, 0, dtype::f32, {4, 4}, nullptr};
    tensor wrong_bytes = t;
    wrong_bytes.bytes = 60;
    EXPECT_THROW((void)off->pack(wrong_bytes, s), out_of_range) << off->name();
    tensor wrong_device = t;
    wrong_device.device = ex.device_count();
    EXPECT_THROW((void)off->pack(wrong_device, s), out_of_range) << off->name();
    tensor negative = t;
    negative.shape = {-4, -4};
    EXPECT_THROW((void)off->pack(negative, s), out_of_range) << off->name();
    EXPECT_THROW((void)off->unpack(handle{12345}, s), out_of_range) << off->name();
    const handle h = off->pack(t, s);
    tensor back = off->unpack(h, s);
    EXPECT_EQ(back.device, 0);
    EXPECT_THROW((void)off->unpack(h, s), out_of_range) << off->name() << ": unpacked twice";
    if (back.release) back.release();
    off->synchronize();
  }
  s.synchronize();
}

TYPED_TEST_P(ActivationUnit, BelowThresholdStaysOnTheDevice) {
  executor& ex = *this->ex_;
  stream s(ex);
  buffer b(ex, memory_kind::device, 32);
  for (const auto& make : implementations()) {
    offload_options o;
    o.keep_threshold = 33;
    auto off = make(ex, o);
    int released = 0;
    const handle h = off->pack({b.data(), 32, 0, dtype::u8, {32}, [&] { ++released; }}, s);
    off->synchronize();
    EXPECT_EQ(released, 0) << off->name() << ": a kept tensor's source stays with the offloader";
    tensor back = off->unpack(h, s);
    EXPECT_EQ(back.data, b.data()) << off->name();
    back.release();
    EXPECT_EQ(released, 1) << off->name();
    EXPECT_EQ(off->stats().kept, 1u) << off->name();
  }
}

TYPED_TEST_P(ActivationUnit, SteadyStateAllocatesNothingNew) {
  executor& ex = *this->ex_;
  std::vector<layer_spec> layers(4);
  for (auto& l : layers)
    l.saved = {{{64, 33}, dtype::bf16}, {{1000}, dtype::f32}, {{3}, dtype::u8}};
  training_step step(ex, layers, 32);
  async_offloader off(ex, offload_options{16, std::size_t{1} << 20, 2});
  for (int i = 0; i < 2; ++i) {
    const step_report rep = step.run(&off, 7 + i);
    ASSERT_TRUE(rep.ok()) << rep.describe();
  }
  const offload_stats warm = off.stats();
  const step_report rep = step.run(&off, 9);
  ASSERT_TRUE(rep.ok()) << rep.describe();
  const offload_stats after = off.stats();
  EXPECT_EQ(after.pinned_allocations, warm.pinned_allocations);
  EXPECT_EQ(after.device_allocations, warm.device_allocations);
  EXPECT_GT(after.offloaded_bytes, warm.offloaded_bytes);
}

TYPED_TEST_P(ActivationUnit, NoOffloadBaselineIsExact) {
  executor& ex = *this->ex_;
  std::vector<layer_spec> layers(3);
  for (auto& l : layers) l.saved = {{{17, 5}, dtype::f16}, {{}, dtype::i64}, {{0, 3}, dtype::f32}};
  training_step step(ex, layers, 32);
  const step_report rep = step.run(nullptr, 3);
  EXPECT_TRUE(rep.ok()) << rep.describe();
  EXPECT_EQ(rep.tensors, 9u);
}

REGISTER_TYPED_TEST_SUITE_P(ActivationUnit, BadInputThrowsTypedErrors,
                            BelowThresholdStaysOnTheDevice, SteadyStateAllocatesNothingNew,
                            NoOffloadBaselineIsExact);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ActivationUnit, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ActivationUnit, offloadkit::testing::cuda_backend);

}  // namespace
