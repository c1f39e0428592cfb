// Tests of what only the host back end does with streams and threads: launches, cross-thread
// event ordering, capture and replay that re-read memory at replay time, sticky stream errors, and
// use from several host threads. Its memory (faults, capacity, accounting, managed memory) is
// host_executor_memory_test.cpp; the checks shared by both back ends are the executor battery in
// core/tests/.
#include "offloadkit/host_executor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cuda/atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "host_executor_test_support.hpp"
#include "offloadkit/adaptors.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/launch.hpp"
#include "offloadkit/resources.hpp"

namespace ok = offloadkit;

namespace {

using namespace ::offloadkit::testing::host_executor_test;

// Launch bodies (trivially copyable, device pointers by value).
struct count_indices {
  int* counts;
  unsigned long long* sum;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    cuda::atomic_ref<int, cuda::thread_scope_device>(counts[i]).fetch_add(1);
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(*sum).fetch_add(i);
  }
};

/// The planted bug: the count is read once on the host and baked into the body.
struct mark_first_rows_baked {
  int count;
  int* out;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    out[i] = static_cast<int>(i) < count ? 1 : 0;
  }
};

struct throw_at_seven {
  void operator()(std::size_t i) const {
    if (i == 7) throw std::out_of_range("index 7 is cursed");
  }
};

int sum_of(const int* p, std::size_t n) {
  int s = 0;
  for (std::size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

}  // namespace

// ---- launches ----------------------------------------------------------------------------------

TEST(HostExecutor, LaunchRunsEveryIndexExactlyOnce) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{10007}}) {
    ok::buffer counts(ex, ok::memory_kind::device, n * sizeof(int));
    ok::buffer sum(ex, ok::memory_kind::device, sizeof(unsigned long long));
    ex.fill(counts.data(), 0, counts.size(), s);
    ex.fill(sum.data(), 0, sum.size(), s);
    ok::launch(ex, n, count_indices{counts.as<int>(), sum.as<unsigned long long>()}, s);
    s.synchronize();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(counts.as<int>()[i], 1) << "index " << i;
    EXPECT_EQ(*sum.as<unsigned long long>(), n * (n - 1) / 2);
  }
  ok::launch(ex, 0, count_indices{nullptr, nullptr}, s);  // an empty launch is a no-op
  s.synchronize();
}

TEST(HostExecutor, TheDefaultStreamOfEachDeviceWorks) {
  ok::host_executor ex(small_options());
  ok::buffer a(ex, ok::memory_kind::device, 64, 1);
  ex.fill(a.data(), 7, 64, ok::stream_ref{nullptr, 1});
  ex.synchronize(ok::stream_ref{nullptr, 1});
  EXPECT_EQ(a.as<unsigned char>()[63], 7);
  EXPECT_THROW(ex.synchronize(ok::stream_ref{nullptr, 2}), ok::out_of_range);
}

// ---- events across streams --------------------------------------------------------------------

TEST(HostExecutor, AnEventWaitOrdersWorkAcrossStreams) {
  ok::host_executor ex(small_options());
  ok::stream a(ex);
  ok::stream b(ex);
  ok::event e(ex);
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
  // The producer sleeps, so a consumer that does not wait would run first.
  ex.host_function(
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        flag.store(1);
      },
      a);
  ex.record(e, a);
  ex.wait(e, b);
  ex.host_function([&] { seen.store(flag.load()); }, b);
  b.synchronize();
  EXPECT_EQ(seen.load(), 1);
  a.synchronize();

  // The same with real memory: the fill on a is visible to the copy on b.
  ok::buffer src(ex, ok::memory_kind::device, 4096);
  ok::buffer dst(ex, ok::memory_kind::pinned, 4096);
  ex.fill(dst.data(), 0, 4096, b);
  ex.host_function([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, a);
  ex.fill(src.data(), 0x3c, 4096, a);
  ex.record(e, a);
  ex.wait(e, b);
  ex.copy(dst.data(), src.data(), 4096, b);
  b.synchronize();
  EXPECT_EQ(dst.as<unsigned char>()[4095], 0x3c);
  a.synchronize();
}

TEST(HostExecutor, TheSuiteCatchesAMissingWait) {
  ok::host_executor ex(small_options());
  ok::stream a(ex);
  ok::stream b(ex);
  ok::event e(ex);
  gate g;
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
  auto producer = [&, f = g.future] {
    f.wait();
    flag.store(1);
  };
  ex.host_function(producer, a);
  ex.record(e, a);
  // Missing: ex.wait(e, b). The consumer runs while the producer is still held.
  ex.host_function([&] { seen.store(flag.load()); }, b);
  b.synchronize();
  EXPECT_EQ(seen.load(), 0) << "without the wait, b must not have waited for a";
  EXPECT_FALSE(ex.ready(e));
  g.open();
  ex.synchronize(e);
  EXPECT_TRUE(ex.ready(e));
  a.synchronize();
}

TEST(HostExecutor, AWaitTargetsTheRecordThatWasLatestWhenItWasIssued) {
  ok::host_executor ex(small_options());
  ok::stream a(ex);
  ok::stream b(ex);
  ok::event e(ex);
  gate first;
  gate second;
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
  ex.host_function(
      [&, f = first.future] {
        f.wait();
        flag.store(1);
      },
      a);
  ex.record(e, a);
  ex.wait(e, b);
  ex.host_function([&] { seen.store(flag.load()); }, b);
  // A later record must not extend the earlier wait.
  ex.host_function(
      [&, f = second.future] {
        f.wait();
        flag.store(2);
      },
      a);
  ex.record(e, a);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(seen.load(), -1) << "b ran before the record it waits for";
  first.open();
  b.synchronize();
  EXPECT_EQ(seen.load(), 1);
  EXPECT_FALSE(ex.ready(e));  // the latest record is still held
  second.open();
  ex.synchronize(e);
  EXPECT_EQ(flag.load(), 2);
}

TEST(HostExecutor, NeverRecordedEventsAreCompleteAndWaitingOnThemIsANoOp) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::event e(ex);
  EXPECT_TRUE(ex.ready(e));
  ex.synchronize(e);
  ex.wait(e, s);
  s.synchronize();
}

TEST(HostExecutor, EventSynchronizeBlocksUntilTheRecordCompletes) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::event e(ex);
  gate g;
  std::atomic<bool> done{false};
  ex.host_function(
      [&, f = g.future] {
        f.wait();
        done.store(true);
      },
      s);
  ex.record(e, s);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    g.open();
  });
  ex.synchronize(e);
  EXPECT_TRUE(done.load());
  opener.join();
  s.synchronize();
}

// ---- capture and replay -----------------------------------------------------------------------

namespace {
/// Captures "copy the count to the device, mark the first count rows" and returns the graph.
template <class Body>
ok::graph_ref capture_mark(ok::executor& ex, ok::stream_ref s, int* device_count,
                           const int* host_count, Body body, std::atomic<int>& host_calls) {
  ex.begin_capture(s);
  ex.copy(device_count, host_count, sizeof(int), s);
  ok::launch(ex, 64, body, s);
  ex.host_function([&host_calls] { host_calls.fetch_add(1); }, s);
  return ex.end_capture(s);
}
}  // namespace

TEST(HostExecutor, ReplayReReadsDeviceValuesAtReplayTime) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::buffer count(ex, ok::memory_kind::device, sizeof(int));
  ok::buffer out(ex, ok::memory_kind::device, 64 * sizeof(int));
  ok::buffer host(ex, ok::memory_kind::pinned, sizeof(int));
  ex.fill(out.data(), 0, out.size(), s);
  s.synchronize();
  std::atomic<int> calls{0};
  *host.as<int>() = 3;
  const ok::graph_ref g = capture_mark(ex, s, count.as<int>(), host.as<int>(),
                                       mark_first_rows{count.as<int>(), out.as<int>()}, calls);
  s.synchronize();
  EXPECT_EQ(sum_of(out.as<int>(), 64), 0) << "captured work must not run at capture time";
  EXPECT_EQ(calls.load(), 0);
  for (int rows : {5, 17, 0, 64}) {
    *host.as<int>() = rows;
    ex.replay(g, s);
    s.synchronize();
    EXPECT_EQ(sum_of(out.as<int>(), 64), rows);
  }
  EXPECT_EQ(calls.load(), 4);
  ex.destroy_graph(g);
}

TEST(HostExecutor, TheSuiteCatchesABodyThatReadsTheCountAtCaptureTime) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::buffer count(ex, ok::memory_kind::device, sizeof(int));
  ok::buffer out(ex, ok::memory_kind::device, 64 * sizeof(int));
  ok::buffer host(ex, ok::memory_kind::pinned, sizeof(int));
  std::atomic<int> calls{0};
  *host.as<int>() = 3;
  const ok::graph_ref g = capture_mark(ex, s, count.as<int>(), host.as<int>(),
                                       mark_first_rows_baked{3, out.as<int>()}, calls);
  *host.as<int>() = 5;
  ex.replay(g, s);
  s.synchronize();
  EXPECT_NE(sum_of(out.as<int>(), 64), 5) << "a baked-in count must be seen as stale";
  ex.destroy_graph(g);
}

TEST(HostExecutor, CaptureStateErrorsAndEventsInsideAGraph) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  ok::stream s1(ex, 1);
  ok::event e(ex);
  EXPECT_THROW((void)ex.end_capture(s), ok::state_error);
  ex.begin_capture(s);
  EXPECT_THROW(ex.begin_capture(s), ok::state_error);
  EXPECT_THROW(ex.synchronize(s), ok::state_error);
  ex.record(e, s);
  const ok::graph_ref g = ex.end_capture(s);
  EXPECT_TRUE(ex.ready(e)) << "a record inside a capture does not run";
  EXPECT_THROW(ex.replay(g, s1), ok::logic_error);  // captured on device 0
  gate hold;
  ex.host_function([f = hold.future] { f.wait(); }, s);
  ex.replay(g, s);
  EXPECT_FALSE(ex.ready(e)) << "the replayed record is queued behind the held host function";
  hold.open();
  s.synchronize();
  EXPECT_TRUE(ex.ready(e));
  ex.destroy_graph(g);
  EXPECT_THROW(ex.replay(g, s), ok::logic_error);
}

// ---- errors on the stream ---------------------------------------------------------------------

TEST(HostExecutor, AnOperationThatThrowsLeavesAStickyErrorForTheNextSynchronize) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  std::atomic<bool> ran_after{false};
  ex.host_function([] { throw std::runtime_error("boom"); }, s);
  ex.host_function([&] { ran_after.store(true); }, s);
  std::string msg = message_of<ok::runtime_error>([&] { s.synchronize(); });
  EXPECT_NE(msg.find("boom"), std::string::npos) << msg;
  EXPECT_TRUE(ran_after.load());
  s.synchronize();  // reported once

  ok::launch(ex, 100, throw_at_seven{}, "cursed_kernel", s);
  msg = message_of<ok::runtime_error>([&] { s.synchronize(); });
  EXPECT_NE(msg.find("index 7 is cursed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cursed_kernel"), std::string::npos) << msg;

  // offloadkit's own runtime errors keep their type.
  ex.host_function([] { throw ok::injected_fault("planted"); }, s);
  EXPECT_THROW(s.synchronize(), ok::injected_fault);

  // Stream calls from a host function are refused, as on CUDA, and reported the same way.
  ex.host_function([&] { ex.synchronize(s); }, s);
  msg = message_of<ok::runtime_error>([&] { s.synchronize(); });
  EXPECT_NE(msg.find("host function"), std::string::npos) << msg;
}

// ---- lifetime and threads ---------------------------------------------------------------------

TEST(HostExecutor, TheDestructorCleansUpEverythingStillAlive) {
  std::atomic<int> ran{0};
  {
    ok::host_executor ex(small_options());
    const ok::stream_ref s = ex.create_stream(0);
    const ok::event_ref e = ex.create_event(0);
    void* d = ex.allocate(ok::memory_kind::device, 4096);
    void* p = ex.allocate(ok::memory_kind::pinned, 4096);
    void* va = ex.reserve(2 * granule);
    const ok::physical_handle h = ex.create_physical(granule);
    ex.map(va, granule, h);
    ex.set_access(va, granule);
    ex.begin_capture(s);
    ex.fill(d, 1, 4096, s);
    (void)ex.end_capture(s);
    const ok::stream_ref capturing = ex.create_stream(1);
    ex.begin_capture(capturing);
    ex.host_function(
        [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          ran.fetch_add(1);
        },
        s);
    ex.copy(p, d, 4096, s);
    ex.copy(va, p, 4096, s);
    ex.record(e, s);
  }
  EXPECT_EQ(ran.load(), 1) << "queued work is drained before the executor goes";
}

TEST(HostExecutor, DeallocateWaitsForQueuedWorkLikeCudaFree) {
  ok::host_executor ex(small_options());
  ok::stream s(ex);
  void* d = ex.allocate(ok::memory_kind::device, 1 << 16);
  void* p = ex.allocate(ok::memory_kind::pinned, 1 << 16);
  std::atomic<bool> slept{false};
  ex.host_function(
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        slept.store(true);
      },
      s);
  ex.fill(d, 9, 1 << 16, s);
  ex.copy(p, d, 1 << 16, s);
  ex.deallocate(ok::memory_kind::device, d, 1 << 16);
  EXPECT_TRUE(slept.load());
  EXPECT_EQ(static_cast<unsigned char*>(p)[(1 << 16) - 1], 9);
  ex.deallocate(ok::memory_kind::pinned, p, 1 << 16);
}

TEST(HostExecutor, ManyHostThreadsUseOneExecutorAtOnce) {
  ok::host_executor ex(small_options());
  ok::stream shared(ex);
  ok::event shared_event(ex);
  constexpr int threads = 4;
  constexpr int rounds = 30;
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const int device = t % 2;
      ok::stream own(ex, device);
      for (int r = 0; r < rounds; ++r) {
        const std::size_t rows = 64 + 16 * static_cast<std::size_t>(r);
        const std::size_t bytes = rows * sizeof(int);
        ok::buffer count(ex, ok::memory_kind::device, sizeof(int), device);
        ok::buffer d(ex, ok::memory_kind::device, bytes, device);
        ok::buffer h(ex, ok::memory_kind::pinned, bytes);
        ok::buffer back(ex, ok::memory_kind::pageable, bytes);
        ok::buffer host_count(ex, ok::memory_kind::pinned, sizeof(int));
        *host_count.as<int>() = r;
        ex.copy(count.data(), host_count.data(), sizeof(int), own);
        ok::launch(ex, rows, mark_first_rows{count.as<int>(), d.as<int>()}, own);
        ex.copy(h.data(), d.data(), bytes, own);
        if (device == 0) {
          ex.record(shared_event, own);
          ex.wait(shared_event, shared);
        }
        ok::event done(ex, device);
        ex.record(done, own);
        ex.wait(done, own);
        ex.copy(back.data(), h.data(), bytes, own);
        own.synchronize();
        if (sum_of(back.as<int>(), rows) != r) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : pool) th.join();
  shared.synchronize();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(ex.device_memory(0).free, ex.device_memory(0).total);
  EXPECT_EQ(ex.device_memory(1).free, ex.device_memory(1).total);
}
