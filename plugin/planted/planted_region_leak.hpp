// The planted region_leak black box: a region that maps physical chunks over one reservation with
// the driver's virtual-memory calls (resolved through the runtime, never by linking libcuda), and
// leaks the physical allocation when cuMemMap fails: what `offloadkit check --driver-faults` must
// report as a leak (on a GPU only). Built into the region_leak plugin only.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/detail/driver_vmm.hpp"
#include "offloadkit/detail/text.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/region/region.hpp"
#include "planted_support.hpp"

#if PLANTED == OKIT_PLANTED_region_leak

namespace offloadkit::planted {

/// The driver's virtual-memory calls, obtained as offloadkit's executor obtains them (through the
/// runtime, never by linking libcuda).
struct vmm_api : ok::detail::driver_vmm_calls {
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
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

}  // namespace offloadkit::planted

#endif
