// Unit checks of the activation offloaders on both executors: typed errors for bad input, the
// keep-on-device threshold, sources given back exactly once (also on destruction), and no new
// pinned or device allocation once a repeated training step has warmed the pools.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/activation/training_step.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/resources.hpp"
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

template <class Backend>
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

TYPED_TEST_P(ActivationUnit, DestructionGivesBackEverySourceOnce) {
  executor& ex = *this->ex_;
  stream s(ex);
  std::vector<buffer> bufs;
  for (int i = 0; i < 4; ++i) bufs.emplace_back(ex, memory_kind::device, 4096);
  for (const auto& make : implementations()) {
    std::vector<int> released(bufs.size(), 0);
    {
      offload_options o;
      o.keep_threshold = 2048;
      auto off = make(ex, o);
      for (std::size_t i = 0; i < bufs.size(); ++i) {
        const std::size_t bytes = i % 2 == 0 ? 4096 : 1024;  // offloaded and kept alike
        (void)off->pack({bufs[i].data(),
                         bytes,
                         0,
                         dtype::u8,
                         {static_cast<std::int64_t>(bytes)},
                         [&released, i] { ++released[i]; }},
                        s);
      }
    }
    for (std::size_t i = 0; i < released.size(); ++i) EXPECT_EQ(released[i], 1) << i;
  }
  s.synchronize();
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
                            BelowThresholdStaysOnTheDevice, DestructionGivesBackEverySourceOnce,
                            SteadyStateAllocatesNothingNew, NoOffloadBaselineIsExact);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ActivationUnit, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ActivationUnit, offloadkit::testing::cuda_backend);

}  // namespace
