// Unit tests of the executor adaptors (adaptors.hpp) on the host back end: the fault-injection
// countdown, delay injection on a stream, and the counting adaptor's figures, including under
// concurrent use.
#include "offloadkit/adaptors.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/resources.hpp"

namespace {

using namespace std::chrono_literals;
using offloadkit::buffer;
using offloadkit::counting_adaptor;
using offloadkit::delay_adaptor;
using offloadkit::executor_adaptor;
using offloadkit::fault_injection_adaptor;
using offloadkit::host_executor;
using offloadkit::memory_kind;
using offloadkit::op_kind;
using offloadkit::pointer_kind;
using offloadkit::stream;
using offloadkit::stream_ref;

// ---- fault injection
// --------------------------------------------------------------------------------

TEST(FaultInjectionAdaptor, FailsTheNthArmedCallOnceAndNamesIt) {
  host_executor base;
  fault_injection_adaptor ex(base);
  stream s(ex);
  buffer a(ex, memory_kind::pinned, 64);
  buffer b(ex, memory_kind::pinned, 64);

  ex.arm({op_kind::copy}, 2);
  EXPECT_NO_THROW(ex.copy(b.data(), a.data(), 64, s));
  EXPECT_NO_THROW(ex.fill(b.data(), 0, 64, s));  // not armed: neither fails nor counts
  EXPECT_NO_THROW(ex.copy(b.data(), a.data(), 64, s));
  EXPECT_FALSE(ex.fired());
  try {
    ex.copy(b.data(), a.data(), 64, s);
    FAIL() << "the third armed call did not fail";
  } catch (const offloadkit::injected_fault& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("copy"), std::string::npos) << what;
    EXPECT_NE(what.find("#2"), std::string::npos) << what;
  }
  EXPECT_TRUE(ex.fired());
  EXPECT_NO_THROW(ex.copy(b.data(), a.data(), 64, s)) << "an armed fault fires only once";
  EXPECT_EQ(ex.armed_calls(), 4u);
  s.synchronize();
}

TEST(FaultInjectionAdaptor, AllocationsAndPhysicalMemoryFailAsOutOfMemory) {
  host_executor base;
  fault_injection_adaptor ex(base);
  ex.arm({op_kind::allocate_pinned}, 0);
  EXPECT_NO_THROW(buffer(ex, memory_kind::device, 16));  // another kind
  try {
    buffer b(ex, memory_kind::pinned, 16);
    FAIL() << "the armed allocation did not fail";
  } catch (const offloadkit::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("allocate_pinned"), std::string::npos) << e.what();
  }

  ex.arm({op_kind::create_physical}, 0);
  EXPECT_THROW(ex.create_physical(ex.granularity(0)), offloadkit::out_of_memory);
  EXPECT_TRUE(ex.fired());
}

TEST(FaultInjectionAdaptor, ArmResetsAndDisarmStops) {
  host_executor base;
  fault_injection_adaptor ex(base);
  stream s(ex);
  buffer a(ex, memory_kind::device, 8);
  ex.arm({op_kind::fill}, 1);
  ex.fill(a.data(), 1, 8, s);
  ex.arm({op_kind::fill}, 1);  // counting starts again
  EXPECT_EQ(ex.armed_calls(), 0u);
  ex.fill(a.data(), 1, 8, s);
  ex.disarm();
  EXPECT_NO_THROW(ex.fill(a.data(), 1, 8, s));
  EXPECT_FALSE(ex.fired());
  s.synchronize();
}

TEST(FaultInjectionAdaptor, RejectsAKindOutOfRange) {
  host_executor base;
  fault_injection_adaptor ex(base);
  EXPECT_THROW(ex.arm({op_kind::count_}, 0), offloadkit::out_of_range);
}

TEST(FaultInjectionAdaptor, CountdownVisitsEveryCall) {
  // The countdown loop the batteries use: N = 0, 1, ... fails each call once, then succeeds.
  host_executor base;
  fault_injection_adaptor ex(base);
  const auto sequence = [&ex] {
    stream s(ex);
    buffer d(ex, memory_kind::device, 128);
    buffer p(ex, memory_kind::pinned, 128);
    ex.copy(d.data(), p.data(), 128, s);
    ex.copy(p.data(), d.data(), 128, s);
    s.synchronize();
  };
  std::size_t n = 0;
  for (;; ++n) {
    ex.arm({op_kind::allocate_device, op_kind::allocate_pinned, op_kind::copy}, n);
    bool threw = false;
    try {
      sequence();
    } catch (const offloadkit::injected_fault&) {
      threw = true;
    } catch (const offloadkit::out_of_memory&) {
      threw = true;
    }
    EXPECT_EQ(threw, ex.fired());
    if (!threw) break;
  }
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(ex.armed_calls(), 4u);
}

// ---- delay injection
// --------------------------------------------------------------------------------

/// Counts the holds (launches) it is asked to enqueue and forwards them.
class hold_recorder final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;
  std::atomic<int> holds{0};

 private:
  void do_launch(const offloadkit::launch_request& r, stream_ref s) override {
    ++holds;
    executor_adaptor::do_launch(r, s);
  }
};

TEST(DelayAdaptor, HoldsTheStreamNotTheCaller) {
  host_executor base;
  delay_adaptor ex(base);
  stream s(ex);
  const auto delay = 200ms;
  auto ran_at = std::make_shared<std::atomic<std::int64_t>>(0);
  ex.delay_next(delay, s);
  const auto issued = std::chrono::steady_clock::now();
  ex.host_function(
      [ran_at] { ran_at->store(std::chrono::steady_clock::now().time_since_epoch().count()); }, s);
  const auto returned = std::chrono::steady_clock::now();
  EXPECT_LT(returned - issued, delay) << "the delay blocked the issuing thread";
  s.synchronize();
  const std::chrono::steady_clock::time_point ran{
      std::chrono::steady_clock::duration(ran_at->load())};
  EXPECT_GE(ran - issued, delay);
}

TEST(DelayAdaptor, DelaysTheRequestedNumberOfOperations) {
  host_executor base;
  hold_recorder recorder(base);
  delay_adaptor ex(recorder);
  stream s(ex);
  stream other(ex);
  buffer a(ex, memory_kind::pinned, 8);
  buffer b(ex, memory_kind::pinned, 8);
  buffer c(ex, memory_kind::pinned, 8);
  ex.delay_next(1ms, 2, s);
  ex.copy(c.data(), a.data(), 8, other);  // another stream: not delayed
  ex.copy(b.data(), a.data(), 8, s);
  ex.fill(b.data(), 0, 8, s);
  ex.copy(b.data(), a.data(), 8, s);  // the plan is used up
  s.synchronize();
  other.synchronize();
  EXPECT_EQ(recorder.holds.load(), 2);
}

TEST(DelayAdaptor, RandomDelaysAreDeterministicPerSeedAndClearStopsThem) {
  host_executor base;
  auto pattern = [&base](std::uint64_t seed) {
    hold_recorder recorder(base);
    delay_adaptor ex(recorder);
    stream s(ex);
    buffer a(ex, memory_kind::pinned, 8);
    // Max 1 us: most draws are 0 or 1, so which operations get a sleep depends on the seed.
    ex.delay_randomly(s, 1us, seed);
    std::string which;
    for (int i = 0; i < 64; ++i) {
      const int before = recorder.holds.load();
      ex.fill(a.data(), i, 8, s);
      which += recorder.holds.load() > before ? '1' : '0';
    }
    ex.clear();
    const int before = recorder.holds.load();
    ex.fill(a.data(), 0, 8, s);
    EXPECT_EQ(recorder.holds.load(), before) << "clear() left a delay in place";
    s.synchronize();
    return which;
  };
  const std::string first = pattern(42);
  EXPECT_EQ(first, pattern(42));
  EXPECT_NE(first.find('1'), std::string::npos);
  EXPECT_NE(first.find('0'), std::string::npos);
  EXPECT_NE(first, pattern(43));
}

TEST(DelayAdaptor, RejectsNegativeDelays) {
  host_executor base;
  delay_adaptor ex(base);
  stream s(ex);
  EXPECT_THROW(ex.delay_next(std::chrono::microseconds(-1), s), offloadkit::out_of_range);
  EXPECT_THROW(ex.delay_randomly(s, std::chrono::microseconds(-1), 1), offloadkit::out_of_range);
}

// ---- counting
// ---------------------------------------------------------------------------------------

TEST(CountingAdaptor, CountsCallsAllocationsAndCopiedBytesByKind) {
  host_executor base;
  counting_adaptor ex(base);
  stream s(ex);
  buffer dev(ex, memory_kind::device, 100);
  buffer pin(ex, memory_kind::pinned, 200);
  buffer pag(ex, memory_kind::pageable, 300);
  buffer pag2(ex, memory_kind::pageable, 300);
  ex.copy(dev.data(), pin.data(), 100, s);  // pinned -> device
  ex.copy(pag.data(), dev.data(), 50, s);   // device -> pageable
  ex.copy(pag2.data(), pag.data(), 30, s);  // pageable -> pageable
  ex.fill(dev.data(), 0, 100, s);
  s.synchronize();

  const auto c = ex.snapshot();
  EXPECT_EQ(c.calls_of(op_kind::allocate_device), 1u);
  EXPECT_EQ(c.calls_of(op_kind::allocate_pinned), 1u);
  EXPECT_EQ(c.calls_of(op_kind::allocate_pageable), 2u);
  EXPECT_EQ(c.calls_of(op_kind::copy), 3u);
  EXPECT_EQ(c.calls_of(op_kind::fill), 1u);
  EXPECT_EQ(c.allocations_of(memory_kind::pageable), 2u);
  EXPECT_EQ(c.allocated_bytes[static_cast<std::size_t>(memory_kind::pageable)], 600u);
  EXPECT_EQ(c.copied(pointer_kind::pinned, pointer_kind::device), 100u);
  EXPECT_EQ(c.copied(pointer_kind::device, pointer_kind::pageable), 50u);
  EXPECT_EQ(c.copied(pointer_kind::pageable, pointer_kind::pageable), 30u);
  EXPECT_EQ(c.pageable_bytes(), 80u) << "each pageable copy counts once, on either side";

  ex.reset();
  EXPECT_EQ(ex.snapshot().calls_of(op_kind::copy), 0u);
  EXPECT_EQ(ex.snapshot().pageable_bytes(), 0u);
}

TEST(CountingAdaptor, AFailedAllocationIsACallButNotAnAllocation) {
  host_executor base;
  fault_injection_adaptor faulty(base);
  counting_adaptor ex(faulty);
  faulty.arm({op_kind::allocate_pinned}, 0);
  EXPECT_THROW(buffer(ex, memory_kind::pinned, 64), offloadkit::out_of_memory);
  const auto c = ex.snapshot();
  EXPECT_EQ(c.calls_of(op_kind::allocate_pinned), 1u);
  EXPECT_EQ(c.allocations_of(memory_kind::pinned), 0u);
}

TEST(CountingAdaptor, IsExactUnderConcurrentUse) {
  host_executor base;
  counting_adaptor ex(base);
  constexpr int threads = 4;
  constexpr int copies = 200;
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&ex] {
      stream s(ex);
      buffer a(ex, memory_kind::pinned, 16);
      buffer b(ex, memory_kind::device, 16);
      for (int i = 0; i < copies; ++i) ex.copy(b.data(), a.data(), 16, s);
      s.synchronize();
    });
  }
  for (auto& w : workers) w.join();
  const auto c = ex.snapshot();
  EXPECT_EQ(c.calls_of(op_kind::copy), static_cast<std::size_t>(threads * copies));
  EXPECT_EQ(c.copied(pointer_kind::pinned, pointer_kind::device),
            static_cast<std::size_t>(threads * copies * 16));
  EXPECT_EQ(c.allocations_of(memory_kind::device), static_cast<std::size_t>(threads));
}

}  // namespace
