// Unit checks of the activation offloaders on both executors: typed errors for bad input, the
// keep-on-device threshold, sources given back exactly once (also on destruction), and no new
// pinned or device allocation once a repeated training step has warmed the pools.
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

TYPED_TEST_P(ActivationUnit, DestructionGivesBackEverySourceOnce) {
  executor& ex = *this->ex_;
  stream s(ex);
  std::vector<buffer> bufs;
  bufs.reserve(4);
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

// Countdown fault injection (fail the Nth allocation, copy, record or wait for N = 0, 1, ...): a
// failed pack leaves the source with the caller, a failed unpack leaves the handle packed; after
// retrying every failed call, every tensor comes back exact and every source is given back once.
TYPED_TEST_P(ActivationUnit, FailedCallsLoseNothing) {
  executor& ex = *this->ex_;
  constexpr int n = 4;
  constexpr std::size_t bytes = 3000;
  stream s(ex);
  std::vector<buffer> src;
  src.reserve(n);
  for (int i = 0; i < n; ++i) src.emplace_back(ex, memory_kind::device, bytes);
  buffer host(ex, memory_kind::pageable, bytes);
  for (const auto& make : implementations()) {
    for (std::size_t nth = 0;; ++nth) {
      fault_injection_adaptor faults(ex);
      offload_options o;
      o.keep_threshold = 0;
      o.prefetch_bytes = 2 * bytes;
      std::vector<int> released(n, 0);
      std::size_t failures = 0;
      bool fired = false;
      {
        auto off = make(faults, o);
        faults.arm({op_kind::allocate_device, op_kind::allocate_pinned, op_kind::allocate_pageable,
                    op_kind::copy, op_kind::record, op_kind::wait},
                   nth);
        // Retries a failed call once with injection off: the first failure must leave it retryable.
        auto retry = [&](auto&& call) {
          try {
            return call();
          } catch (const std::exception&) {
            ++failures;
            faults.disarm();
            return call();
          }
        };
        std::vector<handle> handles;
        for (int i = 0; i < n; ++i) {
          ex.fill(src[i].data(), i + 1, bytes, s);
          tensor t{src[i].data(), bytes, 0, dtype::u8, {static_cast<std::int64_t>(bytes)}, nullptr};
          void* p = src[i].data();
          t.release = [&ex, &released, &s, i, p] {
            ++released[i];
            ex.fill(p, 0xEE, bytes, s);  // the owner reuses it at once
          };
          handles.push_back(retry([&] { return off->pack(t, s); }));
          off->forward_layer_end(i, s);
        }
        for (int i = n; i-- > 0;) {
          retry([&] {
            off->backward_layer_begin(i, s);
            return 0;
          });
          tensor back = retry([&] { return off->unpack(handles[i], s); });
          ASSERT_EQ(back.device, 0);
          ex.copy(host.data(), back.data, bytes, s);
          s.synchronize();
          for (std::size_t b = 0; b < bytes; ++b) {
            ASSERT_EQ(host.as<unsigned char>()[b], i + 1)
                << off->name() << " tensor " << i << " byte " << b << " after failing call " << nth;
          }
          back.release();
        }
        off->synchronize();
        fired = faults.fired();
      }
      s.synchronize();
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(released[i], 1) << "tensor " << i << " after failing call " << nth;
      }
      if (!fired) break;  // every instrumented call has been failed once
      EXPECT_LE(failures, 1u);
    }
  }
}

REGISTER_TYPED_TEST_SUITE_P(ActivationUnit, FailedCallsLoseNothing, BadInputThrowsTypedErrors,
                            BelowThresholdStaysOnTheDevice, DestructionGivesBackEverySourceOnce,
                            SteadyStateAllocatesNothingNew, NoOffloadBaselineIsExact);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ActivationUnit, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ActivationUnit, offloadkit::testing::cuda_backend);

}  // namespace
