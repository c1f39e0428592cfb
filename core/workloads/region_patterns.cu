// The pattern bodies of region_patterns.hpp, compiled by nvcc so that the cuda back end launches
// them as kernels and the host back end runs the same functors.
#include <cstdint>
#include <cuda/atomic>

#include "offloadkit/launch.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/workloads/region_patterns.hpp"

namespace offloadkit::region {
namespace {

struct write_pattern_body {
  std::uint32_t* words;
  std::uint32_t seed;
  OFFLOADKIT_HD void operator()(std::size_t i) const { words[i] = pattern_word(seed, i); }
};

struct affine_body {
  std::uint32_t* words;
  OFFLOADKIT_HD void operator()(std::size_t i) const { words[i] = affine_word(words[i]); }
};

struct mismatch_body {
  const std::uint32_t* words;
  std::uint32_t seed;
  unsigned long long* mismatches;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    if (words[i] != pattern_word(seed, i)) {
      cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> c(*mismatches);
      c.fetch_add(1, cuda::memory_order_relaxed);
    }
  }
};

}  // namespace

void write_pattern(executor& ex, void* p, std::size_t words, std::uint32_t seed, stream_ref s) {
  launch(ex, words, write_pattern_body{static_cast<std::uint32_t*>(p), seed},
         "region_write_pattern", s);
}

void apply_affine(executor& ex, void* p, std::size_t words, stream_ref s) {
  launch(ex, words, affine_body{static_cast<std::uint32_t*>(p)}, "region_apply_affine", s);
}

void count_mismatches(executor& ex, const void* p, std::size_t words, std::uint32_t seed,
                      unsigned long long* mismatches, stream_ref s) {
  launch(ex, words, mismatch_body{static_cast<const std::uint32_t*>(p), seed, mismatches},
         "region_count_mismatches", s);
}

unsigned long long mismatched_words(executor& ex, const void* p, std::size_t words,
                                    std::uint32_t seed, stream_ref s) {
  const buffer counter(ex, memory_kind::device, sizeof(unsigned long long), s.device);
  const buffer result(ex, memory_kind::pinned, sizeof(unsigned long long));
  ex.fill(counter.data(), 0, counter.size(), s);
  count_mismatches(ex, p, words, seed, counter.as<unsigned long long>(), s);
  ex.copy(result.data(), counter.data(), counter.size(), s);
  ex.synchronize(s);
  return *result.as<unsigned long long>();
}

}  // namespace offloadkit::region
