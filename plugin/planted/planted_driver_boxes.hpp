// The planted black boxes that call the driver themselves, through dlopen("libcuda.so.1") and
// dlsym as outside offload code does (planted_plugin.cpp says what each gets wrong and which
// instrument catches it): the driver's functions, a pinned allocation per pause (region) and per
// offload (arena), and uploads on a stream of their own that the caller's stream is not ordered
// after (region resume, stash restore, activation unpack).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "arena_wrapper.hpp"
#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/arena/coalesced_offloader.hpp"
#include "offloadkit/detail/text.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/eager_stash_wrapper.hpp"
#include "offloadkit/teardown.hpp"
#include "planted_support.hpp"

namespace offloadkit::planted {

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
class pinned_per_offload_arena final : public arena_wrapper<ok::arena::coalesced_offloader> {
 public:
  explicit pinned_per_offload_arena(ok::executor& ex) : arena_wrapper(ex) {
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
  [[nodiscard]] std::string do_name() const override { return "planted-pinned-per-offload"; }
  void free_table() noexcept {
    // cuMemFreeHost of a block this arena allocated: its status has nothing to say that the
    // interposer's ledger does not.
    if (table_ != nullptr) (void)driver().free_host(table_);
    table_ = nullptr;
  }

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

}  // namespace offloadkit::planted
