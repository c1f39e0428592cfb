// The suite catches planted bugs: test-only offloaders behind the same interface, each with one
// bug. Each planted bug is run against the whole battery, and the set of properties that fail must
// be exactly the one property that guards against it: every property is shown to fail, and to be
// the only one that sees its bug (a property no bug fails alone would be redundant or unable to
// fail). bug::none, the same offloader without a bug, passes every property.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "battery_tests.hpp"
#include "offloadkit/arena/layout.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/testing/arena_battery.hpp"
#include "offloadkit/testing/arena_battery_support.hpp"
#include "offloadkit/testing/check.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::arena;

enum class bug {
  none,
  stale_host_bytes,           ///< host_bytes() reports the capacity before the latest growth
  early_event,                ///< offload's event is recorded before its copies
  per_tensor_copies,          ///< one copy per tensor, never one per contiguous run
  leaky_growth,               ///< allocates the new buffer before freeing the old one
  bare_allocation_error,      ///< a failed host allocation is thrown without naming the offload
  copy_error_without_tensor,  ///< a failed copy is reported without the tensor it was copying
  unordered_reload,           ///< reload does not wait for the offload on another stream
  offload_ignores_reload,     ///< offload overwrites the arena while a reload still reads it
  drops_large_tail,           ///< copies in whole 4 MiB chunks and forgets the rest of the run
  ready_flag_on_device_0,     ///< reload's device-side ready flag lives on device 0, not the set's
  drops_copy_on_failed_wait,  ///< a reload whose wait for the arena's last use fails drops the copy
  no_caller_wait,  ///< offload copies on a stream of its own, polling the caller's for 200 ms
};

/// Copies of more than this are issued in chunks of it (drops_large_tail forgets the remainder).
constexpr std::size_t chunk_bytes = std::size_t{4} << 20;

/// Bytes of the device-side flag reload sets once a set is back (ready_flag_on_device_0).
constexpr std::size_t flag_bytes = 256;

/// A compact arena offloader (the battery's layout planning, one pinned buffer, one event that
/// orders every use of it) for the sets and streams of one device, with exactly one bug.
template <bug B>
class planted final : public offloader {
 public:
  explicit planted(executor& ex, int device = 0) : ex_(&ex), last_(ex, device) {
    if (B == bug::no_caller_wait) own_ = stream(ex, device);
  }
  ~planted() override { free_buffer(); }

 private:
  [[nodiscard]] extent_lookup lookup() const {
    executor* ex = ex_;
    return [ex](const void* p) { return ex->extent_of(p); };
  }
  void free_buffer() noexcept {
    if (data_ == nullptr) return;
    if (pending_) ex_->synchronize(last_.ref());
    ex_->deallocate(memory_kind::pinned, data_, cap_);
    data_ = nullptr;
    cap_ = 0;
  }
  void reserve(std::size_t need) {
    if (need <= cap_) return;
    try {
      if (B == bug::leaky_growth) {
        void* fresh = ex_->allocate(memory_kind::pinned, need);
        free_buffer();
        data_ = static_cast<unsigned char*>(fresh);
      } else {
        free_buffer();
        data_ = static_cast<unsigned char*>(ex_->allocate(memory_kind::pinned, need));
      }
    } catch (...) {
      if (B == bug::bare_allocation_error) throw;
      arena::detail::rethrow_with_context("planted offload: allocating " + std::to_string(need) +
                                          " host bytes");
    }
    reported_cap_ = B == bug::stale_host_bytes ? cap_ : need;
    cap_ = need;
  }
  void copy_one_run(const arena::copy_run& r, tensor_set_view set, bool to_host, stream_ref s) {
    auto* host = data_ + r.host_offset;
    auto* dev = static_cast<unsigned char*>(set[r.first].data);
    std::size_t done = 0;
    for (; r.bytes - done > chunk_bytes; done += chunk_bytes) {
      if (to_host) {
        ex_->copy(host + done, dev + done, chunk_bytes, s);
      } else {
        ex_->copy(dev + done, host + done, chunk_bytes, s);
      }
    }
    if (B == bug::drops_large_tail && done != 0) return;
    if (to_host) {
      ex_->copy(host + done, dev + done, r.bytes - done, s);
    } else {
      ex_->copy(dev + done, host + done, r.bytes - done, s);
    }
  }
  void copies(tensor_set_view set, bool to_host, stream_ref s) {
    std::vector<arena::copy_run> runs;
    if (B == bug::per_tensor_copies) {
      for (std::size_t i = 0; i < set.size(); ++i) {
        if (set[i].bytes != 0) runs.push_back({i, 1, plan_.offsets[i], set[i].bytes});
      }
    } else {
      runs = coalesce(plan_, set, lookup());
    }
    const char* what = to_host ? "planted offload" : "planted reload";
    for (const arena::copy_run& r : runs) {
      try {
        copy_one_run(r, set, to_host, s);
      } catch (...) {
        ex_->record(last_, s);
        pending_ = true;
        if (B == bug::copy_error_without_tensor) arena::detail::rethrow_with_context(what);
        arena::detail::rethrow_with_context(std::string(what) + ": tensor " +
                                            std::to_string(r.first));
      }
    }
    // Every use of the buffer is recorded, so that the next one waits for it.
    if (B == bug::offload_ignores_reload && !to_host) return;
    ex_->record(last_, s);
    pending_ = true;
  }
  /// The stream offload() copies on: the caller's, or (no_caller_wait) a stream of its own once
  /// the caller's has been polled from the host for at most 200 ms (as code that spins on
  /// cudaStreamQuery with a timeout does), with no event wait on it. The other properties'
  /// writes, large ones on a loaded machine included, land within that.
  stream_ref offload_stream(stream_ref s) {
    if (B != bug::no_caller_wait) return s;
    const event caller(*ex_, s.device);
    ex_->record(caller, s);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (!ex_->ready(caller.ref()) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return own_.ref();
  }
  event do_offload(tensor_set_view set, stream_ref s) override {
    valid_ = false;
    plan_ = plan_layout(make_key(set, lookup()));
    sizes_ = plan_.key.sizes;
    reserve(plan_.total_bytes);
    event done(*ex_, s.device);
    if (B == bug::early_event) ex_->record(done, s);
    const stream_ref on = offload_stream(s);
    if (pending_) ex_->wait(last_, on);  // its own uses of the buffer stay ordered
    copies(set, true, on);
    if (B != bug::early_event) ex_->record(done, on);
    valid_ = true;
    return done;
  }
  event do_reload(tensor_set_view set, stream_ref s) override {
    arena::detail::expect_sizes(sizes_, set, "planted reload");
    if (pending_ && B != bug::unordered_reload) {
      try {
        ex_->wait(last_, s);
      } catch (...) {
        if (B == bug::drops_copy_on_failed_wait) valid_ = false;  // the planted bug
        throw;
      }
    }
    copies(set, false, s);
    if (B == bug::ready_flag_on_device_0) set_ready_flag(s);
    event done(*ex_, s.device);
    ex_->record(done, s);
    return done;
  }
  /// Sets a device-side flag that consumers on the device could wait on, taken once and kept
  /// until release(). The bug: taken with the executor's default device (0), not the set's.
  void set_ready_flag(stream_ref s) {
    if (!flag_) flag_ = buffer(*ex_, memory_kind::device, flag_bytes);
    ex_->fill(flag_.data(), 1, flag_bytes, s);
  }
  void do_release() noexcept override {
    free_buffer();
    flag_.reset();
    released_ = true;
    valid_ = false;
  }
  bool do_released() const noexcept override { return released_; }
  bool do_holds_copy() const noexcept override { return valid_; }
  std::size_t do_host_bytes() const noexcept override { return released_ ? 0 : reported_cap_; }
  offload_promises do_promises() const noexcept override { return {true, true, true}; }
  std::string do_name() const override { return "planted offloader"; }

  executor* ex_;
  event last_;
  bool pending_ = false;
  unsigned char* data_ = nullptr;
  std::size_t cap_ = 0;
  std::size_t reported_cap_ = 0;
  layout_plan plan_;
  std::vector<std::size_t> sizes_;
  bool valid_ = false;
  bool released_ = false;
  buffer flag_;
  stream own_;  ///< no_caller_wait: the stream offload() copies on
};

/// planted<B>'s descriptor: the optimized offloader's promises, which it makes too.
template <bug B>
offloadkit::testing::arena_implementation planted_descriptor() {
  offloadkit::testing::arena_implementation impl =
      offloadkit::testing::optimized_arena_implementation();
  impl.name = "planted";
  impl.make = [](executor& ex) {
    return std::unique_ptr<offloader>(std::make_unique<planted<B>>(ex));
  };
  impl.make_for_device = [](executor& ex, int device) {
    return std::unique_ptr<offloader>(std::make_unique<planted<B>>(ex, device));
  };
  return impl;
}

/// Cases per property when a planted offloader faces the whole battery (OFFLOADKIT_CASES raises
/// or lowers it): enough for the race properties to see their window, few enough to stay fast.
constexpr int planted_cases = 25;

/// Runs every property of the battery on planted<B> with one host executor and returns the names
/// of those that failed, printing each failure's first lines.
template <bug B>
std::set<std::string> failing_properties() {
  offloadkit::testing::planted_run run;
  run.cases = planted_cases;
  run.fresh_executor = false;
  return offloadkit::testing::failing_properties(
      offloadkit::testing::arena_battery(planted_descriptor<B>()), run);
}

#define OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(bug_, property_)                                \
  EXPECT_EQ(failing_properties<bug::bug_>(), std::set<std::string>{property_})           \
      << "the planted bug " #bug_ " must fail exactly the " property_ " property (seed " \
      << offloadkit::testing::seed() << ")"

// Under ThreadSanitizer the planted races are reported (and the run halted) by the sanitizer
// itself, which is a catch too; the property is shown to catch them in the other builds.
#if defined(__SANITIZE_THREAD__)
#define OFFLOADKIT_SKIP_PLANTED_RACE() GTEST_SKIP() << "ThreadSanitizer reports this planted race"
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OFFLOADKIT_SKIP_PLANTED_RACE() GTEST_SKIP() << "ThreadSanitizer reports this planted race"
#endif
#endif
#ifndef OFFLOADKIT_SKIP_PLANTED_RACE
#define OFFLOADKIT_SKIP_PLANTED_RACE() (void)0
#endif

TEST(ArenaSuiteCatches, NothingWithoutABug) {
  EXPECT_EQ(failing_properties<bug::none>(), std::set<std::string>{});
}
TEST(ArenaSuiteCatches, StaleHostBytesOnlyInRoundTrip) {
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(stale_host_bytes, "round_trip");
}
TEST(ArenaSuiteCatches, EventBeforeCopiesOnlyInEventChain) {
  OFFLOADKIT_SKIP_PLANTED_RACE();
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(early_event, "event_chain");
}
TEST(ArenaSuiteCatches, CopyPerTensorOnlyInSteadyState) {
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(per_tensor_copies, "steady_state");
}
TEST(ArenaSuiteCatches, GrowthHoldingTwoBuffersOnlyInLifetime) {
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(leaky_growth, "lifetime");
}
TEST(ArenaSuiteCatches, AllocationErrorWithoutContextOnlyInFaultAllocation) {
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(bare_allocation_error, "fault_allocation");
}
TEST(ArenaSuiteCatches, CopyErrorWithoutTensorOnlyInFaultCopy) {
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(copy_error_without_tensor, "fault_copy");
}
TEST(ArenaSuiteCatches, ReloadNotOrderedAfterOffloadOnlyInConcurrent) {
  OFFLOADKIT_SKIP_PLANTED_RACE();
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(unordered_reload, "concurrent");
}
TEST(ArenaSuiteCatches, OffloadOverPendingReloadOnlyInModelSequence) {
  OFFLOADKIT_SKIP_PLANTED_RACE();
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(offload_ignores_reload, "model_sequence");
}
TEST(ArenaSuiteCatches, LostTailOfLargeRunOnlyInBoundaryShapes) {
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(drops_large_tail, "boundary_shapes");
}
TEST(ArenaSuiteCatches, ReloadFlagOnDeviceZeroOnlyInMultiDevice) {
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(ready_flag_on_device_0, "multi_device");
}
TEST(ArenaSuiteCatches, CopyDroppedOnAFailedWaitOnlyInFaultCountdown) {
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(drops_copy_on_failed_wait, "fault_countdown");
}
TEST(ArenaSuiteCatches, OwnStreamOffloadOnlyInCallerWritesLate) {
  OFFLOADKIT_EXPECT_CAUGHT_ONLY_BY(no_caller_wait, "caller_writes_late");
}

}  // namespace
