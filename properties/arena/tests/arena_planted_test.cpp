// The suite catches planted bugs: test-only offloaders behind the same interface, each with one
// bug, must FAIL the property that guards against it. Proves every important property can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/testing/arena_battery.hpp"
#include "offloadkit/testing/check.hpp"
#include "testing.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::arena;

enum class bug {
  overlapping_layout,   ///< odd sizes overlap in the host buffer
  leaky_growth,         ///< allocates the new buffer before freeing the old one
  no_cache,             ///< a fresh pinned buffer for every offload
  keeps_memory,         ///< release() forgets to free
  swallows_copy_error,  ///< a failed copy is skipped and reported as success
  unordered_reload,     ///< reload does not wait for the offload on another stream
  early_event,          ///< offload's event is recorded before its copies
  stale_copy,           ///< a failed offload still claims a complete host copy
};

/// A compact arena offloader with exactly one bug.
template <bug B>
class planted final : public offloader {
 public:
  explicit planted(executor& ex) : ex_(&ex), last_(ex) {}
  ~planted() override { free_buffer(); }

 private:
  void free_buffer() noexcept {
    if (data_ == nullptr) return;
    if (pending_) ex_->synchronize(last_.ref());
    ex_->deallocate(memory_kind::pinned, data_, cap_);
    data_ = nullptr;
    cap_ = 0;
  }
  void reserve(std::size_t need) {
    if (need == 0 || (need <= cap_ && B != bug::no_cache)) return;
    if (B == bug::leaky_growth) {
      void* fresh = ex_->allocate(memory_kind::pinned, need);
      free_buffer();
      data_ = static_cast<unsigned char*>(fresh);
    } else {
      free_buffer();
      data_ = static_cast<unsigned char*>(ex_->allocate(memory_kind::pinned, need));
    }
    cap_ = need;
  }
  void copies(tensor_set_view set, bool to_host, stream_ref s) {
    for (std::size_t i = 0; i < set.size(); ++i) {
      if (set[i].bytes == 0) continue;
      try {
        if (to_host) {
          ex_->copy(data_ + offsets_[i], set[i].data, set[i].bytes, s);
        } else {
          ex_->copy(set[i].data, data_ + offsets_[i], set[i].bytes, s);
        }
      } catch (...) {
        if (B == bug::swallows_copy_error) continue;
        ex_->record(last_, s);
        arena::detail::rethrow_with_context(
            std::string(to_host ? "planted offload" : "planted reload") + ": tensor " +
            std::to_string(i));
      }
    }
    ex_->record(last_, s);
    pending_ = true;
  }
  event do_offload(tensor_set_view set, stream_ref s) override {
    if (B != bug::stale_copy) valid_ = false;
    sizes_.clear();
    offsets_.clear();
    std::size_t cursor = 0, need = 0;
    for (const device_tensor& t : set) {
      sizes_.push_back(t.bytes);
      if (B == bug::overlapping_layout) {
        offsets_.push_back(cursor);
        cursor += t.bytes & ~std::size_t{7};
      } else {
        cursor = (cursor + 255) & ~std::size_t{255};
        offsets_.push_back(cursor);
        cursor += t.bytes;
      }
      need = std::max(need, offsets_.back() + t.bytes);
    }
    reserve(need);
    event done(*ex_, s.device);
    if (B == bug::early_event) ex_->record(done, s);
    if (pending_) ex_->wait(last_, s);
    copies(set, true, s);
    if (B != bug::early_event) ex_->record(done, s);
    valid_ = true;
    return done;
  }
  event do_reload(tensor_set_view set, stream_ref s) override {
    arena::detail::expect_sizes(sizes_, set, "planted reload");
    if (pending_ && B != bug::unordered_reload) ex_->wait(last_, s);
    copies(set, false, s);
    event done(*ex_, s.device);
    ex_->record(done, s);
    return done;
  }
  void do_release() noexcept override {
    if (B != bug::keeps_memory) free_buffer();
    released_ = true;
    valid_ = false;
  }
  bool do_released() const noexcept override { return released_; }
  bool do_holds_copy() const noexcept override { return valid_; }
  std::size_t do_host_bytes() const noexcept override { return released_ ? 0 : cap_; }
  offload_promises do_promises() const noexcept override { return {true, true, true}; }
  std::string do_name() const override { return "planted offloader"; }

  executor* ex_;
  event last_;
  bool pending_ = false;
  unsigned char* data_ = nullptr;
  std::size_t cap_ = 0;
  std::vector<std::size_t> sizes_, offsets_;
  bool valid_ = false;
  bool released_ = false;
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
  return impl;
}

/// Runs battery case `name` on planted<B> with the host executor; returns whether it passed.
template <bug B>
check_outcome run_planted(const std::string& name) {
  host_executor ex;
  check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  for (const check_case& c : offloadkit::testing::arena_battery(planted_descriptor<B>())) {
    if (c.name == name) return run_check(c, ex, cfg);
  }
  ADD_FAILURE() << "the battery does not list " << name;
  return {};
}

#define OFFLOADKIT_EXPECT_CAUGHT(bug_, case_)                                   \
  do {                                                                          \
    const check_outcome o = run_planted<bug::bug_>(case_);                      \
    EXPECT_FALSE(o.passed) << "the " case_ " property missed the planted bug";  \
    std::printf("caught by %s: %s\n", case_, o.message.substr(0, 300).c_str()); \
  } while (0)

TEST(ArenaSuiteCatches, OverlappingLayout) {
  OFFLOADKIT_EXPECT_CAUGHT(overlapping_layout, "round_trip");
}
TEST(ArenaSuiteCatches, GrowthHoldingTwoBuffers) {
  OFFLOADKIT_EXPECT_CAUGHT(leaky_growth, "lifetime");
}
TEST(ArenaSuiteCatches, PinnedAllocationInSteadyState) {
  OFFLOADKIT_EXPECT_CAUGHT(no_cache, "steady_state");
}
TEST(ArenaSuiteCatches, ReleaseThatDoesNotFree) {
  OFFLOADKIT_EXPECT_CAUGHT(keeps_memory, "lifetime");
}
TEST(ArenaSuiteCatches, SwallowedCopyError) {
  OFFLOADKIT_EXPECT_CAUGHT(swallows_copy_error, "fault_copy");
}
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

TEST(ArenaSuiteCatches, ReloadNotOrderedAfterOffload) {
  OFFLOADKIT_SKIP_PLANTED_RACE();
  OFFLOADKIT_EXPECT_CAUGHT(unordered_reload, "concurrent");
}
TEST(ArenaSuiteCatches, EventBeforeCopies) {
  OFFLOADKIT_SKIP_PLANTED_RACE();
  OFFLOADKIT_EXPECT_CAUGHT(early_event, "event_chain");
}

TEST(ArenaSuiteCatches, StaleCopyAfterFailedOffload) {
  OFFLOADKIT_EXPECT_CAUGHT(stale_copy, "fault_allocation");
}

TEST(ArenaSuiteCatches, StaleCopyInTheModelSequence) {
  OFFLOADKIT_EXPECT_CAUGHT(stale_copy, "model_sequence");
}
TEST(ArenaSuiteCatches, SwallowedCopyErrorInTheModelSequence) {
  OFFLOADKIT_EXPECT_CAUGHT(swallows_copy_error, "model_sequence");
}

TEST(ArenaSuiteCatches, PlantedBugsPassTheRestOfTheBattery) {
  // A planted variant is a working offloader apart from its bug: its round trip passes.
  const check_outcome o = run_planted<bug::keeps_memory>("round_trip");
  EXPECT_TRUE(o.passed) << o.message;
}

}  // namespace
