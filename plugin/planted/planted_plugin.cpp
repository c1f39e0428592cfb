// Planted-bug plugins: offloadkit's reference implementations behind the C ABI with one bug each,
// selected at build time by OFFLOADKIT_PLANTED (stash, region, arena, activation, crash, close,
// close_v1, region_no_caller_wait, region_pinned_per_pause, activation_own_stream). Each must make
// `offloadkit check --plugin` fail with a seed and a reproduce line; `crash` kills the process
// inside one stash property, which must cost one failure row, not the run: its correct arena is
// checked afterwards and passes. `region_leak` is a region that calls CUDA itself, as outside
// offload code does, and leaks the physical allocation when cuMemMap fails: what `offloadkit check
// --driver-faults` must report as a leak (it runs on a GPU only). `close` is an arena whose
// teardown gives its staging slot back to the plugin's pool twice; the pool refuses the second
// release and the table's close (ABI 1.2) returns that error, which must fail the case that
// destroyed the arena. `close_v1` is the same arena in a table built before close (ABI 1.0 size):
// offloadkit calls destroy, which cannot report, and the bug is printed but passes, which is what
// close is for. `region_no_caller_wait` is a region whose pause copies out on its own stream
// without waiting for the caller's: only caller_writes_late fails.
//
// Five black boxes call the driver themselves, through dlopen("libcuda.so.1") and dlsym as outside
// offload code does (so that in CI, on the host executor, they run over the stand-in driver of
// interpose/tests, and on a GPU over the real one); each is caught only by an instrument that
// reaches such code through the interposer. `region_pinned_per_pause` allocates its pinned staging
// buffer with cuMemAllocHost on every pause and frees it at resume (no leak, but an allocation per
// cycle): many_cycles fails it through the driver's counts and passes it without them.
// `arena_pinned_per_offload` is offloadkit's coalesced arena with a pinned table of the set's
// tensor sizes that it allocates with cuMemAllocHost on every offload and frees at the reload
// after it: the arena's steady_state fails it through the driver's counts, and passes it without.
// `activation_own_stream` uploads in unpack() with cuMemcpyHtoDAsync on a stream it created and
// returns without ordering the caller's stream after it: a race property fails it while the
// interposer delays its stream, and everything passes without delays. `region_own_stream_resume`
// is the region's counterpart: its resume uploads the preserved contents with cuMemcpyHtoDAsync on
// a stream of its own and returns without ordering the caller's stream after the upload, and
// `stash_own_stream_restore` the stash's: restore() lands the rows in a pinned buffer of its own,
// then uploads them to the caller's buffer the same way.
//
// `stash_one_tier` is not planted: the reference stash declaring one tier (device pages only) and
// config validation at first use, which it makes with the SDK's check_stash_config at its first
// call; it passes every property, through the ABI's profile bits. `stash_one_tier_lenient`
// declares the same and checks only what check_config checks, using the pinned pages a config
// gives the tier it lacks: config_limits alone fails it.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "arena_wrapper.hpp"
#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/plugin/export.hpp"
#include "offloadkit/region/reference_region.hpp"
#include "offloadkit/stash/eager_stash.hpp"
#include "offloadkit/stash/eager_stash_wrapper.hpp"
#include "offloadkit/teardown.hpp"
#include "planted_driver_boxes.hpp"
#include "planted_region_leak.hpp"
#include "planted_support.hpp"

namespace offloadkit::planted {

constexpr std::uint64_t common =
    OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR | OKIT_CAP_EXECUTOR_ALLOCATIONS;

/// The profile of one_tier_stash: one tier (device pages), the config validated at first use.
constexpr std::uint64_t one_tier_profile =
    common | OKIT_STASH_CAP_DEVICE_TIER_ONLY | OKIT_STASH_CAP_CONFIG_AT_FIRST_USE;

/// The reference stash with device pages only, made at the first call, once the config passes the
/// SDK's checks of one_tier_profile; until then every call is refused (out_of_range naming the
/// field) and writes nothing. With no pinned pages the reference stash places a key whole on the
/// device or overflows it, as a single-tier stash does. The planted bug (stash_one_tier_lenient):
/// only check_config's rules are checked, so pinned pages are taken and used.
class one_tier_stash final : public ok::stash::stash_interface {
 public:
  one_tier_stash(ok::executor& ex, const ok::stash::stash_config& c, ok::stream_ref /*s*/)
      : ex_(&ex), cfg_(c) {}

 private:
  ok::stash::stash_interface& inner(ok::stream_ref s) {
    if (!inner_) {
      if (PLANTED == OKIT_PLANTED_stash_one_tier_lenient) {
        ok::stash::check_config(cfg_, ex_->device_count());  // the planted bug
      } else {
        offloadkit::plugin::check_stash_config(cfg_, ex_->device_count(), one_tier_profile);
      }
      inner_ = std::make_unique<ok::stash::eager_stash>(*ex_, cfg_, s);
    }
    return *inner_;
  }
  [[nodiscard]] std::string do_name() const override { return "one-tier"; }
  [[nodiscard]] const ok::stash::stash_config& do_config() const noexcept override { return cfg_; }
  [[nodiscard]] bool do_capturable() const noexcept override { return false; }
  void do_stash(const ok::stash::stash_key& k, const void* src, const std::uint64_t* rows,
                ok::stream_ref s) override {
    inner(s).stash(k, src, rows, s);
  }
  void do_restore(const ok::stash::stash_key& k, void* dst, std::uint64_t* rows_out,
                  ok::stream_ref s) override {
    inner(s).restore(k, dst, rows_out, s);
  }
  void do_reset(ok::stream_ref s) override { inner(s).reset(s); }
  void do_clear_status(ok::stream_ref s) override { inner(s).clear_status(s); }
  ok::stash::stash_snapshot do_snapshot(ok::stream_ref s) override { return inner(s).snapshot(s); }

  ok::executor* ex_;
  ok::stash::stash_config cfg_;
  std::unique_ptr<ok::stash::eager_stash> inner_;  ///< made at the first call
};

/// The reference stash, with restore() writing a zero over the first restored byte (stash) or with
/// clear_status() dying of SIGSEGV (crash).
class planted_stash final : public ok::stash::eager_stash_wrapper {
 public:
  planted_stash(ok::executor& ex, const ok::stash::stash_config& c, ok::stream_ref s)
      : eager_stash_wrapper(ex, c, s, "planted") {}

 private:
  void do_restore(const ok::stash::stash_key& k, void* dst, std::uint64_t* rows_out,
                  ok::stream_ref s) override {
    inner_.restore(k, dst, rows_out, s);
    if (PLANTED == OKIT_PLANTED_stash) ex_->fill(dst, 0, 1, s);  // the planted bug
  }
  void do_clear_status(ok::stream_ref s) override {
    if (PLANTED == OKIT_PLANTED_crash) std::raise(SIGSEGV);  // the planted crash
    inner_.clear_status(s);
  }
};

/// The reference region, with resume() losing the first byte of the contents.
class planted_region final : public reference_region_wrapper {
 public:
  using reference_region_wrapper::reference_region_wrapper;

 private:
  void do_pause(ok::region::pause_mode m, ok::stream_ref s) override { inner_.pause(m, s); }
  void do_resume(ok::stream_ref s) override {
    inner_.resume(s);
    ex_->fill(inner_.data(), 0x5a, 1, s);  // the planted bug
  }
};

/// The reference region, its contents kept in a pinned buffer of its own while paused, with the
/// planted bug (region_no_caller_wait): pause() copies out on a stream of its own with no event
/// wait on the caller's stream; it polls the caller's stream from the host for at most 200 ms, then
/// copies whatever the device holds. Only caller_writes_late holds the caller's stream longer.
class own_stream_region final : public reference_region_wrapper {
 public:
  own_stream_region(ok::executor& ex, const ok::region::region_config& c)
      : reference_region_wrapper(ex, c),
        own_(ex, c.device),
        caller_(ex, c.device),
        resumed_(ex, c.device) {}
  own_stream_region(const own_stream_region&) = delete;
  own_stream_region& operator=(const own_stream_region&) = delete;
  ~own_stream_region() override {
    if (!resume_pending_) return;
    // The copy in reads host_ and writes the device memory, both freed below.
    try {
      ex_->synchronize(resumed_.ref());
    } catch (const std::exception& e) {
      ok::record_teardown_error(e.what());
    }
  }

 private:
  void do_pause(ok::region::pause_mode m, ok::stream_ref s) override {
    // Its own copy in of the last resume, which may still be pending on another stream, lands
    // before anything is copied out or given back.
    if (resume_pending_) ex_->synchronize(resumed_.ref());
    resume_pending_ = false;
    if (m == ok::region::pause_mode::preserve &&
        inner_.state() == ok::region::region_state::active) {
      if (host_.data() == nullptr) {
        host_ = ok::buffer(*ex_, ok::memory_kind::pinned, inner_.size(), inner_.device());
      }
      ex_->record(caller_.ref(), s);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      while (!ex_->ready(caller_.ref()) && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      try {
        ex_->copy(host_.data(), inner_.data(), inner_.size(), own_.ref());  // the planted bug
      } catch (...) {
        own_.synchronize();  // still active, nothing lost
        throw;
      }
      own_.synchronize();
    }
    inner_.pause(ok::region::pause_mode::discard, s);
    preserved_ = m == ok::region::pause_mode::preserve;
  }
  void do_resume(ok::stream_ref s) override {
    inner_.resume(s);
    if (!preserved_) return;
    try {
      ex_->copy(inner_.data(), host_.data(), inner_.size(), s);
    } catch (...) {
      inner_.pause(ok::region::pause_mode::discard, s);  // back to paused, the host copy intact
      throw;
    }
    ex_->record(resumed_.ref(), s);
    resume_pending_ = true;
    preserved_ = false;
  }

  ok::stream own_;
  ok::event caller_;   ///< recorded on the caller's stream, polled for at most 200 ms
  ok::event resumed_;  ///< recorded after the copy in of the last resume
  bool resume_pending_ = false;
  ok::buffer host_;  ///< pinned, allocated at the first preserving pause and kept
  bool preserved_ = false;
};

constexpr bool planted_close = PLANTED == OKIT_PLANTED_close || PLANTED == OKIT_PLANTED_close_v1;

/// The plugin's own pool of staging slots, shared by its arenas: it refuses to take back a slot
/// that is not held (a double release).
class staging_pool {
 public:
  std::size_t acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < held_.size(); ++i) {
      if (!held_[i]) {
        held_[i] = true;
        return i;
      }
    }
    held_.push_back(true);
    return held_.size() - 1;
  }
  void release(std::size_t slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    OFFLOADKIT_EXPECTS(slot < held_.size() && held_[slot], ok::state_error,
                       "planted arena: staging slot ", slot,
                       " released twice (the pool does not hold it out)");
    held_[slot] = false;
  }

 private:
  std::mutex mutex_;
  std::vector<bool> held_;
};

staging_pool& pool() {
  static staging_pool p;
  return p;
}

/// The reference arena, with reload() writing a wrong first byte into the first non-empty tensor
/// (arena), or with a teardown that releases its staging slot twice (close, close_v1).
class planted_arena final : public arena_wrapper<ok::arena::reference_offloader> {
 public:
  explicit planted_arena(ok::executor& ex) : arena_wrapper(ex), ex_(&ex) {
    if (planted_close) slot_ = pool().acquire();
  }
  planted_arena(const planted_arena&) = delete;
  planted_arena& operator=(const planted_arena&) = delete;
  ~planted_arena() override {
    if (!planted_close) return;
    try {
      pool().release(slot_);
      pool().release(slot_);  // the planted bug: the slot goes back a second time
    } catch (const std::exception& e) {
      // A destructor cannot throw: the table's close returns what is recorded here.
      ok::record_teardown_error(e.what());
    }
  }

 private:
  ok::event do_reload(ok::arena::tensor_set_view set, ok::stream_ref s) override {
    ok::event e = inner_.reload(set, s);
    for (const auto& t : set) {
      if (t.bytes == 0) continue;
      if (PLANTED != OKIT_PLANTED_arena) break;
      ex_->fill(t.data, 0x5a, 1, s);  // the planted bug
      ok::event after(*ex_);
      ex_->record(after, s);
      return after;
    }
    return e;
  }
  [[nodiscard]] std::string do_name() const override { return "planted"; }

  ok::executor* ex_;
  std::size_t slot_ = 0;
};

/// The reference activation offloader, with unpack() writing a wrong first byte.
class planted_activation final : public ok::activation::offloader {
 public:
  planted_activation(ok::executor& ex, const ok::activation::offload_options& o)
      : ex_(&ex), inner_(ex, o) {}

 private:
  ok::activation::handle do_pack(ok::activation::tensor t, ok::stream_ref s) override {
    return inner_.pack(std::move(t), s);
  }
  ok::activation::tensor do_unpack(ok::activation::handle h, ok::stream_ref s) override {
    ok::activation::tensor t = inner_.unpack(h, s);
    if (t.bytes > 0) ex_->fill(t.data, 0x5a, 1, s);  // the planted bug
    return t;
  }
  void do_forward_layer_end(int layer, ok::stream_ref s) override {
    inner_.forward_layer_end(layer, s);
  }
  void do_backward_layer_begin(int layer, ok::stream_ref s) override {
    inner_.backward_layer_begin(layer, s);
  }
  void do_synchronize() override { inner_.synchronize(); }
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override {
    return inner_.keep_threshold();
  }
  [[nodiscard]] ok::activation::offload_stats do_stats() const override { return inner_.stats(); }
  [[nodiscard]] std::string do_name() const override { return "planted"; }

  ok::executor* ex_;
  ok::activation::reference_offloader inner_;
};

}  // namespace offloadkit::planted

extern "C" OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  namespace op = offloadkit::plugin;
  using namespace ::offloadkit::planted;  // NOLINT(google-build-using-namespace): the plugin's own
#if PLANTED == OKIT_PLANTED_stash_own_stream_restore
  // Its staging and its upload go through the driver: not through the executor.
  static const okit_stash_vtable stash =
      op::stash_vtable<&op::make_stash_as<own_stream_restore_stash>>(
          "planted-own-stream-restore", OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR);
#elif PLANTED == OKIT_PLANTED_stash_one_tier || PLANTED == OKIT_PLANTED_stash_one_tier_lenient
  static const okit_stash_vtable stash =
      op::stash_vtable<&op::make_stash_as<one_tier_stash>>("one-tier", one_tier_profile);
#else
  static const okit_stash_vtable stash =
      op::stash_vtable<&op::make_stash_as<planted_stash>>("planted", common);
#endif
#if PLANTED == OKIT_PLANTED_region_leak
  // It calls CUDA itself: the cuda executor only, and no allocation goes through the executor.
  static const okit_region_vtable region = op::region_vtable<&op::make_region_as<leaky_vmm_region>>(
      "planted-leaky-vmm",
      OKIT_CAP_CUDA_EXECUTOR | OKIT_REGION_CAP_ADDRESS_STABLE | OKIT_REGION_CAP_RELEASES_MEMORY);
#elif PLANTED == OKIT_PLANTED_region_no_caller_wait
  static const okit_region_vtable region =
      op::region_vtable<&op::make_region_as<own_stream_region>>(
          "planted", common | OKIT_REGION_CAP_RELEASES_MEMORY | OKIT_REGION_CAP_MULTI_DEVICE);
#elif PLANTED == OKIT_PLANTED_region_pinned_per_pause
  // Its pinned staging comes from the driver: not through the executor.
  static const okit_region_vtable region =
      op::region_vtable<&op::make_region_as<pinned_per_pause_region>>(
          "planted-pinned-per-pause",
          OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR | OKIT_REGION_CAP_RELEASES_MEMORY);
#elif PLANTED == OKIT_PLANTED_region_own_stream_resume
  // Its staging and its upload go through the driver: not through the executor.
  static const okit_region_vtable region =
      op::region_vtable<&op::make_region_as<own_stream_resume_region>>(
          "planted-own-stream-resume",
          OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR | OKIT_REGION_CAP_RELEASES_MEMORY);
#else
  static const okit_region_vtable region = op::region_vtable<&op::make_region_as<planted_region>>(
      "planted", common | OKIT_REGION_CAP_RELEASES_MEMORY | OKIT_REGION_CAP_MULTI_DEVICE);
#endif
#if PLANTED == OKIT_PLANTED_arena_pinned_per_offload
  // Its pinned table comes from the driver: not through the executor. It promises what the
  // coalesced arena promises.
  static const okit_arena_vtable arena =
      op::arena_vtable<&op::make_arena_as<pinned_per_offload_arena>>(
          "planted-pinned-per-offload", common | OKIT_ARENA_CAP_ASYNCHRONOUS |
                                            OKIT_ARENA_CAP_PINNED_STEADY_STATE |
                                            OKIT_ARENA_CAP_SINGLE_HOST_BUFFER);
#else
  static const okit_arena_vtable arena = [] {
    okit_arena_vtable t = op::arena_vtable<&op::make_arena_as<planted_arena>>("planted", common);
    if (PLANTED == OKIT_PLANTED_close_v1) {
      // Built as a plugin of ABI 1.0 is: the table ends before close. The entry past its
      // struct_size leaks the object and fails if called, so a host that reads past the size is
      // seen.
      t.struct_size = OKIT_ARENA_V1_SIZE;
      t.close = [](void*, okit_error* err) {
        return okit_set_error(err, OKIT_ERR_LOGIC, "close lies past struct_size");
      };
    }
    return t;
  }();
#endif
#if PLANTED == OKIT_PLANTED_activation_own_stream
  // Its uploads go through the driver: not through the executor.
  static const okit_activation_vtable activation =
      op::activation_vtable<&op::make_activation_as<own_stream_activation>>(
          "planted-own-stream",
          OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR | OKIT_ACTIVATION_CAP_ORIGIN_DEVICE);
#else
  static const okit_activation_vtable activation =
      op::activation_vtable<&op::make_activation_as<planted_activation>>(
          "planted", common | OKIT_ACTIVATION_CAP_ORIGIN_DEVICE |
                         OKIT_ACTIVATION_CAP_PREFETCH_BOUND | OKIT_ACTIVATION_CAP_PENDING_BOUND);
#endif
  const bool stash_like = PLANTED == OKIT_PLANTED_stash || PLANTED == OKIT_PLANTED_crash ||
                          PLANTED == OKIT_PLANTED_stash_own_stream_restore ||
                          PLANTED == OKIT_PLANTED_stash_one_tier ||
                          PLANTED == OKIT_PLANTED_stash_one_tier_lenient;
  static const okit_plugin plugin{
      OKIT_ABI_VERSION, sizeof(okit_plugin), "planted-" OKIT_PLANTED_NAME, OFFLOADKIT_VERSION,
      stash_like ? &stash : nullptr,
      PLANTED == OKIT_PLANTED_region || PLANTED == OKIT_PLANTED_region_leak ||
              PLANTED == OKIT_PLANTED_region_no_caller_wait ||
              PLANTED == OKIT_PLANTED_region_pinned_per_pause ||
              PLANTED == OKIT_PLANTED_region_own_stream_resume
          ? &region
          : nullptr,
      // crash also carries a correct arena: its properties run after the crash and pass.
      PLANTED == OKIT_PLANTED_arena || PLANTED == OKIT_PLANTED_crash || planted_close ||
              PLANTED == OKIT_PLANTED_arena_pinned_per_offload
          ? &arena
          : nullptr,
      PLANTED == OKIT_PLANTED_activation || PLANTED == OKIT_PLANTED_activation_own_stream
          ? &activation
          : nullptr,
      nullptr};
  return host_abi_version == OKIT_ABI_VERSION ? &plugin : nullptr;
}
