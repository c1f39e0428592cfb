// Timeline analyses, checks and exporters on synthetic timelines, including planted programs that
// each check must reject.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "offloadkit/error.hpp"
#include "offloadkit/traces/analysis.hpp"
#include "offloadkit/traces/export.hpp"

namespace ot = offloadkit::traces;
using ot::memory_location;

namespace {

constexpr std::int64_t us = 1000;
constexpr std::int64_t ms = 1000 * us;
constexpr std::uint64_t mib = std::uint64_t{1} << 20;

/// Three steps of an offload program done right: compute on stream 7, D2H/H2D copies of pinned
/// memory on stream 13 hidden under the kernels, one pinned allocation before the first step.
ot::timeline good_program() {
  ot::timeline t;
  t.source = "synthetic";
  t.add_api(ot::api_kind::pinned_alloc, "cudaHostAlloc", 0, 50 * us, 64 * mib, 1);
  for (int s = 0; s < 3; ++s) {
    const std::int64_t t0 = 100 * us + std::int64_t{s} * 10 * ms;
    t.add_range("step " + std::to_string(s), t0, t0 + 9 * ms, 1);
    for (int k = 0; k < 8; ++k) {
      const std::int64_t k0 = t0 + k * ms;
      t.add_kernel("mlp_fwd", k0, k0 + ms, 7);
      // The copy for layer k runs while layer k+1 computes: fully inside a kernel.
      if (k < 7) {
        t.add_copy(memory_location::device, memory_location::pinned, 32 * mib, k0 + ms + 100 * us,
                   k0 + ms + 700 * us, 13);
      }
    }
    t.add_sync(ot::sync_kind::stream_wait_event, t0 + 8 * ms, t0 + 8 * ms + 1 * us, 1);
  }
  return t;
}

std::int64_t brute_union(const std::vector<ot::interval>& v, int n) {
  std::vector<bool> covered(static_cast<std::size_t>(n), false);
  for (auto i : v) {
    for (std::int64_t x = i.begin; x < i.end; ++x) covered[static_cast<std::size_t>(x)] = true;
  }
  std::int64_t c = 0;
  for (bool b : covered) c += b;
  return c;
}

}  // namespace

TEST(IntervalMath, UnionMergesOverlappingAndTouching) {
  auto u = ot::interval_union({{5, 10}, {0, 3}, {3, 4}, {8, 12}, {20, 20}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0], (ot::interval{0, 4}));
  EXPECT_EQ(u[1], (ot::interval{5, 12}));
  EXPECT_EQ(ot::total_length(u), 11);
}

RC_GTEST_PROP(IntervalMath, UnionAndIntersectionMatchPointCounting, ()) {
  auto gen_iv = rc::gen::map(rc::gen::pair(rc::gen::inRange(0, 200), rc::gen::inRange(0, 40)),
                             [](std::pair<int, int> p) {
                               return ot::interval{p.first, p.first + p.second};
                             });
  const auto a = *rc::gen::container<std::vector<ot::interval>>(gen_iv);
  const auto b = *rc::gen::container<std::vector<ot::interval>>(gen_iv);
  const auto ua = ot::interval_union(a);
  const auto ub = ot::interval_union(b);
  RC_ASSERT(ot::total_length(ua) == brute_union(a, 240));
  for (std::size_t i = 1; i < ua.size(); ++i) RC_ASSERT(ua[i - 1].end < ua[i].begin);
  // |A ∩ B| = |A| + |B| - |A ∪ B|.
  std::vector<ot::interval> both = a;
  both.insert(both.end(), b.begin(), b.end());
  RC_ASSERT(ot::total_length(ot::intersect(ua, ub)) ==
            brute_union(a, 240) + brute_union(b, 240) - brute_union(both, 240));
}

TEST(Analysis, GoodProgramPassesEveryCheck) {
  const auto t = good_program();
  const auto ov = ot::copy_compute_overlap(t);
  EXPECT_EQ(ov.copies, 21u);
  EXPECT_DOUBLE_EQ(ov.fraction(), 1.0);
  for (const auto& rep :
       {ot::check_copy_overlap(t, 0.9), ot::check_no_pageable_copies(t),
        ot::check_no_steady_state_pinned_allocations(t), ot::check_no_host_syncs_in_steps(t)}) {
    EXPECT_TRUE(rep.passed) << rep.name << ": " << rep.text;
  }
  EXPECT_EQ(ot::steps(t).size(), 3u);
}

// Planted: the copies run after the compute, serialized on the compute stream.
TEST(Analysis, SuiteCatchesSerializedCopies) {
  ot::timeline t;
  t.add_kernel("k", 0, 10 * ms, 7);
  t.add_copy(memory_location::device, memory_location::pinned, 256 * mib, 10 * ms, 15 * ms, 7);
  t.add_kernel("k", 15 * ms, 16 * ms, 7);
  t.add_copy(memory_location::pinned, memory_location::device, 64 * mib, 14 * ms, 17 * ms, 13);
  const auto ov = ot::copy_compute_overlap(t);
  EXPECT_EQ(ov.copy_ns, 7 * ms);        // [10, 17) ms
  EXPECT_EQ(ov.overlapped_ns, 1 * ms);  // [15, 16) ms
  const auto rep = ot::check_copy_overlap(t, 0.9);
  EXPECT_FALSE(rep.passed);
  EXPECT_NE(rep.text.find("14.3 %"), std::string::npos) << rep.text;
  EXPECT_NE(rep.text.find("most exposed"), std::string::npos) << rep.text;
  EXPECT_NE(rep.text.find("256.00 MiB"), std::string::npos) << rep.text;
}

TEST(Analysis, OverlapInsideWindowOnly) {
  ot::timeline t;
  t.add_kernel("k", 0, 10, 1);
  t.add_copy(memory_location::pinned, memory_location::device, 8, 5, 20, 2);
  ot::interval w{0, 10};
  const auto ov = ot::copy_compute_overlap(t, &w);
  EXPECT_EQ(ov.copy_ns, 5);
  EXPECT_EQ(ov.overlapped_ns, 5);
  EXPECT_EQ(ot::copy_compute_overlap(t).fraction(), 5.0 / 15.0);
}

TEST(Analysis, OverlapCountsOnlyTheSteps) {
  // A bandwidth probe before the first step (a copy with no kernel beside it) is set-up, not a
  // step: the check looks at the steps alone.
  ot::timeline t;
  t.add_copy(memory_location::device, memory_location::pinned, 256 * mib, 0, 50 * ms, 3);
  t.add_range("step 0", 100 * ms, 110 * ms, 1);
  t.add_kernel("k", 100 * ms, 110 * ms, 7);
  t.add_copy(memory_location::device, memory_location::pinned, 64 * mib, 101 * ms, 109 * ms, 13);
  const auto in_steps = ot::copy_compute_overlap_in_steps(t);
  EXPECT_EQ(in_steps.copy_ns, 8 * ms);
  EXPECT_EQ(in_steps.overlapped_ns, 8 * ms);
  EXPECT_EQ(in_steps.copies, 2u);
  EXPECT_LT(ot::copy_compute_overlap(t).fraction(), 0.2);  // the whole timeline, probe included
  EXPECT_TRUE(ot::check_copy_overlap(t, 0.9).passed);
}

TEST(Analysis, NoCopiesMeansNothingToHide) {
  ot::timeline t;
  t.add_kernel("k", 0, 10, 1);
  EXPECT_TRUE(ot::check_copy_overlap(t, 0.9).passed);
}

// Planted: a copy from pageable memory (the reference path of every feature).
TEST(Analysis, SuiteCatchesPageableCopy) {
  auto t = good_program();
  t.add_copy(memory_location::pageable, memory_location::device, 4 * mib, 25 * ms, 26 * ms, 13);
  const auto rep = ot::check_no_pageable_copies(t);
  EXPECT_FALSE(rep.passed);
  EXPECT_NE(rep.text.find("pageable -> device"), std::string::npos) << rep.text;
  EXPECT_NE(rep.text.find("4.00 MiB"), std::string::npos) << rep.text;
}

// Planted: a pinned allocation inside the second step (a cache that is not reused).
TEST(Analysis, SuiteCatchesSteadyStatePinnedAllocation) {
  auto t = good_program();
  t.add_api(ot::api_kind::pinned_alloc, "cudaHostAlloc", 11 * ms, 12 * ms, 2 * mib, 1);
  const auto rep = ot::check_no_steady_state_pinned_allocations(t);
  EXPECT_FALSE(rep.passed);
  EXPECT_NE(rep.text.find("cudaHostAlloc"), std::string::npos) << rep.text;
  // The same allocation inside the first step is warm-up and allowed.
  auto warm = good_program();
  warm.add_api(ot::api_kind::pinned_alloc, "cudaHostAlloc", 1 * ms, 2 * ms, 2 * mib, 1);
  EXPECT_TRUE(ot::check_no_steady_state_pinned_allocations(warm).passed);
}

// Planted: a stream synchronization in the middle of a step.
TEST(Analysis, SuiteCatchesHostSyncInStep) {
  auto t = good_program();
  t.add_sync(ot::sync_kind::stream, 15 * ms, 16 * ms, 1);
  t.add_sync(ot::sync_kind::context, 29 * ms + 500 * us, 29 * ms + 600 * us, 1);  // between steps
  const auto v = ot::host_syncs_in_steps(t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0]->sync, ot::sync_kind::stream);
  const auto rep = ot::check_no_host_syncs_in_steps(t);
  EXPECT_FALSE(rep.passed);
  EXPECT_NE(rep.text.find("sync stream"), std::string::npos) << rep.text;
}

// Event polls inside a step (an offloader checking its copies) are not host waits, and the kind
// survives the Chrome-trace round trip that `offloadkit analyze` reads back.
TEST(Analysis, EventPollsInStepAreNotHostSyncs) {
  auto t = good_program();
  for (int i = 0; i < 50; ++i)
    t.add_sync(ot::sync_kind::event_query, 15 * ms + i * us, 15 * ms + i * us + 200, 1);
  EXPECT_TRUE(ot::host_syncs_in_steps(t).empty());
  EXPECT_TRUE(ot::check_no_host_syncs_in_steps(t).passed);
  ot::write_chrome_trace(t, "event_polls.json");
  const auto back = ot::read_chrome_trace("event_polls.json");
  EXPECT_EQ(std::count_if(back.records.begin(), back.records.end(),
                          [](const ot::record& r) { return r.sync == ot::sync_kind::event_query; }),
            50);
}

TEST(Analysis, StepsFromMarkers) {
  ot::timeline t;
  t.add_kernel("k", 0, 100, 1);
  t.add_range("step", 10, 10);
  t.add_range("step", 40, 40);
  t.add_range("other", 50, 60);
  const auto s = ot::steps(t);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], (ot::interval{10, 40}));
  EXPECT_EQ(s[1], (ot::interval{40, 100}));
  t.add_api(ot::api_kind::pinned_alloc, "cudaMallocHost", 45, 46, 10);
  EXPECT_FALSE(ot::check_no_steady_state_pinned_allocations(t).passed);
}

TEST(Analysis, BandwidthPerDirectionAgainstLimit) {
  ot::timeline t;
  // 1 GiB D2H in 20 ms as two concurrent halves (the union, not the sum, is the busy time).
  t.add_copy(memory_location::device, memory_location::pinned, 512 * mib, 0, 20 * ms, 1);
  t.add_copy(memory_location::device, memory_location::pinned, 512 * mib, 0, 20 * ms, 2);
  t.add_copy(memory_location::pinned, memory_location::device, 100 * mib, 0, 10 * ms, 3);
  t.add_copy(memory_location::pinned, memory_location::device, 1024, 0, 1 * ms, 3);  // too small
  const auto bw = ot::bandwidth_by_direction(t);
  ASSERT_EQ(bw.size(), 2u);
  EXPECT_EQ(bw[0].direction, ot::copy_direction::h2d);
  EXPECT_EQ(bw[0].copies, 1u);
  EXPECT_NEAR(bw[1].gb_per_s(), 53.687, 0.01);
  EXPECT_TRUE(ot::check_bandwidth(t, ot::copy_direction::d2h, 55.0, 0.9).passed);
  // Planted: H2D at 10.5 GB/s against a 54.5 GB/s limit.
  const auto rep = ot::check_bandwidth(t, ot::copy_direction::h2d, 54.5, 0.9);
  EXPECT_FALSE(rep.passed);
  EXPECT_NE(rep.text.find("0.19 of the 54.50 GB/s limit"), std::string::npos) << rep.text;
  EXPECT_FALSE(ot::check_bandwidth(t, ot::copy_direction::d2d, 1000, 0.5).passed);
}

TEST(Analysis, SummaryMentionsEveryAnalysis) {
  const auto s = ot::summary(good_program(), {}, 54.5, 55.0);
  for (const char* w :
       {"overlap: 100.0 %", "pageable copies: 0", "steps: 3", "d2h", "of 55.0 GB/s"}) {
    EXPECT_NE(s.find(w), std::string::npos) << w << "\n" << s;
  }
}

RC_GTEST_PROP(ChromeTrace, RoundTripsEveryField, ()) {
  ot::timeline t;
  t.source = *rc::gen::element<std::string>("cupti", "synthetic", "a \"quoted\" name");
  t.dropped = *rc::gen::inRange<std::uint64_t>(0, 5);
  const int n = *rc::gen::inRange(0, 30);
  for (int i = 0; i < n; ++i) {
    ot::record r;
    r.kind = static_cast<ot::record_kind>(*rc::gen::inRange(0, 6));
    r.name = *rc::gen::element<std::string>("k<1>", "memcpy", "step 0", "", "a&b\x01");
    r.start_ns = *rc::gen::inRange<std::int64_t>(-5, std::int64_t{1} << 60);
    r.end_ns = r.start_ns + *rc::gen::inRange<std::int64_t>(0, 1 << 30);
    r.device = *rc::gen::inRange(-1, 8);
    r.stream = *rc::gen::inRange<std::int64_t>(-1, 100);
    r.thread = *rc::gen::arbitrary<std::uint64_t>();
    r.bytes = *rc::gen::arbitrary<std::uint64_t>();
    r.direction = static_cast<ot::copy_direction>(*rc::gen::inRange(0, 6));
    r.src = static_cast<ot::memory_location>(*rc::gen::inRange(0, 5));
    r.dst = static_cast<ot::memory_location>(*rc::gen::inRange(0, 5));
    r.sync = static_cast<ot::sync_kind>(*rc::gen::inRange(0, 5));
    r.api = static_cast<ot::api_kind>(*rc::gen::inRange(0, 6));
    t.records.push_back(r);
  }
  const auto back = ot::parse_chrome_trace(ot::to_chrome_trace(t));
  RC_ASSERT(back.source == t.source);
  RC_ASSERT(back.dropped == t.dropped);
  RC_ASSERT(back.records.size() == t.records.size());
  for (std::size_t i = 0; i < t.records.size(); ++i) {
    const auto &a = t.records[i], &b = back.records[i];
    RC_ASSERT(a.kind == b.kind);
    RC_ASSERT(a.name == b.name || a.name.find('\x01') != std::string::npos);
    RC_ASSERT(a.start_ns == b.start_ns);
    RC_ASSERT(a.end_ns == b.end_ns);
    RC_ASSERT(a.device == b.device);
    RC_ASSERT(a.stream == b.stream);
    RC_ASSERT(a.thread == b.thread);
    RC_ASSERT(a.bytes == b.bytes);
    RC_ASSERT(a.direction == b.direction);
    RC_ASSERT(a.src == b.src);
    RC_ASSERT(a.dst == b.dst);
    RC_ASSERT(a.sync == b.sync);
    RC_ASSERT(a.api == b.api);
  }
}

TEST(ChromeTrace, HasPerfettoShape) {
  const auto doc = ot::to_chrome_trace(good_program());
  EXPECT_NE(doc.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(doc.find("\"ph\":\"X\""), std::string::npos);
  EXPECT_NE(doc.find("\"process_name\""), std::string::npos);
  EXPECT_NE(doc.find("\"cat\":\"memcpy_d2h\""), std::string::npos);
}

TEST(ChromeTrace, RejectsBadInputWithPosition) {
  auto expect_error = [](const std::string& text, const std::string& fragment) {
    try {
      (void)ot::parse_chrome_trace(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const offloadkit::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error("{\"traceEvents\": [", "byte");
  expect_error("[]", "must be an object");
  expect_error("{\"traceEvents\": [], \"x\": 2e8435456}", "number overflow");  // found by fuzzing
  expect_error("{}", "/traceEvents must be an array");
  expect_error("{\"traceEvents\": [1]}", "traceEvents[0] must be an object");
  expect_error("{\"traceEvents\": [{\"args\": {\"kind\": \"kernel\", \"start_ns\": \"x\"}}]}",
               "traceEvents[0].args.start_ns must be an integer");
  expect_error("{\"traceEvents\": [{}, {\"args\": {\"kind\": \"warp\"}}]}",
               "traceEvents[1].args.kind = 'warp' is not one of");
  expect_error("{\"offloadkit\": {\"version\": 99}, \"traceEvents\": []}", "version = 99");
}

TEST(Svg, DrawsLanesLegendAndAxis) {
  auto t = good_program();
  t.add_kernel("template<a&b>", 0, 10, 7);
  t.add_copy(memory_location::pageable, memory_location::device, 1, 0, 10, 13);
  const auto svg = ot::to_svg(t, {800, 20, "good <program>"});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  for (const char* w : {"GPU 0 stream 7", "GPU 0 stream 13", "host thread 1", "copy D2H", "kernel",
                        "pageable copy", "pinned alloc", "NVTX range", " ms</text>",
                        "template&lt;a&amp;b&gt;", "good &lt;program&gt;"}) {
    EXPECT_NE(svg.find(w), std::string::npos) << w;
  }
  EXPECT_EQ(svg.find("<a&b>"), std::string::npos);
}

TEST(Svg, EmptyTimelineIsStillAPicture) {
  const auto svg = ot::to_svg(ot::timeline{});
  EXPECT_NE(svg.find("0 records"), std::string::npos);
}

namespace {

template <class Enum>
void expect_distinct_names(std::initializer_list<Enum> values, const char* what) {
  std::vector<std::string> names;
  for (Enum v : values) {
    const std::string n = ot::to_string(v);
    EXPECT_NE(n, "?") << what << " " << static_cast<int>(v) << " has no name";
    EXPECT_EQ(std::count(names.begin(), names.end(), n), 0) << what << " name '" << n << "' twice";
    names.push_back(n);
  }
}

}  // namespace

TEST(Timeline, EveryEnumValueHasItsOwnName) {
  using ot::api_kind;
  using ot::copy_direction;
  using ot::record_kind;
  using ot::sync_kind;
  expect_distinct_names({record_kind::kernel, record_kind::memcpy, record_kind::memset,
                         record_kind::sync, record_kind::range, record_kind::api},
                        "record_kind");
  expect_distinct_names({copy_direction::h2d, copy_direction::d2h, copy_direction::d2d,
                         copy_direction::h2h, copy_direction::p2p, copy_direction::unknown},
                        "copy_direction");
  expect_distinct_names(
      {memory_location::device, memory_location::pinned, memory_location::pageable,
       memory_location::managed, memory_location::unknown},
      "memory_location");
  expect_distinct_names({sync_kind::context, sync_kind::stream, sync_kind::event,
                         sync_kind::stream_wait_event, sync_kind::event_query, sync_kind::unknown},
                        "sync_kind");
  expect_distinct_names({api_kind::pinned_alloc, api_kind::pinned_free, api_kind::pinned_register,
                         api_kind::mem_map, api_kind::mem_unmap, api_kind::other},
                        "api_kind");
  EXPECT_STREQ(ot::to_string(static_cast<record_kind>(99)), "?");
  EXPECT_STREQ(ot::to_string(static_cast<memory_location>(99)), "?");
}

TEST(Timeline, CopyDirectionFollowsWhereEachSideLives) {
  using ot::copy_direction;
  using M = memory_location;
  EXPECT_EQ(ot::direction_of(M::pinned, M::device), copy_direction::h2d);
  EXPECT_EQ(ot::direction_of(M::pageable, M::managed), copy_direction::h2d);
  EXPECT_EQ(ot::direction_of(M::device, M::pageable), copy_direction::d2h);
  EXPECT_EQ(ot::direction_of(M::managed, M::device), copy_direction::d2d);
  EXPECT_EQ(ot::direction_of(M::pinned, M::pageable), copy_direction::h2h);
  EXPECT_EQ(ot::direction_of(M::unknown, M::device), copy_direction::unknown);
  EXPECT_EQ(ot::direction_of(M::pinned, M::unknown), copy_direction::unknown);
}

TEST(Timeline, MemsetTargetsTheDeviceAndSortKeepsTiesInOrder) {
  ot::timeline t;
  t.add_kernel("late", 50, 60, 7);
  const ot::record& m = t.add_memset(4096, 10, 20, 7, 1);
  EXPECT_EQ(m.kind, ot::record_kind::memset);
  EXPECT_EQ(m.dst, memory_location::device);
  EXPECT_EQ(m.bytes, 4096u);
  EXPECT_EQ(m.device, 1);
  EXPECT_TRUE(m.is_device_work());
  t.add_kernel("tie a", 10, 30, 8);
  t.add_kernel("tie b", 10, 40, 9);
  t.sort();
  ASSERT_EQ(t.records.size(), 4u);
  EXPECT_EQ(t.records[0].name, "memset");
  EXPECT_EQ(t.records[1].name, "tie a");
  EXPECT_EQ(t.records[2].name, "tie b");
  EXPECT_EQ(t.records[3].name, "late");
  EXPECT_EQ(t.begin_ns(), 10);
  EXPECT_EQ(t.end_ns(), 60);
}

TEST(ChromeTrace, EveryKindOfRecordRoundTrips) {
  ot::timeline t;
  t.source = "synthetic";
  t.add_kernel("k", 0, 10, 7);
  t.add_memset(512, 10, 12, 7);
  t.add_copy(memory_location::managed, memory_location::device, 64, 12, 20, 13);
  t.add_sync(ot::sync_kind::event_query, 20, 21, 3);
  t.add_range("step 0", 0, 30, 3);
  t.add_api(ot::api_kind::mem_unmap, "cuMemUnmap", 25, 26, 2 * mib, 3);
  const ot::timeline back = ot::parse_chrome_trace(ot::to_chrome_trace(t));
  ASSERT_EQ(back.records.size(), t.records.size());
  for (std::size_t i = 0; i < t.records.size(); ++i) {
    const auto& a = t.records[i];
    const auto& b = back.records[i];
    EXPECT_EQ(a.kind, b.kind) << i;
    EXPECT_EQ(a.name, b.name) << i;
    EXPECT_EQ(a.start_ns, b.start_ns) << i;
    EXPECT_EQ(a.end_ns, b.end_ns) << i;
    EXPECT_EQ(a.bytes, b.bytes) << i;
    EXPECT_EQ(a.direction, b.direction) << i;
    EXPECT_EQ(a.dst, b.dst) << i;
    EXPECT_EQ(a.sync, b.sync) << i;
    EXPECT_EQ(a.api, b.api) << i;
  }
}

TEST(Svg, LegendNamesEveryStyleAndTextIsEscaped) {
  ot::timeline t;
  t.add_memset(64, 0, 10, 7);
  t.add_copy(memory_location::pinned, memory_location::device, 64, 0, 10, 13);
  t.add_copy(memory_location::device, memory_location::device, 64, 10, 20, 13);
  t.add_copy(memory_location::unknown, memory_location::device, 64, 20, 30, 13);
  t.add_sync(ot::sync_kind::stream, 0, 5, 1);
  t.add_api(ot::api_kind::pinned_free, "cudaFreeHost", 5, 6, 64, 1);
  t.add_api(ot::api_kind::mem_map, "cuMemMap", 6, 7, 64, 1);
  t.add_api(ot::api_kind::other, "cudaSetDevice", 7, 8, 0, 1);
  t.add_kernel("say \"hi\"\x01", 0, 10, 7);
  const std::string svg = ot::to_svg(t);
  for (const char* w : {"memset", "copy H2D", "copy D2D", "copy other", "host sync", "pinned free",
                        "map/unmap", ">api<", "say &quot;hi&quot; "}) {
    EXPECT_NE(svg.find(w), std::string::npos) << w;
  }
  EXPECT_EQ(svg.find('\x01'), std::string::npos) << "a control character reached the XML";
}

TEST(Analysis, OffendersAreListedInTimeOrderWithTheirSizes) {
  ot::timeline t;
  // Added out of order: the report lists them by start time.
  t.add_copy(memory_location::pageable, memory_location::device, std::uint64_t{3} * 1024, 2 * ms,
             3 * ms, 13);
  t.add_copy(memory_location::device, memory_location::pageable, 100, 1 * ms, 2 * ms, 13);
  const auto v = ot::pageable_copies(t);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_LT(v[0]->start_ns, v[1]->start_ns);
  const auto report = ot::check_no_pageable_copies(t);
  EXPECT_FALSE(report.passed);
  const auto first = report.text.find("100 B");
  const auto second = report.text.find("3.00 KiB");
  ASSERT_NE(first, std::string::npos) << report.text;
  ASSERT_NE(second, std::string::npos) << report.text;
  EXPECT_LT(first, second) << report.text;

  // Without step ranges the whole timeline is one step, and the report says so.
  ot::timeline u;
  u.add_sync(ot::sync_kind::context, 5 * ms, 6 * ms, 2);
  u.add_sync(ot::sync_kind::stream, 1 * ms, 2 * ms, 2);
  const auto syncs = ot::host_syncs_in_steps(u);
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_LT(syncs[0]->start_ns, syncs[1]->start_ns);
  const auto r = ot::check_no_host_syncs_in_steps(u);
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.text.find("the whole timeline is one step"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("on host thread 2"), std::string::npos) << r.text;

  ot::timeline w;
  w.add_range("step 0", 0, ms, 1);
  w.add_api(ot::api_kind::pinned_register, "cudaHostRegister", 3 * ms, 4 * ms, 2048, 1);
  w.add_api(ot::api_kind::pinned_alloc, "cudaHostAlloc", 2 * ms, 3 * ms, 2048, 1);
  const auto allocs = ot::steady_state_pinned_allocations(w);
  ASSERT_EQ(allocs.size(), 2u);
  EXPECT_EQ(allocs[0]->name, "cudaHostAlloc");
  EXPECT_EQ(allocs[1]->name, "cudaHostRegister");
}
