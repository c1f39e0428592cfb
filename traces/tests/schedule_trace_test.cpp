// The NVTX collector (ranges, marks, domains, payloads from NVTX3 calls), the schedule events of
// the NVTX convention and their conversion back into a schedule, and the recorder that reads row
// counts from the device without a host synchronization, on both executors.
#include "offloadkit/traces/schedule_trace.hpp"

#include <gtest/gtest.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "offloadkit/resources.hpp"
#include "offloadkit/traces/async_recorder.hpp"
#include "offloadkit/traces/export.hpp"
#include "offloadkit/traces/nvtx_collector.hpp"
#include "testing.hpp"

namespace {

namespace ot = offloadkit::traces;
namespace nc = offloadkit::traces::nvtx_collector;
using offloadkit::executor;
using offloadkit::memory_kind;
using offloadkit::stash::stash_key;

std::vector<ot::record> named(const std::vector<ot::record>& all, const std::string& prefix) {
  std::vector<ot::record> out;
  for (const auto& r : all) {
    if (r.name.compare(0, prefix.size(), prefix) == 0) out.push_back(r);
  }
  return out;
}

// ---- the collector ----------------------------------------------------------------------------

/// NVTX hands its calls to the library NVTX_INJECTION64_PATH names, where set, before the static
/// injection these tests use.
bool nvtx_taken_by_a_tool() { return std::getenv("NVTX_INJECTION64_PATH") != nullptr; }

TEST(NvtxCollector, RangesMarksDomainsAndPayloads) {
  if (nvtx_taken_by_a_tool())
    GTEST_SKIP() << "NVTX_INJECTION64_PATH is set: NVTX goes to that tool";
  (void)nc::take();
  EXPECT_EQ(nvtxRangePushA("coll.outer"), 0);
  EXPECT_EQ(nvtxRangePushA("coll.inner"), 1);
  nvtxMarkA("coll.mark");
  EXPECT_EQ(nvtxRangePop(), 1);
  EXPECT_EQ(nvtxRangePop(), 0);
  ASSERT_TRUE(nc::attached()) << "NVTX did not call the static injection";

  nvtxDomainHandle_t d = nvtxDomainCreateA("coll.domain");
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = 7;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "coll.u64";
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = 1234567890123ull;
  nvtxDomainMarkEx(d, &a);
  a.message.ascii = "coll.i32";
  a.payloadType = NVTX_PAYLOAD_TYPE_INT32;
  a.payload.iValue = -5;
  nvtxDomainRangePushEx(d, &a);
  nvtxDomainRangePop(d);
  a.message.ascii = "coll.float";
  a.payloadType = NVTX_PAYLOAD_TYPE_FLOAT;
  a.payload.fValue = 0.5F;
  nvtxDomainMarkEx(d, &a);
  a.payloadType = 0;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = nvtxDomainRegisterStringA(d, "coll.registered");
  nvtxDomainMarkEx(d, &a);
  nvtxMarkW(L"coll.w\u00e9");
  // A start/end range may end on another thread.
  const nvtxRangeId_t id = nvtxRangeStartA("coll.across");
  std::thread([id] { nvtxRangeEnd(id); }).join();
  EXPECT_EQ(nvtxRangePop(), -1) << "a pop without a push";

  const auto got = named(nc::take(), "coll.");
  std::vector<std::string> names;
  names.reserve(got.size());
  for (const auto& r : got) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"coll.mark", "coll.inner", "coll.outer", "coll.u64",
                                             "coll.i32", "coll.float", "coll.registered",
                                             "coll.w\xc3\xa9", "coll.across"}));
  ASSERT_EQ(got.size(), 9u);
  EXPECT_EQ(got[0].start_ns, got[0].end_ns) << "a mark is a range of no length";
  EXPECT_LE(got[2].start_ns, got[1].start_ns);
  EXPECT_GE(got[2].end_ns, got[1].end_ns) << "the outer range holds the inner one";
  EXPECT_EQ(got[0].domain, "");
  EXPECT_EQ(got[3].domain, "coll.domain");
  EXPECT_EQ(got[3].category, 7u);
  EXPECT_EQ(got[3].payload, ot::payload_type::u64);
  EXPECT_EQ(got[3].payload_u64, 1234567890123ull);
  EXPECT_EQ(got[4].payload, ot::payload_type::i64);
  EXPECT_EQ(got[4].payload_i64, -5);
  EXPECT_EQ(got[5].payload, ot::payload_type::f64);
  EXPECT_DOUBLE_EQ(got[5].payload_f64, 0.5);
  EXPECT_EQ(got[6].payload, ot::payload_type::none);
  EXPECT_EQ(nc::open_ranges(), 0u);
}

TEST(NvtxCollector, ThreadsNestIndependently) {
  if (nvtx_taken_by_a_tool())
    GTEST_SKIP() << "NVTX_INJECTION64_PATH is set: NVTX goes to that tool";
  (void)nc::take();
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 100; ++i) {
        nvtxRangePushA(("thr." + std::to_string(t)).c_str());
        nvtxMarkA("thr.mark");
        nvtxRangePop();
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto got = named(nc::take(), "thr.");
  EXPECT_EQ(got.size(), 800u);
  for (const auto& r : got) {
    if (r.name == "thr.mark") continue;
    const auto marks_inside = std::count_if(got.begin(), got.end(), [&](const ot::record& m) {
      return m.name == "thr.mark" && m.thread == r.thread && m.start_ns >= r.start_ns &&
             m.start_ns <= r.end_ns;
    });
    EXPECT_GE(marks_inside, 1) << r.name << " holds its own thread's mark";
  }
}

// ---- the convention and its conversion ---------------------------------------------------------

ot::schedule_shape small_shape() {
  ot::schedule_shape s;
  s.name = "a step, with spaces";
  s.pipeline_size = 4;
  s.pipeline_rank = 1;
  s.virtual_stages = 1;
  s.layers = 2;
  s.microbatches = 2;
  s.row_bytes = {256, 512};
  s.max_rows = 300;
  s.page_rows = 16;
  return s;
}

ot::record mark(std::string text, std::int64_t t, std::string domain = "offloadkit") {
  ot::record r;
  r.kind = ot::record_kind::range;
  r.name = std::move(text);
  r.start_ns = r.end_ns = t;
  r.domain = std::move(domain);
  return r;
}

/// The events of one microbatch-major step of small_shape(): F0 F1 B0 B1.
std::vector<std::string> small_events(const std::vector<std::uint64_t>& rows) {
  std::vector<std::string> ev = {ot::schedule_event_text(small_shape())};
  std::size_t i = 0;
  for (std::uint32_t mb = 0; mb < 2; ++mb) {
    for (std::uint32_t l = 0; l < 2; ++l) ev.push_back(ot::stash_event_text({0, l, mb}, rows[i++]));
  }
  for (std::uint32_t mb = 0; mb < 2; ++mb) {
    for (std::uint32_t l = 2; l-- > 0;) ev.push_back(ot::restore_event_text({0, l, mb}));
  }
  ev.push_back(ot::pools_event_text(10, 20));
  return ev;
}

ot::timeline timeline_of(const std::vector<std::string>& events, std::int64_t t0 = 1000) {
  ot::timeline t;
  for (std::size_t i = 0; i < events.size(); ++i) {
    t.records.push_back(mark(events[i], t0 + static_cast<std::int64_t>(i)));
  }
  return t;
}

ot::schedule_file recorded_small(const std::vector<std::uint64_t>& rows) {
  ot::schedule_recorder rec(small_shape());
  std::size_t i = 0;
  for (std::uint32_t mb = 0; mb < 2; ++mb) {
    for (std::uint32_t l = 0; l < 2; ++l) {
      rec.record_stash({0, l, mb});
      rec.set_rows({0, l, mb}, rows[i++]);
    }
  }
  for (std::uint32_t mb = 0; mb < 2; ++mb) {
    for (std::uint32_t l = 2; l-- > 0;) rec.record_restore({0, l, mb});
  }
  rec.set_pools(10, 20);
  return rec.finish();
}

TEST(ScheduleTrace, EventsTurnBackIntoTheRecordedSchedule) {
  const std::vector<std::uint64_t> rows = {0, 300, 17, 64};
  const auto f = ot::schedule_from_timeline(timeline_of(small_events(rows)));
  EXPECT_EQ(ot::to_json(f), ot::to_json(recorded_small(rows)));
  EXPECT_EQ(f.name, "a step, with spaces");
  EXPECT_EQ(f.work.layer_row_bytes, (std::vector<std::uint64_t>{256, 512}));
}

TEST(ScheduleTrace, DefaultDomainCountsOtherDomainsAndRangesDoNot) {
  auto t = timeline_of(small_events({1, 2, 3, 4}));
  for (auto& r : t.records) r.domain = "";  // torch.cuda.nvtx.mark has no domain
  t.records.push_back(mark(ot::restore_event_text({0, 0, 1}), 1002, "someone.else"));
  auto range = mark(ot::restore_event_text({0, 0, 1}), 1003);
  range.end_ns += 5;  // a range, not a mark
  t.records.push_back(range);
  EXPECT_EQ(ot::to_json(ot::schedule_from_timeline(t)), ot::to_json(recorded_small({1, 2, 3, 4})));
}

TEST(ScheduleTrace, RecordingsAreCountedAndPicked) {
  auto ev = small_events({1, 2, 3, 4});
  const auto second = small_events({5, 6, 7, 8});
  ev.insert(ev.end(), second.begin(), second.end());
  const auto t = timeline_of(ev);
  EXPECT_EQ(ot::schedule_recordings(t), 2u);
  EXPECT_EQ(ot::to_json(ot::schedule_from_timeline(t, 1)),
            ot::to_json(recorded_small({5, 6, 7, 8})));
  try {
    (void)ot::schedule_from_timeline(t, 2);
    FAIL() << "recording 2 of 2";
  } catch (const offloadkit::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("recording 2 is outside [0, 2)"), std::string::npos)
        << e.what();
  }
  try {
    (void)ot::schedule_from_timeline(ot::timeline{});
    FAIL() << "no recording";
  } catch (const offloadkit::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no recording"), std::string::npos) << e.what();
  }
}

/// The event index and the reason of the error a broken event list gives.
void expect_event_error(const std::vector<std::string>& events, std::size_t index,
                        const std::string& reason,
                        const std::vector<ot::payload_type>& payloads = {},
                        std::uint64_t payload = 0) {
  auto t = timeline_of(events);
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    t.records[i].payload = payloads[i];
    t.records[i].payload_u64 = payload;
  }
  try {
    (void)ot::schedule_from_timeline(t);
    FAIL() << "expected an error at event " << index << " (" << reason << ")";
  } catch (const ot::trace_schedule_error& e) {
    EXPECT_EQ(e.event(), index) << e.what();
    EXPECT_EQ(e.text(), events[index]) << e.what();
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

TEST(ScheduleTrace, FirstEventThatCannotBePlacedIsNamed) {
  const auto good = small_events({1, 2, 3, 4});
  struct bad_event {
    std::size_t index;
    const char* text;
    const char* reason;
  };
  for (const bad_event& b : std::initializer_list<bad_event>{
           {2, "offloadkit.stash vp=0 layer=1 mb=0 rows=2 color=red", "unknown field color="},
           {3, "offloadkit.stash vp=0 layer=0 mb=1", "the field rows= is missing"},
           {1, "offloadkit.stash vp=0 layer=2 mb=0 rows=1", "layer = 2 is outside [0, 2)"},
           {4, "offloadkit.stash vp=0 layer=1 mb=1 rows=301",
            "rows = 301 is outside [0, max_rows = 300]"},
           {1, "offloadkit.stash vp=0 layer=0 mb=0 rows=-1",
            "rows = '-1' is not a non-negative integer"},
           {5, "offloadkit.frobnicate", "unknown event 'offloadkit.frobnicate'"},
           {0, "offloadkit.schedule version=2", "version = 2 is not supported"},
       }) {
    auto ev = good;
    ev[b.index] = b.text;
    expect_event_error(ev, b.index, b.reason);
  }
  auto ev = good;
  ev.insert(ev.begin() + 1, "offloadkit.restore vp=0 layer=0 mb=1");  // before its stash
  expect_event_error(ev, 1, "restore");
  // The payload is the device's value: it must agree with the text.
  expect_event_error(good, 1, "the payload (9) disagrees with rows = 1",
                     {ot::payload_type::none, ot::payload_type::u64}, 9);
}

TEST(ScheduleTrace, ConvertedFileSurvivesTheChromeTraceRoundTrip) {
  // The events as a capture writes them and `schedule-from-trace` reads them back.
  const std::vector<std::uint64_t> rows = {5, 0, 299, 16};
  auto t = timeline_of(small_events(rows));
  for (auto& r : t.records) {
    if (r.name.rfind("offloadkit.stash", 0) == 0) {
      r.payload = ot::payload_type::u64;
      r.payload_u64 = std::stoull(r.name.substr(r.name.rfind('=') + 1));
    }
  }
  const auto back = ot::parse_chrome_trace(ot::to_chrome_trace(t));
  EXPECT_EQ(ot::to_json(ot::schedule_from_timeline(back)), ot::to_json(recorded_small(rows)));
}

// ---- the recorder without host synchronization, on both executors ----------------------------

template <class Backend>
// NOLINTNEXTLINE(readability-identifier-naming)
class AsyncRecorder : public ::testing::Test {
 protected:
  std::unique_ptr<executor> ex_ = Backend::make();
};
TYPED_TEST_SUITE_P(AsyncRecorder);

/// Row counts as a stash kernel leaves them: in device memory, written in stream order.
struct device_rows {
  device_rows(executor& ex, std::size_t n)
      : ex(ex), dev(ex, memory_kind::device, n * 4), host(ex, memory_kind::pinned, n * 4) {}
  void set(const std::vector<std::uint32_t>& v, offloadkit::stream_ref s) {
    std::memcpy(host.data(), v.data(), v.size() * 4);
    ex.copy(dev.data(), host.data(), v.size() * 4, s);
  }
  [[nodiscard]] const std::uint32_t* at(std::size_t i) const { return dev.as<std::uint32_t>() + i; }
  executor& ex;
  offloadkit::buffer dev, host;
};

TYPED_TEST_P(AsyncRecorder, DeviceRowCountsMatchAHostRecordingAndTheTrace) {
  executor& ex = *this->ex_;
  offloadkit::stream s(ex);
  std::mt19937 rng(offloadkit::testing::seed());
  std::vector<std::uint32_t> rows(4);
  for (auto& r : rows) r = std::uniform_int_distribution<std::uint32_t>(0, 300)(rng);
  device_rows dr(ex, 4);
  dr.set(rows, s);
  (void)nc::take();
  ot::async_schedule_recorder rec(small_shape(), ex);
  std::size_t i = 0;
  rec.record_stash({0, 0, 0}, dr.at(i++), s);
  rec.record_stash({0, 1, 0}, dr.at(i++), s);
  rec.record_stashes({0, 0, 1}, dr.at(i), 2, s);  // a layer's counts in one copy
  for (std::uint32_t mb = 0; mb < 2; ++mb) {
    for (std::uint32_t l = 2; l-- > 0;) rec.record_restore({0, l, mb});
  }
  rec.set_pools(10, 20);
  EXPECT_EQ(rec.pending(), 9u);
  ex.synchronize(s);  // the job's own synchronization at the end of its step
  EXPECT_EQ(rec.resolve(), 9u);
  EXPECT_EQ(rec.pending(), 0u);
  const std::vector<std::uint64_t> rows64(rows.begin(), rows.end());
  EXPECT_EQ(ot::to_json(rec.finish()), ot::to_json(recorded_small(rows64)));
  // The NVTX marks it wrote turn back into the same schedule. A tool that sets
  // NVTX_INJECTION64_PATH (compute-sanitizer does) takes NVTX's calls instead of the collector.
  if (!nc::attached()) {
    std::printf("note: NVTX calls go to %s, not to the collector: the marks are not checked\n",
                std::getenv("NVTX_INJECTION64_PATH") != nullptr
                    ? std::getenv("NVTX_INJECTION64_PATH")
                    : "another tool");
    return;
  }
  ot::timeline t;
  t.records = nc::take();
  EXPECT_EQ(ot::to_json(ot::schedule_from_timeline(t)), ot::to_json(rec.finish()));
}

TYPED_TEST_P(AsyncRecorder, ResolveBeforeTheCopiesLandIsRefusedAndLosesNothing) {
  executor& ex = *this->ex_;
  offloadkit::stream s(ex);
  device_rows dr(ex, 4);
  dr.set({3, 4, 5, 6}, s);
  ex.synchronize(s);
  offloadkit::stream slow(ex);
  std::atomic<bool> go{false};
  // The copies wait behind a host function that holds the stream until released.
  ex.host_function(
      [&go] {
        while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      slow);
  ot::async_schedule_recorder rec(small_shape(), ex, {4, false});
  // Released however this test ends (before the recorder's ring goes), so that the stream's
  // worker finishes.
  struct release {
    std::atomic<bool>& go;
    ~release() { go = true; }
  } released{go};
  rec.record_stash({0, 0, 0}, std::uint64_t{7});
  rec.record_stash({0, 1, 0}, dr.at(1), slow);
  rec.record_restore({0, 1, 0});
  try {
    (void)rec.resolve();
    ADD_FAILURE() << "resolve() read a slot its copy had not written";
  } catch (const offloadkit::state_error& e) {
    EXPECT_NE(std::string(e.what()).find("key (0, 1, 0) has not reached the host"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(rec.pending(), 2u) << "the event before it is resolved, it and later ones wait";
  go = true;
  ex.synchronize(slow);
  EXPECT_EQ(rec.resolve(), 2u);
  EXPECT_EQ(rec.steps_recorded(), 3u);
}

TYPED_TEST_P(AsyncRecorder, FullRingIsAStateErrorNotAWait) {
  executor& ex = *this->ex_;
  offloadkit::stream s(ex);
  device_rows dr(ex, 4);
  dr.set({1, 2, 3, 4}, s);
  ot::async_schedule_recorder rec(small_shape(), ex, {2, false});
  rec.record_stash({0, 0, 0}, dr.at(0), s);
  rec.record_stash({0, 1, 0}, dr.at(1), s);
  EXPECT_THROW(rec.record_stash({0, 0, 1}, dr.at(2), s), offloadkit::state_error);
  ex.synchronize(s);
  EXPECT_EQ(rec.resolve(), 2u);
  rec.record_stashes({0, 0, 1}, dr.at(2), 2, s);  // the ring's slots came back; one copy
  ex.synchronize(s);
  EXPECT_EQ(rec.resolve(), 2u);
  EXPECT_THROW(rec.record_stashes({0, 1, 0}, dr.at(0), 2, s), offloadkit::out_of_range)
      << "layers 1 and 2 of a 2-layer shape";
  EXPECT_THROW(rec.record_stash({0, 2, 0}, dr.at(0), s), offloadkit::out_of_range);
  EXPECT_THROW(rec.record_stash({0, 0, 0}, nullptr, s), offloadkit::logic_error);
  EXPECT_THROW(ot::async_schedule_recorder(small_shape(), ex, {0, false}),
               offloadkit::out_of_range);
}

TYPED_TEST_P(AsyncRecorder, RecordsUnderStreamCaptureAndEachReplayRefreshes) {
  executor& ex = *this->ex_;
  offloadkit::stream s(ex);
  device_rows dr(ex, 1);
  dr.set({11}, s);
  ex.synchronize(s);
  auto shape = small_shape();
  shape.layers = 1;
  shape.microbatches = 1;
  shape.row_bytes = {256};
  ot::async_schedule_recorder rec(shape, ex, {4, false});
  ex.begin_capture(s);
  rec.record_stash({0, 0, 0}, dr.at(0), s);
  const auto g = ex.end_capture(s);
  rec.record_restore({0, 0, 0});
  dr.set({42}, s);
  ex.replay(g, s);
  ex.synchronize(s);
  EXPECT_EQ(rec.resolve(), 2u);
  ex.destroy_graph(g);
  EXPECT_EQ(rec.finish().work.rows.front().rows, 42u) << "the replay's count, not the capture's";
}

REGISTER_TYPED_TEST_SUITE_P(AsyncRecorder, DeviceRowCountsMatchAHostRecordingAndTheTrace,
                            ResolveBeforeTheCopiesLandIsRefusedAndLosesNothing,
                            FullRingIsAStateErrorNotAWait,
                            RecordsUnderStreamCaptureAndEachReplayRefreshes);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, AsyncRecorder, offloadkit::testing::host_backend);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, AsyncRecorder, offloadkit::testing::cuda_backend);

}  // namespace
