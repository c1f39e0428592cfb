// Touching a paused region faults: its address stays reserved but no memory is behind it, so a
// stale pointer crashes at once instead of reading garbage (host back end: PROT_NONE reservation).
#include <gtest/gtest.h>

#include <cstdlib>

#include "offloadkit/host_executor.hpp"
#include "offloadkit/region/vmm_region.hpp"
#include "offloadkit/resources.hpp"

namespace {

using namespace offloadkit;
using namespace offloadkit::region;

void touch(void* p) {
  volatile char* c = static_cast<volatile char*>(p);
  *c = static_cast<char>(*c + 1);
}

// gtest runs suites named *DeathTest first, before any thread starts.
// NOLINTNEXTLINE(readability-identifier-naming)
class RegionDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(RegionDeathTest, TouchingAPausedRegionFaults) {
  EXPECT_DEATH(
      {
        host_executor ex;
        stream s(ex, 0);
        vmm_region r(ex, region_config{std::size_t{3} << 20, 0, std::size_t{2} << 20});
        r.pause(s);
        touch(static_cast<char*>(r.data()) + (std::size_t{5} << 19));
      },
      "");
}

TEST_F(RegionDeathTest, TouchingADiscardedRegionFaults) {
  EXPECT_DEATH(
      {
        host_executor ex;
        stream s(ex, 0);
        vmm_region r(ex, region_config{std::size_t{1} << 20, 0, 0});
        r.pause(pause_mode::discard, s);
        touch(r.data());
      },
      "");
}

TEST_F(RegionDeathTest, TouchingAResumedRegionDoesNot) {
  // The control: the same steps with a resume before the touch exit normally.
  EXPECT_EXIT(
      {
        host_executor ex;
        stream s(ex, 0);
        vmm_region r(ex, region_config{std::size_t{3} << 20, 0, std::size_t{2} << 20});
        r.pause(s);
        r.resume(s);
        s.synchronize();
        touch(static_cast<char*>(r.data()) + (std::size_t{5} << 19));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
