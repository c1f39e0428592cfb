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

#include "offloadkit/activation/reference_offloader.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/arena/reference_offloader.hpp"
#include "offloadkit/plugin/export.hpp"
#include "offloadkit/region/reference_region.hpp"
#include "offloadkit/stash/eager_stash.hpp"
#include "offloadkit/stash/eager_stash_wrapper.hpp"
#include "offloadkit/teardown.hpp"

namespace {

namespace ok = offloadkit;

#define OKIT_PLANTED_stash 1
#define OKIT_PLANTED_region 2
#define OKIT_PLANTED_arena 3
#define OKIT_PLANTED_activation 4
#define OKIT_PLANTED_crash 5
#define OKIT_PLANTED_region_leak 6
#define OKIT_PLANTED_close 7
#define OKIT_PLANTED_close_v1 8
#define OKIT_PLANTED_region_no_caller_wait 9
#define OKIT_PLANTED_region_pinned_per_pause 10
#define OKIT_PLANTED_activation_own_stream 11
#define OKIT_PLANTED_arena_pinned_per_offload 12
#define OKIT_PLANTED_region_own_stream_resume 13
#define OKIT_PLANTED_stash_own_stream_restore 14
#define OKIT_PLANTED_stash_one_tier 15
#define OKIT_PLANTED_stash_one_tier_lenient 16
#define OKIT_PLANTED_PASTE(x) OKIT_PLANTED_##x
#define OKIT_PLANTED_OF(x) OKIT_PLANTED_PASTE(x)
#define PLANTED OKIT_PLANTED_OF(OFFLOADKIT_PLANTED)

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

/// The reference region behind the region interface: every entry but pause and resume forwards to
/// it. The planted regions below differ in those two.
class reference_region_wrapper : public ok::region::offload_region {
 public:
  reference_region_wrapper(ok::executor& ex, const ok::region::region_config& c)
      : ex_(&ex), inner_(ex, c) {}

 protected:
  [[nodiscard]] void* do_data() const noexcept override { return inner_.data(); }
  [[nodiscard]] std::size_t do_size() const noexcept override { return inner_.size(); }
  [[nodiscard]] int do_device() const noexcept override { return inner_.device(); }
  [[nodiscard]] ok::region::region_state do_state() const noexcept override {
    return inner_.state();
  }
  [[nodiscard]] bool do_address_stable() const noexcept override { return inner_.address_stable(); }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return inner_.footprint(); }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return inner_.captures(); }
  ok::region::graph_id do_register_graph(ok::region::capture_fn fn, ok::stream_ref s) override {
    return inner_.register_graph(std::move(fn), s);
  }
  void do_replay(ok::region::graph_id g, ok::stream_ref s) override { inner_.replay(g, s); }
  void do_unregister_graph(ok::region::graph_id g) noexcept override { inner_.unregister_graph(g); }

  ok::executor* ex_;
  ok::region::reference_region inner_;
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
class planted_arena final : public ok::arena::offloader {
 public:
  explicit planted_arena(ok::executor& ex) : ex_(&ex), inner_(ex) {
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
  ok::event do_offload(ok::arena::tensor_set_view set, ok::stream_ref s) override {
    return inner_.offload(set, s);
  }
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
  void do_release() noexcept override { inner_.release(); }
  [[nodiscard]] bool do_released() const noexcept override { return inner_.released(); }
  [[nodiscard]] bool do_holds_copy() const noexcept override { return inner_.holds_copy(); }
  [[nodiscard]] std::size_t do_host_bytes() const noexcept override { return inner_.host_bytes(); }
  [[nodiscard]] ok::arena::offload_promises do_promises() const noexcept override {
    return inner_.promises();
  }
  [[nodiscard]] std::string do_name() const override { return "planted"; }

  ok::executor* ex_;
  ok::arena::reference_offloader inner_;
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

/// The driver functions the black boxes call, from the driver library itself (never linked).
struct driver_api {
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuMemAllocHost_v3020 alloc_host = nullptr;
  PFN_cuMemFreeHost_v2000 free_host = nullptr;
  PFN_cuStreamCreate_v2000 stream_create = nullptr;
  PFN_cuStreamDestroy_v4000 stream_destroy = nullptr;
  PFN_cuStreamSynchronize_v2000 stream_synchronize = nullptr;
  PFN_cuMemcpyHtoDAsync_v3020 copy_to_device_async = nullptr;
  // Optional (the stand-in driver has no contexts): device 0's primary context, made current on a
  // thread that has none, as the CUDA runtime does before its first call on a thread.
  PFN_cuCtxGetCurrent_v4000 ctx_get_current = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctx_set_current = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain = nullptr;
};

void driver_check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    throw ok::cuda_error(ok::detail::concat("planted " OKIT_PLANTED_NAME ": ", what,
                                            " failed with CUresult ", static_cast<int>(r)),
                         static_cast<int>(r));
  }
}

template <class Fn>
void driver_symbol(void* lib, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (fn == nullptr) {
    throw ok::cuda_error(
        ok::detail::concat("planted " OKIT_PLANTED_NAME ": the driver has no ", symbol), 0);
  }
}

const driver_api& driver() {
  static const driver_api api = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      throw ok::cuda_error(
          ok::detail::concat("planted " OKIT_PLANTED_NAME ": libcuda.so.1 cannot be loaded: ",
                             why != nullptr ? why : "(no reason given)"),
          0);
    }
    driver_api a;
    driver_symbol(lib, "cuInit", a.init);
    driver_symbol(lib, "cuMemAllocHost_v2", a.alloc_host);
    driver_symbol(lib, "cuMemFreeHost", a.free_host);
    driver_symbol(lib, "cuStreamCreate", a.stream_create);
    driver_symbol(lib, "cuStreamDestroy_v2", a.stream_destroy);
    driver_symbol(lib, "cuStreamSynchronize", a.stream_synchronize);
    driver_symbol(lib, "cuMemcpyHtoDAsync_v2", a.copy_to_device_async);
    a.ctx_get_current = reinterpret_cast<PFN_cuCtxGetCurrent_v4000>(dlsym(lib, "cuCtxGetCurrent"));
    a.ctx_set_current = reinterpret_cast<PFN_cuCtxSetCurrent_v4000>(dlsym(lib, "cuCtxSetCurrent"));
    a.device_get = reinterpret_cast<PFN_cuDeviceGet_v2000>(dlsym(lib, "cuDeviceGet"));
    a.primary_ctx_retain = reinterpret_cast<PFN_cuDevicePrimaryCtxRetain_v7000>(
        dlsym(lib, "cuDevicePrimaryCtxRetain"));
    driver_check(a.init(0), "cuInit");
    return a;
  }();
  return api;
}

/// Makes device 0's primary context current where this thread has none (a no-op where the driver
/// has no contexts). The retained context is kept for the life of the process, as the runtime
/// keeps it.
void use_driver_context() {
  const driver_api& d = driver();
  if (d.ctx_get_current == nullptr || d.ctx_set_current == nullptr || d.device_get == nullptr ||
      d.primary_ctx_retain == nullptr) {
    return;
  }
  CUcontext current = nullptr;
  driver_check(d.ctx_get_current(&current), "cuCtxGetCurrent");
  if (current != nullptr) return;
  CUdevice dev = 0;
  driver_check(d.device_get(&dev, 0), "cuDeviceGet");
  CUcontext primary = nullptr;
  driver_check(d.primary_ctx_retain(&primary, dev), "cuDevicePrimaryCtxRetain");
  driver_check(d.ctx_set_current(primary), "cuCtxSetCurrent");
}

/// The reference region (which frees its device memory when paused), with the contents of a
/// preserving pause staged in a pinned buffer the region allocates from the driver on every pause
/// and frees at the resume after it: the planted bug is the allocation per cycle.
class pinned_per_pause_region final : public reference_region_wrapper {
 public:
  pinned_per_pause_region(ok::executor& ex, const ok::region::region_config& c)
      : reference_region_wrapper(ex, c) {
    (void)driver();  // fails here, at creation, where the driver cannot be had
  }
  ~pinned_per_pause_region() override {
    if (staging_ != nullptr) (void)driver().free_host(staging_);
  }
  pinned_per_pause_region(const pinned_per_pause_region&) = delete;
  pinned_per_pause_region& operator=(const pinned_per_pause_region&) = delete;

 private:
  void do_pause(ok::region::pause_mode m, ok::stream_ref s) override {
    if (m != ok::region::pause_mode::preserve ||
        inner_.state() != ok::region::region_state::active) {
      inner_.pause(m, s);  // a discarding pause, or one the reference region refuses
      return;
    }
    void* staging = nullptr;
    use_driver_context();
    driver_check(driver().alloc_host(&staging, inner_.size()), "cuMemAllocHost");  // every pause
    try {
      ex_->copy(staging, inner_.data(), inner_.size(), s);
      ex_->synchronize(s);
      inner_.pause(ok::region::pause_mode::discard, s);
    } catch (...) {
      (void)driver().free_host(staging);
      throw;
    }
    staging_ = staging;
  }
  void do_resume(ok::stream_ref s) override {
    inner_.resume(s);
    if (staging_ == nullptr) return;
    ex_->copy(inner_.data(), staging_, inner_.size(), s);
    ex_->synchronize(s);
    driver_check(driver().free_host(staging_), "cuMemFreeHost");
    staging_ = nullptr;
  }

  void* staging_ = nullptr;  ///< the contents while paused by a preserving pause
};

/// offloadkit's coalesced arena, with a table of the set's tensor sizes in pinned memory that it
/// allocates from the driver on every offload and frees at the reload after it (release and
/// destruction free it too): the planted bug is the allocation per cycle, which the executor never
/// sees. Everything the battery reads through the executor is the coalesced arena's own.
class pinned_per_offload_arena final : public ok::arena::offloader {
 public:
  explicit pinned_per_offload_arena(ok::executor& ex) : inner_(ex) {
    (void)driver();  // fails here, at creation, where the driver cannot be had
  }
  ~pinned_per_offload_arena() override { free_table(); }
  pinned_per_offload_arena(const pinned_per_offload_arena&) = delete;
  pinned_per_offload_arena& operator=(const pinned_per_offload_arena&) = delete;

 private:
  ok::event do_offload(ok::arena::tensor_set_view set, ok::stream_ref s) override {
    free_table();  // an offload again before a reload: the table of the one before goes
    use_driver_context();
    const std::size_t bytes = std::max<std::size_t>(set.size(), 1) * sizeof(std::uint64_t);
    void* table = nullptr;
    driver_check(driver().alloc_host(&table, bytes), "cuMemAllocHost");  // every offload
    auto* sizes = static_cast<std::uint64_t*>(table);
    for (const auto& t : set) *sizes++ = t.bytes;
    table_ = table;
    return inner_.offload(set, s);
  }
  ok::event do_reload(ok::arena::tensor_set_view set, ok::stream_ref s) override {
    ok::event e = inner_.reload(set, s);
    free_table();
    return e;
  }
  void do_release() noexcept override {
    free_table();
    inner_.release();
  }
  [[nodiscard]] bool do_released() const noexcept override { return inner_.released(); }
  [[nodiscard]] bool do_holds_copy() const noexcept override { return inner_.holds_copy(); }
  [[nodiscard]] std::size_t do_host_bytes() const noexcept override { return inner_.host_bytes(); }
  [[nodiscard]] ok::arena::offload_promises do_promises() const noexcept override {
    return inner_.promises();
  }
  [[nodiscard]] std::string do_name() const override { return "planted-pinned-per-offload"; }
  void free_table() noexcept {
    // cuMemFreeHost of a block this arena allocated: its status has nothing to say that the
    // interposer's ledger does not.
    if (table_ != nullptr) (void)driver().free_host(table_);
    table_ = nullptr;
  }

  ok::arena::coalesced_offloader inner_;
  void* table_ = nullptr;  ///< the last offload's table of sizes, until its reload
};

/// A stream the offloader creates from the driver, destroyed once nothing holds it (a tensor
/// handed out may outlive the offloader).
class driver_stream {
 public:
  driver_stream() {
    use_driver_context();
    driver_check(driver().stream_create(&stream_, 0), "cuStreamCreate");
  }
  ~driver_stream() {
    (void)driver().stream_synchronize(stream_);
    (void)driver().stream_destroy(stream_);
  }
  driver_stream(const driver_stream&) = delete;
  driver_stream& operator=(const driver_stream&) = delete;
  [[nodiscard]] CUstream get() const noexcept { return stream_; }
  void synchronize() const {
    driver_check(driver().stream_synchronize(stream_), "cuStreamSynchronize");
  }

 private:
  CUstream stream_ = nullptr;
};

/// What the own-stream black boxes below share: a pinned staging buffer from the driver (allocated
/// at its first use, of a fixed size) and a stream of the driver's on which its contents are
/// uploaded. The destructor waits for the stream before the buffer goes.
class driver_upload {
 public:
  driver_upload() : stream_(std::make_unique<driver_stream>()) {}
  ~driver_upload() {
    try {
      stream_->synchronize();
    } catch (const std::exception& e) {
      // A destructor cannot throw: the table's close reports what is recorded here.
      ok::record_teardown_error(e.what());
    }
    if (staging_ != nullptr) (void)driver().free_host(staging_);
  }
  driver_upload(const driver_upload&) = delete;
  driver_upload& operator=(const driver_upload&) = delete;

  /// The staging buffer, `bytes` long (at least 1) on its first use.
  void* staging(std::size_t bytes) {
    if (staging_ == nullptr) {
      use_driver_context();
      driver_check(driver().alloc_host(&staging_, std::max<std::size_t>(bytes, 1)),
                   "cuMemAllocHost");
    }
    return staging_;
  }
  /// Waits until the last upload has read the staging buffer and written its destination.
  void wait() { stream_->synchronize(); }
  /// Uploads the first `bytes` of the staging buffer to `dst` on the driver's stream and returns
  /// at once: nothing else waits for it.
  void upload(void* dst, std::size_t bytes) {
    use_driver_context();
    driver_check(driver().copy_to_device_async(reinterpret_cast<CUdeviceptr>(dst), staging_, bytes,
                                               stream_->get()),
                 "cuMemcpyHtoDAsync");
  }

 private:
  std::unique_ptr<driver_stream> stream_;
  void* staging_ = nullptr;
};

/// The reference region (which frees its device memory when paused), with the contents of a
/// preserving pause kept in a pinned buffer it allocates from the driver once, and the planted
/// bug: resume() uploads them with cuMemcpyHtoDAsync on a stream of its own and returns without
/// making the caller's stream wait for the upload, so the caller's next work may read or write the
/// region before the contents land. Its own later calls wait for the upload: a pause, and the
/// destructor, synchronize its stream first.
class own_stream_resume_region final : public reference_region_wrapper {
 public:
  own_stream_resume_region(ok::executor& ex, const ok::region::region_config& c)
      : reference_region_wrapper(ex, c) {}

 private:
  void do_pause(ok::region::pause_mode m, ok::stream_ref s) override {
    upload_.wait();  // its own upload lands before anything is copied out or given back
    preserved_ = false;
    if (m != ok::region::pause_mode::preserve ||
        inner_.state() != ok::region::region_state::active) {
      inner_.pause(m, s);
      return;
    }
    ex_->copy(upload_.staging(inner_.size()), inner_.data(), inner_.size(), s);
    ex_->synchronize(s);
    inner_.pause(ok::region::pause_mode::discard, s);
    preserved_ = true;
  }
  void do_resume(ok::stream_ref s) override {
    inner_.resume(s);
    if (!preserved_ || inner_.size() == 0) return;
    ex_->synchronize(s);  // the region's memory is mapped again before the upload writes it
    upload_.upload(inner_.data(), inner_.size());
    preserved_ = false;  // the planted bug: the caller's stream does not wait for the upload
  }

  driver_upload upload_;  ///< the contents while paused by a preserving pause, and their way back
  bool preserved_ = false;
};

/// The reference stash, whose restore() lands the rows in a pinned buffer it allocated from the
/// driver and uploads them to the caller's buffer with cuMemcpyHtoDAsync on a stream of its own.
/// The planted bug: it returns without making the caller's stream wait for that upload, so the
/// caller's next work may read the buffer before the rows land. The row count goes to the caller
/// on its own stream, in order. Its own next restore, and the destructor, wait for the upload.
class own_stream_restore_stash final : public ok::stash::eager_stash_wrapper {
 public:
  own_stream_restore_stash(ok::executor& ex, const ok::stash::stash_config& c, ok::stream_ref s)
      : eager_stash_wrapper(ex, c, s, "planted-own-stream-restore"),
        count_(ex, ok::memory_kind::pinned, sizeof(std::uint64_t)) {}

 private:
  void do_restore(const ok::stash::stash_key& k, void* dst, std::uint64_t* rows_out,
                  ok::stream_ref s) override {
    upload_.wait();  // its own last upload has read the staging buffer
    const ok::stash::stash_config& c = inner_.config();
    void* staging = upload_.staging(c.max_rows * c.row_bytes);
    auto* count = count_.as<std::uint64_t>();
    *count = 0;
    inner_.restore(k, staging, count, s);  // synchronous: the rows are in the staging buffer now
    if (rows_out != nullptr) ex_->copy(rows_out, count, sizeof(std::uint64_t), s);
    ex_->synchronize(s);
    const std::size_t bytes = static_cast<std::size_t>(*count) * c.row_bytes;
    if (bytes == 0) return;
    upload_.upload(dst, bytes);  // the planted bug: the caller's stream does not wait for it
  }
  void do_reset(ok::stream_ref s) override {
    upload_.wait();
    inner_.reset(s);
  }

  ok::buffer count_;      ///< the restored row count, read on the host
  driver_upload upload_;  ///< the restored rows on their way to the caller's buffer
};

/// An activation offloader that keeps packed tensors in pinned memory (copied synchronously in
/// pack()) and uploads them in unpack() with cuMemcpyHtoDAsync on a stream of its own. The planted
/// bug: unpack() returns without making the caller's stream wait for that upload (no event
/// recorded on its stream and waited for on the caller's), so the caller's next work may read the
/// tensor before it lands. Nothing else is wrong: the host copy is freed only once the upload is
/// done, and a released tensor's memory only once the upload into it is.
class own_stream_activation final : public ok::activation::offloader {
 public:
  own_stream_activation(ok::executor& ex, const ok::activation::offload_options& o)
      : ex_(&ex), options_(o), stream_(std::make_shared<driver_stream>()) {}
  ~own_stream_activation() override {
    try {
      stream_->synchronize();
    } catch (const std::exception& err) {
      // A destructor cannot throw: the table's close reports what is recorded here.
      ok::record_teardown_error(err.what());
    }
    free_uploaded();
    for (auto& [id, e] : entries_) {
      if (e.host != nullptr) {
        ex_->deallocate(ok::memory_kind::pinned, e.host, std::max<std::size_t>(e.source.bytes, 1));
      }
      if (e.host == nullptr && e.source.release) {
        try {
          e.source.release();
        } catch (const std::exception& err) {
          // A destructor cannot report the owner's failure; the others still go back.
          ok::record_teardown_error(err.what());
        }
      }
    }
  }
  own_stream_activation(const own_stream_activation&) = delete;
  own_stream_activation& operator=(const own_stream_activation&) = delete;

 private:
  struct entry {
    ok::activation::tensor source;
    void* host = nullptr;  ///< null: kept on the device
  };

  ok::activation::handle do_pack(ok::activation::tensor t, ok::stream_ref s) override {
    ok::activation::validate_for_pack(t, ex_->device_count());
    entry e;
    if (t.bytes >= options_.keep_threshold) {
      e.host = ex_->allocate(ok::memory_kind::pinned, std::max<std::size_t>(t.bytes, 1));
      try {
        if (t.bytes > 0) {
          ex_->copy(e.host, t.data, t.bytes, s);
          ex_->synchronize(s);
        }
      } catch (...) {
        ex_->deallocate(ok::memory_kind::pinned, e.host, std::max<std::size_t>(t.bytes, 1));
        throw;
      }
      stats_.offloaded_bytes += t.bytes;
      auto release = std::move(t.release);
      t.release = nullptr;
      t.data = nullptr;
      if (release) release();
    } else {
      stats_.kept += 1;
    }
    stats_.packed += 1;
    e.source = std::move(t);
    const ok::activation::handle h{next_id_++};
    entries_.emplace(h.id, std::move(e));
    return h;
  }

  ok::activation::tensor do_unpack(ok::activation::handle h, ok::stream_ref s) override {
    auto it = entries_.find(h.id);
    OFFLOADKIT_EXPECTS(it != entries_.end(), ok::out_of_range, "handle ", h.id,
                       " is not packed (never packed, or already unpacked); valid ids lie in [1, ",
                       next_id_, ")");
    entry& e = it->second;
    if (e.host == nullptr) {
      ok::activation::tensor t = std::move(e.source);
      entries_.erase(it);
      return t;
    }
    const std::size_t bytes = e.source.bytes;
    const std::size_t held = std::max<std::size_t>(bytes, 1);
    void* dev = ex_->allocate(ok::memory_kind::device, held, e.source.device);
    if (bytes > 0) {
      const CUresult r = driver().copy_to_device_async(
          static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(dev)), e.host, bytes,
          stream_->get());
      if (r != CUDA_SUCCESS) {
        ex_->deallocate(ok::memory_kind::device, dev, held);
        driver_check(r, "cuMemcpyHtoDAsync");
      }
    }
    // The planted bug: the caller's stream `s` is not made to wait for the upload.
    stats_.restored_bytes += bytes;
    stats_.demand_uploads += 1;
    uploaded_.emplace_back(e.host, held);  // freed once the stream is seen done
    ok::activation::tensor t = std::move(e.source);
    entries_.erase(it);
    t.data = dev;
    ok::executor* ex = ex_;
    std::shared_ptr<driver_stream> own = stream_;
    t.release = [ex, dev, held, s, own] {
      ex->synchronize(s);
      own->synchronize();  // the upload into it has landed before the memory goes
      ex->deallocate(ok::memory_kind::device, dev, held);
    };
    return t;
  }

  void free_uploaded() noexcept {
    for (const auto& [p, n] : uploaded_) ex_->deallocate(ok::memory_kind::pinned, p, n);
    uploaded_.clear();
  }

  void do_forward_layer_end(int /*layer*/, ok::stream_ref /*s*/) override {}
  void do_backward_layer_begin(int /*layer*/, ok::stream_ref /*s*/) override {}
  void do_synchronize() override {
    stream_->synchronize();
    free_uploaded();
  }
  [[nodiscard]] std::size_t do_keep_threshold() const noexcept override {
    return options_.keep_threshold;
  }
  [[nodiscard]] ok::activation::offload_stats do_stats() const override { return stats_; }
  [[nodiscard]] std::string do_name() const override { return "planted-own-stream"; }

  ok::executor* ex_;
  ok::activation::offload_options options_;
  std::shared_ptr<driver_stream> stream_;
  std::map<std::uint64_t, entry> entries_;
  std::vector<std::pair<void*, std::size_t>> uploaded_;  ///< host copies of uploads in flight
  std::uint64_t next_id_ = 1;
  ok::activation::offload_stats stats_;
};

#if PLANTED == OKIT_PLANTED_region_leak

/// The driver's virtual-memory calls, obtained as offloadkit's executor obtains them (through the
/// runtime, never by linking libcuda).
struct vmm_api {
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
};

template <class Fn>
void resolve(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    throw ok::cuda_error(
        std::string("planted region_leak: the driver entry point ") + symbol + " is unavailable",
        static_cast<int>(status));
  }
  fn = reinterpret_cast<Fn>(p);
}

const vmm_api& vmm() {
  static const vmm_api api = [] {
    vmm_api a;
    resolve("cuMemGetAllocationGranularity", a.granularity);
    resolve("cuMemAddressReserve", a.reserve);
    resolve("cuMemAddressFree", a.address_free);
    resolve("cuMemCreate", a.create);
    resolve("cuMemRelease", a.release);
    resolve("cuMemMap", a.map);
    resolve("cuMemUnmap", a.unmap);
    resolve("cuMemSetAccess", a.set_access);
    return a;
  }();
  return api;
}

void cu_check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    throw ok::cuda_error(ok::detail::concat("planted region_leak: ", what, " failed with CUresult ",
                                            static_cast<int>(r)),
                         static_cast<int>(r));
  }
}

void rt_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw ok::cuda_error(
        ok::detail::concat("planted region_leak: ", what, " failed: ", cudaGetErrorName(e)),
        static_cast<int>(e));
  }
}

/// A graph-stable region over the driver's VMM calls made by the plugin itself (one physical
/// allocation per chunk, contents kept in pageable host memory while paused), with the planted
/// bug: when cuMemMap fails, the physical allocation cuMemCreate just made is never released.
/// Everything else is as it should be, so a retry succeeds and the data survive; only the ledger
/// shows the leak.
class leaky_vmm_region final : public ok::region::offload_region {
 public:
  leaky_vmm_region(ok::executor& ex, const ok::region::region_config& c)
      : ex_(&ex), bytes_(c.bytes), device_(c.device) {
    OFFLOADKIT_EXPECTS(c.bytes > 0, ok::out_of_range, "planted region_leak: bytes = 0");
    current_device guard(device_);
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = device_;
    std::size_t g = 0;
    cu_check(vmm().granularity(&g, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
             "cuMemGetAllocationGranularity");
    chunk_ = round_up(c.chunk_bytes != 0 ? c.chunk_bytes : g, g);
    reserved_ = round_up(bytes_, chunk_);
    chunks_ = reserved_ / chunk_;
    host_ = std::make_unique<unsigned char[]>(bytes_);
    handles_ = std::make_unique<CUmemGenericAllocationHandle[]>(chunks_);
    cu_check(vmm().reserve(&base_, reserved_, g, 0, 0), "cuMemAddressReserve");
    try {
      for (std::size_t i = 0; i < chunks_; ++i) map_chunk(i);
    } catch (...) {
      release_all();
      throw;
    }
  }
  ~leaky_vmm_region() override {
    for (auto& [id, g] : graphs_) ex_->destroy_graph(g);
    // No throwing guard here: a destructor gives back what it can.
    int previous = 0;
    const bool switched =
        cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(device_) == cudaSuccess;
    release_all();
    if (switched) (void)cudaSetDevice(previous);
    (void)cudaGetLastError();
  }
  leaky_vmm_region(const leaky_vmm_region&) = delete;
  leaky_vmm_region& operator=(const leaky_vmm_region&) = delete;

 private:
  /// Makes a device current for a scope; the caller's comes back at its end.
  class current_device {
   public:
    explicit current_device(int device) {
      rt_check(cudaGetDevice(&previous_), "cudaGetDevice");
      rt_check(cudaSetDevice(device), "cudaSetDevice");
    }
    ~current_device() { (void)cudaSetDevice(previous_); }
    current_device(const current_device&) = delete;
    current_device& operator=(const current_device&) = delete;

   private:
    int previous_ = 0;
  };

  static std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }
  [[nodiscard]] CUdeviceptr at(std::size_t i) const { return base_ + i * chunk_; }
  [[nodiscard]] std::size_t used(std::size_t i) const {
    return std::min(chunk_, bytes_ - std::min(bytes_, i * chunk_));
  }

  void map_chunk(std::size_t i) {
    CUmemGenericAllocationHandle h = 0;
    cu_check(vmm().create(&h, chunk_, &prop_, 0), "cuMemCreate");
    // The planted bug: on failure `h` is dropped without cuMemRelease.
    cu_check(vmm().map(at(i), chunk_, 0, h, 0), "cuMemMap");
    CUmemAccessDesc access{};
    access.location = prop_.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const CUresult r = vmm().set_access(at(i), chunk_, &access, 1);
    if (r != CUDA_SUCCESS) {
      (void)vmm().unmap(at(i), chunk_);
      (void)vmm().release(h);
      cu_check(r, "cuMemSetAccess");
    }
    handles_[i] = h;
  }

  void unmap_chunk(std::size_t i) {
    cu_check(vmm().unmap(at(i), chunk_), "cuMemUnmap");
    (void)vmm().release(handles_[i]);
    handles_[i] = 0;
  }

  void release_all() noexcept {
    for (std::size_t i = 0; i < chunks_; ++i) {
      if (handles_[i] == 0) continue;
      (void)vmm().unmap(at(i), chunk_);
      (void)vmm().release(handles_[i]);
      handles_[i] = 0;
    }
    if (base_ != 0) (void)vmm().address_free(base_, reserved_);
    base_ = 0;
  }

  [[nodiscard]] void* do_data() const noexcept override {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(base_));
  }
  [[nodiscard]] std::size_t do_size() const noexcept override { return bytes_; }
  [[nodiscard]] int do_device() const noexcept override { return device_; }
  [[nodiscard]] ok::region::region_state do_state() const noexcept override {
    std::size_t n = 0;
    for (std::size_t i = 0; i < chunks_; ++i) n += handles_[i] != 0 ? 1 : 0;
    if (n == chunks_) return ok::region::region_state::active;
    return n == 0 ? ok::region::region_state::paused : ok::region::region_state::partial;
  }
  [[nodiscard]] bool do_address_stable() const noexcept override { return true; }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return reserved_; }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return captures_; }

  void do_pause(ok::region::pause_mode mode, ok::stream_ref s) override {
    current_device guard(device_);
    auto stream = static_cast<cudaStream_t>(s.native);
    rt_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    for (std::size_t i = 0; i < chunks_; ++i) {
      if (handles_[i] == 0) continue;
      if (mode == ok::region::pause_mode::preserve && used(i) > 0) {
        rt_check(cudaMemcpyAsync(host_.get() + i * chunk_, do_data_at(i), used(i),
                                 cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync");
        rt_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      }
      unmap_chunk(i);
    }
  }

  void do_resume(ok::stream_ref s) override {
    current_device guard(device_);
    auto stream = static_cast<cudaStream_t>(s.native);
    for (std::size_t i = 0; i < chunks_; ++i) {
      if (handles_[i] != 0) continue;
      map_chunk(i);
      if (used(i) > 0) {
        rt_check(cudaMemcpyAsync(do_data_at(i), host_.get() + i * chunk_, used(i),
                                 cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync");
      }
    }
    rt_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

  [[nodiscard]] void* do_data_at(std::size_t i) const {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(at(i)));
  }

  ok::region::graph_id do_register_graph(ok::region::capture_fn fn, ok::stream_ref s) override {
    const ok::graph_ref g = ok::region::detail::capture_graph(*ex_, fn, do_data(), s);
    ++captures_;
    graphs_.emplace_back(next_id_, g);
    return next_id_++;
  }
  void do_replay(ok::region::graph_id id, ok::stream_ref s) override {
    for (auto& [gid, g] : graphs_) {
      if (gid == id) return ex_->replay(g, s);
    }
    OFFLOADKIT_FAIL(ok::out_of_range, "planted region_leak: graph ", id, " is not registered");
  }
  void do_unregister_graph(ok::region::graph_id id) noexcept override {
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if (it->first != id) continue;
      ex_->destroy_graph(it->second);
      graphs_.erase(it);
      return;
    }
  }

  ok::executor* ex_;
  std::size_t bytes_;
  int device_;
  CUmemAllocationProp prop_{};
  std::size_t chunk_ = 0;
  std::size_t reserved_ = 0;
  CUdeviceptr base_ = 0;
  std::size_t chunks_ = 0;
  std::unique_ptr<unsigned char[]> host_;
  /// Per chunk: its physical allocation while mapped, 0 while not.
  std::unique_ptr<CUmemGenericAllocationHandle[]> handles_;
  std::vector<std::pair<ok::region::graph_id, ok::graph_ref>> graphs_;
  ok::region::graph_id next_id_ = 1;
  std::size_t captures_ = 0;
};

#endif

}  // namespace

extern "C" OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  namespace op = offloadkit::plugin;
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
