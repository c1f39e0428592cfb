// The scenarios of `check --driver-faults` on a machine without a GPU, run by the same
// run_scenario() on the host executor. It writes the scenario's result as the check command's
// children do and asks the interposer for its report.
//
//   scenario_probe driver DRIVER clean|leak [RESULT_FD]
//     the region scenario on a region that calls the driver itself, here the stand-in driver
//     (reached through cuGetProcAddress_v2, as a CUDA runtime reaches it; the host executor's
//     copies reach its host memory)
//       clean  a failed cuMemMap releases the physical allocation it was for
//       leak   it does not (the planted bug of the GPU plugin planted_region_leak)
//   scenario_probe silent-overflow [RESULT_FD]
//     the stash scenario on offloadkit's reference stash with its overflows hidden (the status
//     word cleared right after a stash that failed): the scenario must say it was not reported
//   scenario_probe plugin PLUGIN FEATURE [RESULT_FD]
//     the scenario of FEATURE on a plugin's implementation that runs on the host executor: no
//     driver call is made, so every step must pass as it would in a run that reaches no call N
// The result goes to RESULT_FD when given (a file the parent reads), to stdout otherwise.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "offloadkit/detail/driver_vmm.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_executor.hpp"
#include "offloadkit/interpose/control.h"
#include "offloadkit/interpose/scenarios.hpp"
#include "offloadkit/plugin/host.hpp"
#include "offloadkit/stash/eager_stash_wrapper.hpp"

namespace {

namespace ok = offloadkit;

using vmm_api = ok::detail::driver_vmm_calls;

vmm_api api;

void cu_check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    throw ok::cuda_error(std::string(what) + " failed with CUresult " + std::to_string(r),
                         static_cast<int>(r));
  }
}

/// Chunks of physical memory mapped over one reservation; paused contents in a host vector.
class driver_region final : public ok::region::offload_region {
 public:
  driver_region(const ok::region::region_config& c, bool leak_on_failed_map)
      : bytes_(c.bytes), leak_(leak_on_failed_map) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    chunk_ = (std::max<std::size_t>(c.chunk_bytes, page) + page - 1) / page * page;
    const std::size_t n = (bytes_ + chunk_ - 1) / chunk_;
    handles_.assign(n, 0);
    host_.resize(bytes_);
    cu_check(api.reserve(&base_, n * chunk_, 0, 0, 0), "cuMemAddressReserve");
    try {
      for (std::size_t i = 0; i < n; ++i) map_chunk(i);
    } catch (...) {
      release_all();
      throw;
    }
  }
  ~driver_region() override { release_all(); }
  driver_region(const driver_region&) = delete;
  driver_region& operator=(const driver_region&) = delete;

 private:
  CUdeviceptr at(std::size_t i) const { return base_ + i * chunk_; }
  std::size_t used(std::size_t i) const { return std::min(chunk_, bytes_ - i * chunk_); }

  void map_chunk(std::size_t i) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle h = 0;
    cu_check(api.create(&h, chunk_, &prop, 0), "cuMemCreate");
    if (const CUresult r = api.map(at(i), chunk_, 0, h, 0); r != CUDA_SUCCESS) {
      if (!leak_) (void)api.release(h);
      cu_check(r, "cuMemMap");
    }
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (const CUresult r = api.set_access(at(i), chunk_, &access, 1); r != CUDA_SUCCESS) {
      (void)api.unmap(at(i), chunk_);
      (void)api.release(h);
      cu_check(r, "cuMemSetAccess");
    }
    handles_[i] = h;
  }

  void release_all() noexcept {
    for (std::size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i] == 0) continue;
      (void)api.unmap(at(i), chunk_);
      (void)api.release(handles_[i]);
      handles_[i] = 0;
    }
    if (base_ != 0) (void)api.address_free(base_, handles_.size() * chunk_);
    base_ = 0;
  }

  void* do_data() const noexcept override {
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(base_));
  }
  std::size_t do_size() const noexcept override { return bytes_; }
  int do_device() const noexcept override { return 0; }
  ok::region::region_state do_state() const noexcept override {
    const auto mapped = std::count_if(handles_.begin(), handles_.end(),
                                      [](CUmemGenericAllocationHandle h) { return h != 0; });
    if (static_cast<std::size_t>(mapped) == handles_.size())
      return ok::region::region_state::active;
    return mapped == 0 ? ok::region::region_state::paused : ok::region::region_state::partial;
  }
  bool do_address_stable() const noexcept override { return true; }
  std::size_t do_footprint() const noexcept override { return handles_.size() * chunk_; }
  std::size_t do_captures() const noexcept override { return 0; }
  // The scenario's copies run on the host executor's stream threads; the host executor orders
  // them before it returns from synchronize, and this region copies on the calling thread.
  void do_pause(ok::region::pause_mode, ok::stream_ref) override {
    for (std::size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i] == 0) continue;
      std::memcpy(host_.data() + i * chunk_, reinterpret_cast<void*>(at(i)), used(i));
      cu_check(api.unmap(at(i), chunk_), "cuMemUnmap");
      (void)api.release(handles_[i]);
      handles_[i] = 0;
    }
  }
  void do_resume(ok::stream_ref) override {
    for (std::size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i] != 0) continue;
      map_chunk(i);
      std::memcpy(reinterpret_cast<void*>(at(i)), host_.data() + i * chunk_, used(i));
    }
  }
  ok::region::graph_id do_register_graph(ok::region::capture_fn, ok::stream_ref) override {
    OFFLOADKIT_FAIL(ok::state_error, "driver_region: no graphs");
  }
  void do_replay(ok::region::graph_id, ok::stream_ref) override {
    OFFLOADKIT_FAIL(ok::state_error, "driver_region: no graphs");
  }
  void do_unregister_graph(ok::region::graph_id) noexcept override {}

  std::size_t bytes_;
  bool leak_;
  std::size_t chunk_ = 0;
  CUdeviceptr base_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::vector<unsigned char> host_;
};

template <class Fn>
void bind(PFN_cuGetProcAddress_v12000 gpa, const char* name, Fn& fn) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (gpa(name, &p, 13000, 0, &status) != CUDA_SUCCESS || p == nullptr) {
    std::fprintf(stderr, "scenario_probe: cannot bind %s\n", name);
    std::exit(2);
  }
  fn = reinterpret_cast<Fn>(p);
}

offloadkit::interpose::fault_subjects driver_subjects(const char* path, bool leak) {
  void* driver = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::fprintf(stderr, "scenario_probe: %s\n", dlerror());
    std::exit(2);
  }
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
  if (gpa == nullptr) std::exit(2);
  bind(gpa, "cuMemAddressReserve", api.reserve);
  bind(gpa, "cuMemAddressFree", api.address_free);
  bind(gpa, "cuMemCreate", api.create);
  bind(gpa, "cuMemRelease", api.release);
  bind(gpa, "cuMemMap", api.map);
  bind(gpa, "cuMemUnmap", api.unmap);
  bind(gpa, "cuMemSetAccess", api.set_access);
  ok::testing::region_implementation impl;
  impl.name = leak ? "driver-region-leaky" : "driver-region";
  impl.caps.address_stable = true;
  impl.support.host = true;
  impl.support.executor_allocations = false;
  impl.make = [leak](ok::executor&, ok::region::region_config c) {
    return std::unique_ptr<ok::region::offload_region>(std::make_unique<driver_region>(c, leak));
  };
  offloadkit::interpose::fault_subjects subjects;
  subjects.region = impl;
  return subjects;
}

/// The reference stash, with every failed stash() hidden: the status word is cleared at once.
class silent_overflow_stash final : public ok::stash::eager_stash_wrapper {
 public:
  silent_overflow_stash(ok::executor& ex, const ok::stash::stash_config& c, ok::stream_ref s)
      : eager_stash_wrapper(ex, c, s, "silent-overflow") {}

 private:
  void do_stash(const ok::stash::stash_key& k, const void* src, const std::uint64_t* rows,
                ok::stream_ref s) override {
    inner_.stash(k, src, rows, s);
    if (!inner_.status(s).ok()) inner_.clear_status(s);  // the overflow, hidden
  }
};

offloadkit::interpose::fault_subjects silent_overflow_subjects() {
  ok::testing::stash_implementation impl;
  impl.name = "silent-overflow";
  impl.support.cuda = false;
  impl.make = [](ok::executor& ex, const ok::stash::stash_config& c, ok::stream_ref s) {
    return std::unique_ptr<ok::stash::stash_interface>(
        std::make_unique<silent_overflow_stash>(ex, c, s));
  };
  offloadkit::interpose::fault_subjects subjects;
  subjects.stash = impl;
  return subjects;
}

offloadkit::interpose::fault_subjects plugin_subjects(const char* path) {
  const auto lib = ok::plugin::library::open(path);
  offloadkit::interpose::fault_subjects subjects;
  subjects.stash = ok::plugin::stash_of(lib);
  subjects.region = ok::plugin::region_of(lib);
  subjects.arena = ok::plugin::arena_of(lib);
  subjects.activation = ok::plugin::activation_of(lib);
  return subjects;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string kind = argc > 1 ? argv[1] : "";
  const bool driver = kind == "driver" && argc >= 4 &&
                      (std::strcmp(argv[3], "clean") == 0 || std::strcmp(argv[3], "leak") == 0);
  const bool silent = kind == "silent-overflow";
  if (!driver && !silent && !(kind == "plugin" && argc >= 4)) {
    std::fprintf(stderr,
                 "usage: scenario_probe driver DRIVER clean|leak [RESULT_FD]\n"
                 "       scenario_probe silent-overflow [RESULT_FD]\n"
                 "       scenario_probe plugin PLUGIN FEATURE [RESULT_FD]\n");
    return 2;
  }
  const offloadkit::interpose::fault_subjects subjects =
      silent   ? silent_overflow_subjects()
      : driver ? driver_subjects(argv[2], std::strcmp(argv[3], "leak") == 0)
               : plugin_subjects(argv[2]);
  const std::string feature = silent ? "stash" : driver ? "region" : argv[3];
  const int result_arg = silent ? 2 : 4;

  ok::host_executor ex;
  const auto result = offloadkit::interpose::run_scenario(feature, subjects, ex);
  const std::string text = "{\"scenario\":" + result.to_json() + "}";
  if (argc > result_arg) {
    const int fd = std::atoi(argv[result_arg]);
    if (pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) return 2;
  } else {
    std::printf("%s\n", text.c_str());
  }
  if (auto report = reinterpret_cast<okit_interpose_write_report_fn>(
          dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_WRITE_REPORT_SYMBOL))) {
    (void)report();
  }
  return 0;
}
