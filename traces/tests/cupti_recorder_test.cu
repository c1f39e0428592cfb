// The CUPTI recorder on a real GPU (suite names carry "Cuda": ctest runs them in the gpu entry and
// reports them skipped where no GPU is usable): kernels, copies with their pinned or pageable
// sides, memsets, synchronizations, NVTX ranges and pinned allocations reach the timeline.
#include <gtest/gtest.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <string>
#include <vector>

#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/launch.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/traces/analysis.hpp"
#include "offloadkit/traces/cupti_recorder.hpp"
#include "offloadkit/traces/export.hpp"

namespace ot = offloadkit::traces;

namespace {

struct spin_body {
  float* data;
  int iterations;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    float x = data[i];
    for (int k = 0; k < iterations; ++k) x = x * 0.999f + 0.001f;
    data[i] = x;
  }
};

std::size_t count(const ot::timeline& t, ot::record_kind k) {
  return static_cast<std::size_t>(std::count_if(t.records.begin(), t.records.end(),
                                                [k](const ot::record& r) { return r.kind == k; }));
}

/// Why the recorder cannot run here (no usable GPU, or no CUPTI); empty when it can.
std::string recorder_unusable() {
  std::string why = offloadkit::cuda_unavailable_reason();
  if (!why.empty()) return why;
  why = ot::cupti_recorder::unavailable_reason();
  return why.empty() ? why : "skipped: " + why;
}

}  // namespace

TEST(CudaCuptiRecorder, RecordsKernelsCopiesSyncsRangesAndPinnedAllocations) {
  if (const std::string why = recorder_unusable(); !why.empty()) GTEST_SKIP() << why;
  ot::cupti_recorder rec;
  rec.start();
  {
    offloadkit::cuda_executor ex;
    constexpr std::size_t n = 1 << 22, bytes = n * sizeof(float);
    offloadkit::stream compute(ex), copy(ex);
    nvtxRangePushA("step 0");
    offloadkit::buffer dev(ex, offloadkit::memory_kind::device, bytes);
    offloadkit::buffer dev2(ex, offloadkit::memory_kind::device, bytes);
    offloadkit::buffer pinned(ex, offloadkit::memory_kind::pinned, bytes);
    std::vector<float> pageable(n, 1.0f);
    ex.fill(dev.data(), 0, bytes, compute);
    offloadkit::launch(ex, n, spin_body{dev.as<float>(), 2000}, "spin", compute);
    ex.copy(pinned.data(), dev2.data(), bytes, copy);    // D2H from pinned, beside the kernel
    ex.copy(dev2.data(), pageable.data(), bytes, copy);  // H2D from pageable
    compute.synchronize();
    copy.synchronize();
    nvtxRangePop();
  }
  rec.stop();
  const ot::timeline t = rec.take();
  EXPECT_EQ(t.dropped, 0u);
  EXPECT_GE(count(t, ot::record_kind::kernel), 1u);
  EXPECT_GE(count(t, ot::record_kind::memset), 1u);
  EXPECT_GE(count(t, ot::record_kind::sync), 1u);
  EXPECT_GE(count(t, ot::record_kind::range), 1u) << "NVTX ranges need NVTX_INJECTION64_PATH";
  const auto has = [&](auto pred) { return std::any_of(t.records.begin(), t.records.end(), pred); };
  EXPECT_TRUE(has([](const ot::record& r) {
    return r.kind == ot::record_kind::memcpy && r.direction == ot::copy_direction::d2h &&
           r.dst == ot::memory_location::pinned && r.bytes == (std::size_t{1} << 24);
  }));
  EXPECT_TRUE(has([](const ot::record& r) {
    return r.kind == ot::record_kind::memcpy && r.src == ot::memory_location::pageable;
  }));
  EXPECT_TRUE(has([](const ot::record& r) {
    return r.kind == ot::record_kind::api && r.api == ot::api_kind::pinned_alloc &&
           r.bytes == (std::size_t{1} << 24);
  }));
  // The pageable copy is what the check is for; the report names it.
  EXPECT_FALSE(ot::check_no_pageable_copies(t).passed);
  std::printf("%s\n", ot::summary(t).c_str());
  ot::write_chrome_trace(t, "cupti_recorder_test.json");
  ot::write_svg(t, "cupti_recorder_test.svg");
  EXPECT_EQ(ot::read_chrome_trace("cupti_recorder_test.json").records.size(), t.records.size());
}

// CUPTI reports an event poll (cudaEventQuery) as an event synchronization; the recorder tells it
// apart, so that an offloader polling its copies is not charged with host waits inside a step.
TEST(CudaCuptiRecorder, EventPollsAreNotHostWaits) {
  if (const std::string why = recorder_unusable(); !why.empty()) GTEST_SKIP() << why;
  ot::cupti_recorder rec;
  rec.start();
  int polls = 0;
  {
    offloadkit::cuda_executor ex;
    offloadkit::stream s(ex);
    offloadkit::buffer dev(ex, offloadkit::memory_kind::device, 4096);
    const offloadkit::event_ref e = ex.create_event(0);
    nvtxRangePushA("step 0");
    offloadkit::launch(ex, 1, spin_body{dev.as<float>(), 200000}, "spin", s);
    ex.record(e, s);
    for (; polls < 200 && !ex.ready(e); ++polls) {
    }
    ex.synchronize(e);
    nvtxRangePop();
    ex.destroy_event(e);
  }
  rec.stop();
  const ot::timeline t = rec.take();
  std::size_t queries = 0;
  for (const auto& r : t.records) {
    if (r.kind == ot::record_kind::sync && r.sync == ot::sync_kind::event_query) ++queries;
  }
  EXPECT_GE(polls, 1) << "the spin kernel ended before the first poll";
  EXPECT_GE(queries, 1u) << polls << " polls, none recorded as event_query";
  const auto waits = ot::host_syncs_in_steps(t);
  ASSERT_EQ(waits.size(), 1u) << "only the one synchronize() is a host wait";
  EXPECT_EQ(waits[0]->sync, ot::sync_kind::event);
}

TEST(CudaCuptiRecorder, SecondRecorderIsRefused) {
  if (!ot::cupti_recorder::unavailable_reason().empty()) GTEST_SKIP();
  if (!offloadkit::cuda_unavailable_reason().empty()) GTEST_SKIP();
  ot::cupti_recorder a, b;
  a.start();
  EXPECT_THROW(b.start(), offloadkit::state_error);
  a.stop();
}

// Runs everywhere: without CUPTI the reason names what was tried; here it just must not throw.
TEST(CuptiRecorderAvailability, ReasonIsClear) {
  const std::string r = ot::cupti_recorder::unavailable_reason();
  if (!r.empty()) {
    EXPECT_NE(r.find("CUPTI"), std::string::npos) << r;
  } else {
    EXPECT_NE(ot::cupti_recorder::library_path().find("cupti"), std::string::npos);
  }
}
