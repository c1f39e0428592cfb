// The suite catches planted bugs: each test-only region below breaks one property on purpose,
// and run_check on that property must fail. A property that passes here could not detect the bug
// it exists for.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <list>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "battery_tests.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/region_battery_impls.hpp"
#include "synchronous_fixed_region.hpp"
#include "testing.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::region;

/// Forwards everything to a correct region; the planted variants override one step.
class forwarding_region : public offload_region {
 public:
  forwarding_region(executor& ex, std::unique_ptr<offload_region> inner)
      : ex_(&ex), inner_(std::move(inner)) {}

 protected:
  executor& ex() const { return *ex_; }
  offload_region& inner() const { return *inner_; }
  void do_pause(pause_mode m, stream_ref s) override { inner_->pause(m, s); }
  void do_resume(stream_ref s) override { inner_->resume(s); }
  /// A swap with another forwarding region goes to the correct regions themselves, so that a
  /// variant's pause or resume bug stays with the properties of pause and resume.
  void do_swap(offload_region& in, pause_mode m, stream_ref s) override {
    if (auto* f = dynamic_cast<forwarding_region*>(&in)) {
      inner_->swap_with(*f->inner_, m, s);
    } else {
      offload_region::do_swap(in, m, s);
    }
  }

 private:
  void* do_data() const noexcept override { return inner_->data(); }
  std::size_t do_size() const noexcept override { return inner_->size(); }
  int do_device() const noexcept override { return inner_->device(); }
  region_state do_state() const noexcept override { return inner_->state(); }
  bool do_address_stable() const noexcept override { return inner_->address_stable(); }
  std::size_t do_footprint() const noexcept override { return inner_->footprint(); }
  std::size_t do_captures() const noexcept override { return inner_->captures(); }
  graph_id do_register_graph(capture_fn fn, stream_ref s) override {
    return inner_->register_graph(std::move(fn), s);
  }
  void do_replay(graph_id g, stream_ref s) override { inner_->replay(g, s); }
  void do_unregister_graph(graph_id g) noexcept override { inner_->unregister_graph(g); }

  executor* ex_;
  std::unique_ptr<offload_region> inner_;
};

/// Bug: pause never copies the contents out (every pause discards).
class copyless_region final : public forwarding_region {
 public:
  copyless_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  void do_pause(pause_mode, stream_ref s) override { inner().pause(pause_mode::discard, s); }
};

/// Bug: pause copies out but keeps as much device memory as the region held.
class hoarding_region final : public forwarding_region {
 public:
  hoarding_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  void do_pause(pause_mode m, stream_ref s) override {
    inner().pause(m, s);
    held_ = buffer(ex(), memory_kind::device, inner().footprint(), inner().device());
  }
  void do_resume(stream_ref s) override {
    held_.reset();
    inner().resume(s);
  }
  buffer held_;
};

/// Bug: a staging allocation made before each transition is freed on success only.
class leaky_on_failure_region final : public forwarding_region {
 public:
  leaky_on_failure_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}
  ~leaky_on_failure_region() override {
    for (void* p : leaked_)
      ex().deallocate(memory_kind::device, p, ex().granularity(inner().device()));
  }

 private:
  template <class F>
  void staged(F f) {
    const std::size_t g = ex().granularity(inner().device());
    void* p = ex().allocate(memory_kind::device, g, inner().device());
    try {
      f();
    } catch (...) {
      leaked_.push_back(p);  // "forgotten" until destruction
      throw;
    }
    ex().deallocate(memory_kind::device, p, g);
  }
  void do_pause(pause_mode m, stream_ref s) override {
    staged([&] { inner().pause(m, s); });
  }
  void do_resume(stream_ref s) override {
    staged([&] { inner().resume(s); });
  }
  std::vector<void*> leaked_;
};

/// Bug: a resume that fails midway "cleans up" by dropping the chunks it had not brought back.
class lossy_on_failure_region final : public forwarding_region {
 public:
  lossy_on_failure_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  void do_resume(stream_ref s) override {
    try {
      inner().resume(s);
    } catch (...) {
      if (inner().state() == region_state::partial) inner().pause(pause_mode::discard, s);
      throw;
    }
  }
};

/// Bug: every pause allocates a little pinned memory that is only freed with the region.
class growing_region final : public forwarding_region {
 public:
  growing_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  void do_pause(pause_mode m, stream_ref s) override {
    grown_.emplace_back(ex(), memory_kind::pinned, 4096);
    inner().pause(m, s);
  }
  std::vector<buffer> grown_;
};

/// Bug: the reference region (which moves on resume) claims a stable address. A spacer taken
/// just before each resume keeps the old address occupied, so the move always happens.
class moving_region final : public forwarding_region {
 public:
  moving_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<reference_region>(ex, c)) {}

 private:
  bool do_address_stable() const noexcept override { return true; }
  void do_resume(stream_ref s) override {
    buffer spacer(ex(), memory_kind::device, inner().size(), inner().device());
    inner().resume(s);
  }
};

// ---- bugs that exactly one property of the battery catches -------------------------------------

/// A correct region: device memory from a vmm_region, the host copy in its own pinned staging
/// buffers, one per chunk (allocated at the first preserving pause and kept). The variants below
/// change one step of it.
class staged_region : public forwarding_region {
 public:
  staged_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)),
        resumed_(ex, c.device),
        copied_out_(ex, c.device) {
    const std::size_t gran = ex.granularity(c.device);
    const std::size_t reserved = (c.bytes + gran - 1) / gran * gran;
    const std::size_t chunk = c.chunk_bytes != 0 ? c.chunk_bytes : default_chunk_bytes;
    const std::size_t chunk_bytes = std::min(reserved, (chunk + gran - 1) / gran * gran);
    for (std::size_t off = 0; off < c.bytes; off += chunk_bytes)
      chunks_.push_back({off, std::min(chunk_bytes, c.bytes - off)});
  }
  ~staged_region() override {
    if (resume_pending_) {
      // Destructor path: the copies in were the region's own work and must land before the
      // device memory goes; a failure here has no caller to go to.
      try {
        ex().synchronize(resumed_.ref());
      } catch (const std::exception&) {
      }
    }
  }

 protected:
  struct span {
    std::size_t offset, bytes;
  };
  /// Merges neighbouring chunks whose staging buffers touch into one copy.
  virtual bool merge_touching() const { return false; }
  /// Orders the copies out on `s` after a resume still pending on another stream.
  virtual void order_after_resume(stream_ref s) { ex().wait(resumed_.ref(), s); }
  /// The stream the copies out of a pause given `s` run on, ordered after the caller's work on
  /// `s` and after the region's pending resume; `s` itself here.
  virtual stream_ref copy_out_stream(stream_ref s) {
    if (resume_pending_) order_after_resume(s);
    return s;
  }
  /// Whether a preserving pause copies out; false once a discarding pause has happened.
  virtual bool copies_out() const { return true; }
  bool discarded_once_ = false;
  event resumed_;  ///< recorded after the copies in of the last resume
  bool resume_pending_ = false;

  void do_pause(pause_mode m, stream_ref s) override {
    if (m == pause_mode::preserve && copies_out()) {
      while (staging_.size() < chunks_.size())
        staging_.emplace_back(ex(), memory_kind::pinned, chunks_[staging_.size()].bytes);
      const stream_ref c = copy_out_stream(s);
      each_run([&](std::size_t first, std::size_t offset, std::size_t bytes) {
        ex().copy(staging_[first].data(), static_cast<char*>(inner().data()) + offset, bytes, c);
      });
      if (c.native != s.native) {
        // The device memory goes on `s`, after the copies out.
        ex().record(copied_out_.ref(), c);
        ex().wait(copied_out_.ref(), s);
      }
    }
    // The device memory goes only once the copies in of a pending resume have landed.
    if (resume_pending_) ex().synchronize(resumed_.ref());
    resume_pending_ = false;
    inner().pause(pause_mode::discard, s);  // waits for `s`, the copies out included
    if (m == pause_mode::discard) discarded_once_ = true;
    saved_ = m == pause_mode::preserve && staging_.size() == chunks_.size();
  }
  /// Its contents live in its own staging buffers: a swap is its own pause, then the other's
  /// resume.
  void do_swap(offload_region& in, pause_mode m, stream_ref s) override {
    // Past forwarding_region's swap, which would go to the inner region and skip this class's own
    // pause and resume.
    offload_region::do_swap(in, m, s);  // NOLINT(bugprone-parent-virtual-call)
  }
  void do_resume(stream_ref s) override {
    inner().resume(s);
    if (saved_) {
      try {
        each_run([&](std::size_t first, std::size_t offset, std::size_t bytes) {
          ex().copy(static_cast<char*>(inner().data()) + offset, staging_[first].data(), bytes, s);
        });
      } catch (const std::exception&) {
        // Back to paused, the staging buffers intact, so that a retry can succeed.
        ex().synchronize(s);
        inner().pause(pause_mode::discard, s);
        throw;
      }
    }
    ex().record(resumed_.ref(), s);
    resume_pending_ = true;
  }

 private:
  template <class F>
  void each_run(F copy) {
    for (std::size_t i = 0; i < chunks_.size();) {
      std::size_t j = i + 1, bytes = chunks_[i].bytes;
      while (merge_touching() && j < chunks_.size() &&
             staging_[j - 1].as<char>() + chunks_[j - 1].bytes == staging_[j].as<char>()) {
        bytes += chunks_[j].bytes;
        ++j;
      }
      copy(i, chunks_[i].offset, bytes);
      i = j;
    }
  }

  std::vector<span> chunks_;
  std::vector<buffer> staging_;
  event copied_out_;  ///< recorded after copies out issued on a stream other than the caller's
  bool saved_ = false;
};

/// Bug (adjacent_allocations): copies of neighbouring chunks whose staging buffers touch are
/// merged into one copy without asking extent_of(), so the copy spans two allocations.
class merging_region final : public staged_region {
 public:
  using staged_region::staged_region;

 private:
  bool merge_touching() const override { return true; }
};

/// Bug (cross_stream_order): a pause waits for a resume pending on another stream for at most
/// 200 ms, then copies out whatever the device holds. (model_based's resumes, delayed by at most
/// half a millisecond, finish within that even when a large one runs in a slow instrumented build
/// on a loaded machine; 50 ms was not enough there.)
class impatient_region final : public staged_region {
 public:
  using staged_region::staged_region;

 private:
  void order_after_resume(stream_ref) override {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (!ex().ready(resumed_.ref()) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
};

/// Bug (caller_writes_late): a pause copies out on a stream of its own, with no event wait on the
/// caller's stream; it only polls the caller's stream from the host for at most 200 ms (as code
/// that spins on cudaStreamQuery with a timeout does), then copies whatever the device holds.
/// (The other properties' writes, large ones on a loaded machine included, land within that.)
class own_stream_pause_region final : public staged_region {
 public:
  own_stream_pause_region(executor& ex, region_config c)
      : staged_region(ex, c), own_(ex, c.device), caller_(ex, c.device) {}

 private:
  stream_ref copy_out_stream(stream_ref s) override {
    ex().record(caller_.ref(), s);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (!ex().ready(caller_.ref()) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (resume_pending_) ex().wait(resumed_.ref(), own_.ref());  // its own work stays ordered
    return own_.ref();
  }
  stream own_;
  event caller_;
};

/// Bug (model_based): after one discarding pause, preserving pauses no longer copy out.
class sticky_discard_region final : public staged_region {
 public:
  using staged_region::staged_region;

 private:
  bool copies_out() const override { return !discarded_once_; }
};

/// Bug (release_is_real): a region on any device but the first keeps a small device scratch
/// allocation while paused (a status word it forgets to free until resume).
class scratch_keeping_region final : public forwarding_region {
 public:
  scratch_keeping_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  void do_pause(pause_mode m, stream_ref s) override {
    inner().pause(m, s);
    if (inner().device() != 0) scratch_ = buffer(ex(), memory_kind::device, 4, inner().device());
  }
  void do_resume(stream_ref s) override {
    scratch_.reset();
    inner().resume(s);
  }
  buffer scratch_;
};

/// Bug (multi_device): pausing a region on a device other than the first takes its scratch on
/// the first device (the current device at the time), moving another device's memory.
class wrong_device_scratch_region final : public forwarding_region {
 public:
  wrong_device_scratch_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  void do_pause(pause_mode m, stream_ref s) override {
    inner().pause(m, s);
    if (inner().device() != 0) scratch_ = buffer(ex(), memory_kind::device, 4096, 0);
  }
  void do_resume(stream_ref s) override {
    scratch_.reset();
    inner().resume(s);
  }
  buffer scratch_;
};

/// The device the last region made "made current", shared by every region of the process as a
/// GPU's current device is.
int made_current = 0;

/// Bug (multi_device, with two regions at once): the region keeps a small device status word
/// while active. Its constructor makes the region's device current (cudaSetDevice(config.device))
/// and takes the word there; resume takes it again on the current device, which is its own only
/// while no region of another device has been made since.
class current_device_word_region final : public forwarding_region {
 public:
  current_device_word_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {
    made_current = c.device;
    word_ = buffer(ex, memory_kind::device, word_bytes, made_current);
  }

 private:
  static constexpr std::size_t word_bytes = 4096;
  void do_pause(pause_mode m, stream_ref s) override {
    inner().pause(m, s);
    word_.reset();
  }
  // The word comes and goes with pause and resume, swaps included.
  void do_swap(offload_region& in, pause_mode m, stream_ref s) override {
    // Past forwarding_region's swap, which would go to the inner region and skip this class's own
    // pause and resume.
    offload_region::do_swap(in, m, s);  // NOLINT(bugprone-parent-virtual-call)
  }
  void do_resume(stream_ref s) override {
    // Taken first, so that a failed allocation leaves the region paused.
    buffer word(ex(), memory_kind::device, word_bytes, made_current);
    inner().resume(s);
    word_ = std::move(word);
  }
  buffer word_;
};

/// Bug (graph_replay_after_resume): unregister_graph() destroys the most recently registered
/// graph, whatever id it is given.
class wrong_unregister_region final : public forwarding_region {
 public:
  wrong_unregister_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  graph_id do_register_graph(capture_fn fn, stream_ref s) override {
    last_ = inner().register_graph(std::move(fn), s);
    return last_;
  }
  void do_unregister_graph(graph_id) noexcept override { inner().unregister_graph(last_); }
  graph_id last_ = 0;
};

/// Bug (fault_countdown_pause): a pause that fails midway "cleans up" by discarding the rest,
/// which leaves the region paused with its contents lost.
class discarding_failed_pause_region final : public forwarding_region {
 public:
  discarding_failed_pause_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  void do_pause(pause_mode m, stream_ref s) override {
    try {
      inner().pause(m, s);
    } catch (const std::exception&) {
      inner().pause(pause_mode::discard, s);
      throw;
    }
  }
};

/// Bug (unified_release_behaviour): a managed region whose discarding pause really discards
/// (clears the contents), against the documented behaviour that it keeps them.
class clearing_unified_region final : public forwarding_region {
 public:
  clearing_unified_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<unified_region>(ex, c)) {}

 private:
  void do_pause(pause_mode m, stream_ref s) override {
    if (m == pause_mode::discard) ex().fill(inner().data(), 0, inner().size(), s);
    inner().pause(m, s);
  }
};

/// Bug (swap_keeps_both): a swap discards the contents of the region it pauses, whatever the
/// mode says (a phase switch written for a KV cache that is rebuilt anyway).
class discarding_swap_region final : public forwarding_region {
 public:
  discarding_swap_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  void do_swap(offload_region& in, pause_mode, stream_ref s) override {
    forwarding_region::do_swap(in, pause_mode::discard, s);
  }
};

/// Bug (fault_countdown_swap): a swap that fails midway reports success; the caller goes on with
/// a region that is not resumed.
class swallowing_swap_region final : public forwarding_region {
 public:
  swallowing_swap_region(executor& ex, region_config c)
      : forwarding_region(ex, std::make_unique<vmm_region>(ex, c)) {}

 private:
  void do_swap(offload_region& in, pause_mode m, stream_ref s) override {
    try {
      forwarding_region::do_swap(in, m, s);
    } catch (const injected_fault& e) {
      last_failure_ = e.what();  // kept for a log nobody reads
    }
  }
  std::string last_failure_;
};

/// A planted variant's descriptor: the capabilities of the region it forwards to (`base`), its
/// own factory.
template <class Planted>
offloadkit::testing::region_implementation planted(
    offloadkit::testing::region_implementation base) {
  base.name = "planted";
  base.make = [](executor& e, region_config c) {
    return std::unique_ptr<offload_region>(std::make_unique<Planted>(e, c));
  };
  return base;
}

/// The reference region's capabilities, except the stable address that moving_region claims.
offloadkit::testing::region_implementation claims_stable_address() {
  auto impl = offloadkit::testing::reference_region_implementation();
  impl.caps.address_stable = true;
  return impl;
}

template <class Planted>
check_outcome run_planted(const std::string& property, int cases,
                          offloadkit::testing::region_implementation base =
                              offloadkit::testing::optimized_region_implementation()) {
  host_executor ex;
  const auto battery = offloadkit::testing::region_battery(planted<Planted>(std::move(base)));
  check_config cfg;
  cfg.seed = offloadkit::testing::seed();
  cfg.cases = cases;
  cfg.shrink = false;  // only the verdict matters here
  for (const auto& c : battery)
    if (c.name == property) return run_check(c, ex, cfg);
  ADD_FAILURE() << "the battery does not list " << property;
  return {};
}

TEST(RegionPlantedBugs, ModelCatchesAPauseThatDoesNotCopy) {
  const auto o = run_planted<copyless_region>("model_based", 100);
  EXPECT_FALSE(o.passed) << "the model-based property missed a pause that loses the contents";
}

TEST(RegionPlantedBugs, ModelCatchesAnAddressThatMoves) {
  const auto o = run_planted<moving_region>("model_based", 100, claims_stable_address());
  EXPECT_FALSE(o.passed) << "the model-based property missed an address that changed on resume";
}

TEST(RegionPlantedBugs, GraphReplayCatchesAnAddressThatMoves) {
  EXPECT_FALSE(
      run_planted<moving_region>("graph_replay_after_resume", 20, claims_stable_address()).passed);
}

TEST(RegionPlantedBugs, GraphReplayCatchesAPauseThatDoesNotCopy) {
  EXPECT_FALSE(run_planted<copyless_region>("graph_replay_after_resume", 20).passed);
}

TEST(RegionPlantedBugs, ReleaseCatchesMemoryKeptWhilePaused) {
  EXPECT_FALSE(run_planted<hoarding_region>("release_is_real", 5).passed);
}

TEST(RegionPlantedBugs, FaultCountdownCatchesALeakOnFailedPause) {
  EXPECT_FALSE(run_planted<leaky_on_failure_region>("fault_countdown_pause", 2).passed);
}

TEST(RegionPlantedBugs, FaultCountdownCatchesALeakOnFailedResume) {
  EXPECT_FALSE(run_planted<leaky_on_failure_region>("fault_countdown_resume", 2).passed);
}

TEST(RegionPlantedBugs, FaultCountdownCatchesDataLostOnFailedResume) {
  EXPECT_FALSE(run_planted<lossy_on_failure_region>("fault_countdown_resume", 3).passed);
}

TEST(RegionPlantedBugs, ManyCyclesCatchesGrowingPinnedMemory) {
  EXPECT_FALSE(run_planted<growing_region>("many_cycles", 1).passed);
}

TEST(RegionPlantedBugs, CorrectRegionPassesTheSameProperties) {
  // The control: the unmodified optimized region passes what the variants fail.
  for (const char* p : {"model_based", "release_is_real", "fault_countdown_resume", "many_cycles"})
    EXPECT_TRUE(run_planted<vmm_region>(p, 3).passed) << p;
}

// ---- each property catches a bug that no other property catches ------------------------------

/// The properties of the whole battery for `impl` that fail on the host executor (a fresh one
/// each), with each property's default case count (the whole battery runs in seconds).
std::set<std::string> failing_properties(const offloadkit::testing::region_implementation& impl) {
  return offloadkit::testing::failing_properties(offloadkit::testing::region_battery(impl));
}

using names = std::set<std::string>;
const auto optimized = offloadkit::testing::optimized_region_implementation;

TEST(RegionCatchesExactlyOne, StagedRegionWithoutABugPassesEverything) {
  EXPECT_EQ(failing_properties(planted<staged_region>(optimized())), names{});
}
TEST(RegionCatchesExactlyOne, DiscardingSwapOnlyBySwapKeepsBoth) {
  EXPECT_EQ(failing_properties(planted<discarding_swap_region>(optimized())),
            names{"swap_keeps_both"});
}
TEST(RegionCatchesExactlyOne, SwallowedSwapFaultOnlyBySwapCountdown) {
  EXPECT_EQ(failing_properties(planted<swallowing_swap_region>(optimized())),
            names{"fault_countdown_swap"});
}
TEST(RegionCatchesExactlyOne, StickyDiscardOnlyByModel) {
  EXPECT_EQ(failing_properties(planted<sticky_discard_region>(optimized())), names{"model_based"});
}
TEST(RegionCatchesExactlyOne, KeptScratchOnlyByReleaseIsReal) {
  EXPECT_EQ(failing_properties(planted<scratch_keeping_region>(optimized())),
            names{"release_is_real"});
}
TEST(RegionCatchesExactlyOne, WrongUnregisterOnlyByGraphReplay) {
  EXPECT_EQ(failing_properties(planted<wrong_unregister_region>(optimized())),
            names{"graph_replay_after_resume"});
}
TEST(RegionCatchesExactlyOne, DiscardOnFailedPauseOnlyByPauseCountdown) {
  EXPECT_EQ(failing_properties(planted<discarding_failed_pause_region>(optimized())),
            names{"fault_countdown_pause"});
}
TEST(RegionCatchesExactlyOne, LossOnFailedResumeOnlyByResumeCountdown) {
  EXPECT_EQ(failing_properties(planted<lossy_on_failure_region>(optimized())),
            names{"fault_countdown_resume"});
}
TEST(RegionCatchesExactlyOne, GrowingPinnedMemoryOnlyByManyCycles) {
  EXPECT_EQ(failing_properties(planted<growing_region>(optimized())), names{"many_cycles"});
}
TEST(RegionCatchesExactlyOne, ClampedDeviceOnlyByStateErrors) {
  auto impl = optimized();
  impl.name = "planted";
  impl.make = [](executor& e, region_config c) {
    c.device = std::min(std::max(c.device, 0), e.device_count() - 1);
    return std::unique_ptr<offload_region>(std::make_unique<vmm_region>(e, c));
  };
  EXPECT_EQ(failing_properties(impl), names{"state_errors"});
}
TEST(RegionCatchesExactlyOne, ScratchOnAnotherDeviceOnlyByMultiDevice) {
  EXPECT_EQ(failing_properties(planted<wrong_device_scratch_region>(optimized())),
            names{"multi_device"});
}
TEST(RegionCatchesExactlyOne, WordOnTheCurrentDeviceOnlyByMultiDevice) {
  EXPECT_EQ(failing_properties(planted<current_device_word_region>(optimized())),
            names{"multi_device"});
}
TEST(RegionCatchesExactlyOne, ImpatientPauseOnlyByCrossStreamOrder) {
  EXPECT_EQ(failing_properties(planted<impatient_region>(optimized())),
            names{"cross_stream_order"});
}
TEST(RegionCatchesExactlyOne, OwnStreamPauseOnlyByCallerWritesLate) {
  EXPECT_EQ(failing_properties(planted<own_stream_pause_region>(optimized())),
            names{"caller_writes_late"});
}
TEST(RegionCatchesExactlyOne, MergedCopyAcrossAllocationsOnlyByAdjacentAllocations) {
  EXPECT_EQ(failing_properties(planted<merging_region>(optimized())),
            names{"adjacent_allocations"});
}
TEST(RegionCatchesExactlyOne, ClearingDiscardOnlyByUnifiedRelease) {
  EXPECT_EQ(failing_properties(planted<clearing_unified_region>(
                offloadkit::testing::unified_region_implementation())),
            names{"unified_release_behaviour"});
}

// ---- declared policies: a profile that fits the code, and a bug in each policy -----------------

namespace doubles = offloadkit::region::testing_doubles;

TEST(RegionProfiles, SynchronousFixedModeRegionWithoutGraphsPassesItsProfile) {
  EXPECT_EQ(failing_properties(doubles::synchronous_fixed_region_implementation()), names{});
}
TEST(RegionProfiles, ResumeReturningBeforeItsCopyOnlyByModelWhenDeclaredSynchronous) {
  auto impl = doubles::synchronous_fixed_region_implementation(
      doubles::planted_mode::returns_before_resume_copy);
  EXPECT_EQ(failing_properties(impl), names{"model_based"});
  // The same code is right for what a stream-ordered region promises.
  impl.caps.streams = offloadkit::testing::region_streams::stream_ordered;
  EXPECT_EQ(failing_properties(impl), names{});
}
TEST(RegionProfiles, PauseNotWaitingForTheCallerOnlyByCallerWritesLateWhenSynchronous) {
  // A synchronous pause waits for the stream given as a stream-ordered one does: the same rule.
  EXPECT_EQ(failing_properties(doubles::synchronous_fixed_region_implementation(
                doubles::planted_mode::polls_caller_briefly)),
            names{"caller_writes_late"});
}
TEST(RegionProfiles, DiscardBeforeRefusingAModeOnlyByStateErrors) {
  EXPECT_EQ(failing_properties(doubles::synchronous_fixed_region_implementation(
                doubles::planted_mode::discards_before_refusing)),
            names{"state_errors"});
}
TEST(RegionProfiles, WithExecutorGraphsRecapturesAfterAMove) {
  // The double moves on every resume: graphs captured before a pause must not replay onto the
  // memory it gave back.
  host_executor ex;
  auto impl = doubles::synchronous_fixed_region_implementation();
  auto r = with_executor_graphs(ex, impl.make(ex, region_config{4096, 0, 0, pause_mode::preserve}));
  stream s(ex, 0);
  ex.fill(r->data(), 1, 4096, s);
  const graph_id g =
      r->register_graph([&ex](void* base, stream_ref st) { ex.fill(base, 7, 16, st); }, s);
  EXPECT_EQ(r->captures(), 1u);
  void* const captured_at = r->data();
  // Resumes until the region lands elsewhere than where the graph was captured: allocations of
  // the same size, held meanwhile, take the memory it gives back (which address the heap hands
  // out first depends on its state, so one allocation is not always enough).
  std::list<buffer> held;
  do {
    r->pause(s);
    held.emplace_back(ex, memory_kind::device, 4096, 0);
    r->resume(s);
  } while (r->data() == captured_at && held.size() < 16);
  ASSERT_NE(r->data(), captured_at) << "resumed where it was " << held.size() << " times";
  r->replay(g, s);
  EXPECT_EQ(r->captures(), 2u);
  buffer host(ex, memory_kind::pinned, 4096);
  ex.copy(host.data(), r->data(), 4096, s);
  ex.synchronize(s);
  const auto* bytes = host.as<unsigned char>();
  EXPECT_EQ(bytes[0], 7);
  EXPECT_EQ(bytes[16], 1);
  EXPECT_THROW(r->pause(pause_mode::discard, s), unsupported_error);
  EXPECT_EQ(r->state(), region_state::active);
}

}  // namespace
