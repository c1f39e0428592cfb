// The injection library of `offloadkit capture`, for two loaders:
// - CUDA_INJECTION64_PATH: the CUDA driver calls InitializeInjection() at cuInit in any CUDA
//   process (PyTorch included); it starts the CUPTI recorder;
// - NVTX_INJECTION64_PATH: NVTX calls InitializeInjectionNvtx2() at the process's first NVTX call;
//   it installs offloadkit's NVTX collector, so that ranges, marks, domains and payloads of any
//   NVTX user (torch.cuda.nvtx, NVTX3 C/C++) reach the timeline.
// Both name this one file, so the loader maps it once. When the process exits, the timeline
// (Chrome-trace JSON) of both is written to $OFFLOADKIT_CAPTURE_OUT.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>

#include "offloadkit/traces/cupti_recorder.hpp"
#include "offloadkit/traces/export.hpp"
#include "offloadkit/traces/nvtx_collector.hpp"

namespace {

namespace ot = offloadkit::traces;

ot::cupti_recorder* recorder = nullptr;
std::once_flag written;
std::once_flag exit_hook;

void write_timeline() noexcept {
  std::call_once(written, [] {
    if (recorder == nullptr && !ot::nvtx_collector::attached()) return;
    const char* out = std::getenv("OFFLOADKIT_CAPTURE_OUT");
    try {
      ot::timeline t;
      if (recorder != nullptr) {
        recorder->stop();
        t = recorder->take();
      } else {
        t.source = "nvtx";  // no CUDA context was ever created: NVTX records only
      }
      for (auto& r : ot::nvtx_collector::take()) t.records.push_back(std::move(r));
      t.sort();
      if (const char* cmd = std::getenv("OFFLOADKIT_CAPTURE_COMMAND")) t.source = cmd;
      std::string path = out != nullptr && *out != '\0' ? out : "offloadkit_timeline.json";
      // Child processes that use CUDA as well (workers) get files of their own, not the same one.
      const char* main_pid = std::getenv("OFFLOADKIT_CAPTURE_PID");
      if (main_pid != nullptr && std::to_string(getpid()) != main_pid) {
        path += "." + std::to_string(getpid()) + ".json";
      }
      ot::write_chrome_trace(t, path);
      std::fprintf(stderr, "offloadkit: wrote %zu records to %s\n", t.records.size(), path.c_str());
      if (const std::size_t open = ot::nvtx_collector::open_ranges(); open != 0) {
        std::fprintf(stderr, "offloadkit: %zu NVTX ranges were still open at exit (not written)\n",
                     open);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "offloadkit: could not write the timeline: %s\n", e.what());
    }
  });
}

void at_exit_once() {
  std::call_once(exit_hook, [] { std::atexit(write_timeline); });
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::once_flag started;
  int rc = 1;
  std::call_once(started, [&] {
    try {
      // Leaked: it must outlive static destructors that may still issue CUDA work at exit.
      recorder = new ot::cupti_recorder();
      ot::cupti_recorder::options o;
      o.nvtx = false;  // NVTX comes through InitializeInjectionNvtx2 below, not through CUPTI
      recorder->start(o);
      at_exit_once();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "offloadkit: recording disabled: %s\n", e.what());
      delete recorder;
      recorder = nullptr;
      rc = 0;
    }
  });
  return rc;
}

// NOLINTNEXTLINE(readability-identifier-naming): the name NVTX looks for
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    const void* (*get_export_table)(std::uint32_t)) {
  // NVTX times on CUPTI's clock, so that ranges line up with the device work around them.
  ot::nvtx_collector::set_clock(&ot::cupti_recorder::timestamp_ns);
  const int rc = ot::nvtx_collector::attach(get_export_table);
  if (rc == 0) {
    std::fprintf(stderr, "offloadkit: NVTX offers no callback table; NVTX ranges not recorded\n");
  } else {
    at_exit_once();
  }
  return rc;
}

// A process may end without running atexit handlers registered this late only through _exit or a
// signal; the destructor below covers dlclose and normal exit orderings alike.
__attribute__((destructor)) static void offloadkit_injection_fini() { write_timeline(); }
