// A program that calls the driver the way offload code does, for the interposer's tests: it loads a
// driver library, binds the counted functions by one route, and runs a small VMM region through
// create, pause and resume plus one device and two pinned allocations, handling each failed call
// as its mode says.
//
//   driver_probe DRIVER ROUTE MODE [--window-after-reserve] [--report-now] [--spawn-after-reserve]
//     ROUTE  exported        dlsym(RTLD_DEFAULT, ...): the symbols a program linking libcuda binds
//            dlsym           dlsym() on the driver's handle
//            procaddress     cuGetProcAddress_v2 from dlsym, then cuGetProcAddress_v2 obtained
//                            through itself (what a CUDA 12+ runtime does), for every function
//            procaddress_v1  the version-1 cuGetProcAddress ABI (CUDA 11.3 to 11.8 callers)
//     MODE   clean  undo the failed step, retry it once (exit 3 when the retry fails)
//            leak   as clean, but a chunk whose map failed keeps its physical handle (the bug)
//            exit   exit(1) at the first failure (the torch_memory_saver #87 class)
//            crash  SIGSEGV at the first failure
//   --window-after-reserve  closes the interposer's window for the reservation
//   --report-now            asks the interposer for its report before exiting
//   --spawn-after-reserve   once it holds its reservation, runs itself (without this option) as a
//                           child process and waits for it: a process started by the counted one
//
// Prints "probe: FUNCTION failed with error N" for each failed call, "probe: live N" (what the
// stand-in driver still holds at the end, when it can say) and "probe: ok". Exit status: 0 ok,
// 1 exit mode, 2 bad usage or setup, 3 a retry failed, 4 data mismatch.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "offloadkit/interpose/control.h"

#undef cuGetProcAddress

extern char** environ;

namespace {

constexpr std::size_t chunk_bytes = std::size_t{64} * 1024;
constexpr int chunks = 2;

struct api {
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemAlloc_v3020 alloc = nullptr;
  PFN_cuMemFree_v3020 free = nullptr;
  PFN_cuMemHostAlloc_v2020 host_alloc = nullptr;
  PFN_cuMemAllocHost_v3020 alloc_host = nullptr;
  PFN_cuMemFreeHost_v2000 free_host = nullptr;
};

std::string mode;

[[noreturn]] void fail_setup(const std::string& why) {
  std::fprintf(stderr, "driver_probe: %s\n", why.c_str());
  std::exit(2);
}

// Reports a failed call and acts as the mode says; returns when the caller should handle it.
bool ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  std::printf("probe: %s failed with error %d\n", what, static_cast<int>(r));
  std::fflush(stdout);
  if (mode == "exit") std::exit(1);
  if (mode == "crash") std::raise(SIGSEGV);
  return false;
}

[[noreturn]] void retry_failed(const char* what) {
  std::printf("probe: the retry of %s failed\n", what);
  std::exit(3);
}

template <class Fn>
void bind_one(Fn& fn, void* p, const char* name) {
  if (p == nullptr) fail_setup(std::string("cannot bind ") + name);
  fn = reinterpret_cast<Fn>(p);
}

api bind(void* driver, const std::string& route) {
  api a;
  // Each function's base name (for cuGetProcAddress) and exported symbol.
  const std::vector<std::pair<const char*, const char*>> names = {
      {"cuInit", "cuInit"},
      {"cuMemAddressReserve", "cuMemAddressReserve"},
      {"cuMemAddressFree", "cuMemAddressFree"},
      {"cuMemCreate", "cuMemCreate"},
      {"cuMemRelease", "cuMemRelease"},
      {"cuMemMap", "cuMemMap"},
      {"cuMemUnmap", "cuMemUnmap"},
      {"cuMemSetAccess", "cuMemSetAccess"},
      {"cuMemAlloc", "cuMemAlloc_v2"},
      {"cuMemFree", "cuMemFree_v2"},
      {"cuMemHostAlloc", "cuMemHostAlloc"},
      {"cuMemAllocHost", "cuMemAllocHost_v2"},
      {"cuMemFreeHost", "cuMemFreeHost"},
  };
  std::vector<void*> found;
  if (route == "exported" || route == "dlsym") {
    void* scope = route == "exported" ? RTLD_DEFAULT : driver;
    for (const auto& [base, symbol] : names) found.push_back(dlsym(scope, symbol));
  } else if (route == "procaddress") {
    auto first =
        reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
    if (first == nullptr) fail_setup("the driver has no cuGetProcAddress_v2");
    void* again = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (first("cuGetProcAddress", &again, 13000, 0, &status) != CUDA_SUCCESS || again == nullptr) {
      fail_setup("cuGetProcAddress_v2 cannot find cuGetProcAddress");
    }
    auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(again);
    for (const auto& [base, symbol] : names) {
      void* p = nullptr;
      found.push_back(gpa(base, &p, 13000, 0, &status) == CUDA_SUCCESS ? p : nullptr);
    }
  } else if (route == "procaddress_v1") {
    auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v11030>(dlsym(driver, "cuGetProcAddress"));
    if (gpa == nullptr) fail_setup("the driver has no cuGetProcAddress");
    for (const auto& [base, symbol] : names) {
      void* p = nullptr;
      found.push_back(gpa(base, &p, 11030, 0) == CUDA_SUCCESS ? p : nullptr);
    }
  } else {
    fail_setup("unknown route '" + route +
               "': valid routes are exported, dlsym, procaddress, procaddress_v1");
  }
  bind_one(a.init, found[0], "cuInit");
  bind_one(a.reserve, found[1], "cuMemAddressReserve");
  bind_one(a.address_free, found[2], "cuMemAddressFree");
  bind_one(a.create, found[3], "cuMemCreate");
  bind_one(a.release, found[4], "cuMemRelease");
  bind_one(a.map, found[5], "cuMemMap");
  bind_one(a.unmap, found[6], "cuMemUnmap");
  bind_one(a.set_access, found[7], "cuMemSetAccess");
  bind_one(a.alloc, found[8], "cuMemAlloc");
  bind_one(a.free, found[9], "cuMemFree");
  bind_one(a.host_alloc, found[10], "cuMemHostAlloc");
  bind_one(a.alloc_host, found[11], "cuMemAllocHost");
  bind_one(a.free_host, found[12], "cuMemFreeHost");
  return a;
}

struct region {
  const api* a = nullptr;
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle handle[chunks] = {};
  bool mapped[chunks] = {};

  CUdeviceptr at(int c) const { return base + static_cast<CUdeviceptr>(c) * chunk_bytes; }

  // create, map, set access; undone on failure (except the planted leak) and retried once.
  void map_chunk(int c) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int attempt = 0; attempt < 2; ++attempt) {
      CUmemGenericAllocationHandle h = 0;
      if (!ok(a->create(&h, chunk_bytes, &prop, 0), "cuMemCreate")) continue;
      if (!ok(a->map(at(c), chunk_bytes, 0, h, 0), "cuMemMap")) {
        if (mode != "leak") (void)a->release(h);
        continue;
      }
      if (!ok(a->set_access(at(c), chunk_bytes, &access, 1), "cuMemSetAccess")) {
        (void)a->unmap(at(c), chunk_bytes);
        (void)a->release(h);
        continue;
      }
      handle[c] = h;
      mapped[c] = true;
      return;
    }
    retry_failed("mapping a chunk");
  }

  void unmap_chunk(int c) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (ok(a->unmap(at(c), chunk_bytes), "cuMemUnmap")) break;
      if (attempt == 1) retry_failed("cuMemUnmap");
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (ok(a->release(handle[c]), "cuMemRelease")) break;
      if (attempt == 1) retry_failed("cuMemRelease");
    }
    mapped[c] = false;
  }
};

template <class F>
void with_retry(const char* what, F call) {
  if (ok(call(), what)) return;
  if (!ok(call(), what)) retry_failed(what);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fail_setup("usage: driver_probe DRIVER ROUTE MODE [--window-after-reserve] [--report-now]");
  }
  const std::string route = argv[2];
  mode = argv[3];
  if (mode != "clean" && mode != "leak" && mode != "exit" && mode != "crash") {
    fail_setup("unknown mode '" + mode + "': valid modes are clean, leak, exit, crash");
  }
  bool window_after_reserve = false;
  bool report_now = false;
  bool spawn_after_reserve = false;
  std::vector<char*> child_args = {argv[0], argv[1], argv[2], argv[3]};
  for (int i = 4; i < argc; ++i) {
    const std::string o = argv[i];
    if (o == "--window-after-reserve") {
      window_after_reserve = true;
    } else if (o == "--report-now") {
      report_now = true;
    } else if (o == "--spawn-after-reserve") {
      spawn_after_reserve = true;
      continue;
    } else {
      fail_setup("unknown option '" + o + "'");
    }
    child_args.push_back(argv[i]);
  }
  void* driver = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (driver == nullptr) fail_setup(std::string("cannot load the driver: ") + dlerror());
  const api a = bind(driver, route);
  auto set_window = reinterpret_cast<okit_interpose_set_window_fn>(
      dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_SET_WINDOW_SYMBOL));
  if (window_after_reserve && set_window == nullptr) {
    fail_setup("--window-after-reserve needs the interposer, which is not loaded");
  }
  if (!ok(a.init(0), "cuInit")) fail_setup("cuInit failed");

  region r;
  r.a = &a;
  if (window_after_reserve) set_window(0);
  with_retry("cuMemAddressReserve",
             [&] { return a.reserve(&r.base, chunks * chunk_bytes, 0, 0, 0); });
  if (window_after_reserve) set_window(1);
  if (spawn_after_reserve) {
    child_args.push_back(nullptr);
    pid_t pid = 0;
    int status = 0;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, child_args.data(), environ) != 0 ||
        waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fail_setup("the spawned copy of the probe failed");
    }
  }
  for (int c = 0; c < chunks; ++c) r.map_chunk(c);

  // Pause and resume with the contents kept on the host.
  std::vector<unsigned char> pattern(chunks * chunk_bytes);
  for (std::size_t i = 0; i < pattern.size(); ++i)
    pattern[i] = static_cast<unsigned char>(i * 7 + 3);
  std::memcpy(reinterpret_cast<void*>(r.base), pattern.data(), pattern.size());
  std::vector<unsigned char> host(pattern.size());
  std::memcpy(host.data(), reinterpret_cast<void*>(r.base), host.size());
  for (int c = 0; c < chunks; ++c) r.unmap_chunk(c);
  for (int c = 0; c < chunks; ++c) r.map_chunk(c);
  std::memcpy(reinterpret_cast<void*>(r.base), host.data(), host.size());
  if (std::memcmp(reinterpret_cast<void*>(r.base), pattern.data(), pattern.size()) != 0) {
    std::printf("probe: the region's contents differ after resume\n");
    return 4;
  }

  CUdeviceptr device = 0;
  with_retry("cuMemAlloc", [&] { return a.alloc(&device, 4096); });
  std::memset(reinterpret_cast<void*>(device), 1, 4096);
  with_retry("cuMemFree", [&] { return a.free(device); });
  void* pinned = nullptr;
  with_retry("cuMemHostAlloc", [&] { return a.host_alloc(&pinned, 8192, 0); });
  with_retry("cuMemFreeHost", [&] { return a.free_host(pinned); });
  with_retry("cuMemAllocHost", [&] { return a.alloc_host(&pinned, 4096); });
  with_retry("cuMemFreeHost", [&] { return a.free_host(pinned); });

  for (int c = 0; c < chunks; ++c) r.unmap_chunk(c);
  with_retry("cuMemAddressFree", [&] { return a.address_free(r.base, chunks * chunk_bytes); });

  if (auto live = reinterpret_cast<int (*)()>(dlsym(driver, "okit_fake_driver_live"))) {
    std::printf("probe: live %d\n", live());
  }
  if (report_now) {
    auto report = reinterpret_cast<okit_interpose_write_report_fn>(
        dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_WRITE_REPORT_SYMBOL));
    if (report == nullptr || report() != 0) fail_setup("the interposer wrote no report");
  }
  std::printf("probe: ok\n");
  return 0;
}
