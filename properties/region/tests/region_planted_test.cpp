// The suite catches planted bugs: each test-only region below breaks one property on purpose,
// and run_check on that property must fail. A property that passes here could not detect the bug
// it exists for.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/host_executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/testing/check.hpp"
#include "offloadkit/testing/region_battery_impls.hpp"
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
    inner().pause(m, s);
    grown_.emplace_back(ex(), memory_kind::pinned, 4096);
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

}  // namespace
