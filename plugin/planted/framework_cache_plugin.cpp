// A plugin on a framework with a caching allocator, for `offloadkit check --driver-faults`: its
// arena is offloadkit's reference arena plus a pinned scratch block taken from a process-wide
// cache, as PyTorch's CachingHostAllocator keeps freed pinned blocks for the next user. The block
// is allocated with cudaMallocHost on a cache miss and goes back to the cache, not to the driver,
// when the arena is destroyed, so after every scenario the process still holds it.
//
// Built twice: with OFFLOADKIT_FRAMEWORK_CACHE_RELEASE the plugin exports release_cached_memory
// (ABI 1.3), which frees what the cache keeps, and every case must come out clean with the cache
// named beside it; without it the block is what the ledger holds at the end, reported as a leak.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "arena_wrapper.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/plugin/abi.hpp"
#include "offloadkit/plugin/export.hpp"

namespace {

namespace ok = offloadkit;

constexpr std::size_t scratch_bytes = std::size_t{64} << 10;

/// Freed pinned blocks kept for reuse, as a framework's caching host allocator keeps them.
class pinned_cache {
 public:
  void* take() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        void* p = free_.back();
        free_.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, scratch_bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw ok::cuda_error(std::string("framework cache: cudaMallocHost(") +
                               std::to_string(scratch_bytes) + ") failed: " + cudaGetErrorName(e),
                           static_cast<int>(e));
    }
    return p;
  }
  void give_back(void* p) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(p);
  }
  /// Frees every cached block; throws cuda_error naming the first that the driver refused.
  void empty() {
    std::vector<void*> blocks;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(free_);
    }
    std::string failed;
    for (void* p : blocks) {
      const cudaError_t e = cudaFreeHost(p);
      if (e != cudaSuccess && failed.empty()) {
        (void)cudaGetLastError();
        failed = std::string("framework cache: cudaFreeHost failed: ") + cudaGetErrorName(e);
      }
    }
    if (!failed.empty()) throw ok::cuda_error(failed, 0);
  }

 private:
  std::mutex mutex_;
  std::vector<void*> free_;
};

pinned_cache& cache() {
  static pinned_cache c;
  return c;
}

/// The reference arena, holding one cached scratch block while it lives.
class cached_scratch_arena final
    : public ok::planted::arena_wrapper<ok::arena::reference_offloader> {
 public:
  explicit cached_scratch_arena(ok::executor& ex) : arena_wrapper(ex), scratch_(cache().take()) {}
  cached_scratch_arena(const cached_scratch_arena&) = delete;
  cached_scratch_arena& operator=(const cached_scratch_arena&) = delete;
  ~cached_scratch_arena() override { cache().give_back(scratch_); }

 private:
  [[nodiscard]] std::string do_name() const override { return "cached-scratch"; }

  void* scratch_;
};

}  // namespace

extern "C" OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  namespace op = offloadkit::plugin;
  // Runs on the cuda executor only: the cache calls CUDA itself.
  static const okit_arena_vtable arena = op::arena_vtable<&op::make_arena_as<cached_scratch_arena>>(
      "cached-scratch", OKIT_CAP_CUDA_EXECUTOR);
#if defined(OFFLOADKIT_FRAMEWORK_CACHE_RELEASE)
  constexpr auto release = [](okit_error* err) { return op::guard(err, [] { cache().empty(); }); };
  static const okit_plugin plugin{OKIT_ABI_VERSION,
                                  sizeof(okit_plugin),
                                  "framework-cache",
                                  "1",
                                  nullptr,
                                  nullptr,
                                  &arena,
                                  nullptr,
                                  +release};
#else
  static const okit_plugin plugin{OKIT_ABI_VERSION,
                                  sizeof(okit_plugin),
                                  "framework-cache-unreleased",
                                  "1",
                                  nullptr,
                                  nullptr,
                                  &arena,
                                  nullptr,
                                  nullptr};
#endif
  return host_abi_version == OKIT_ABI_VERSION ? &plugin : nullptr;
}
