// The injection library for CUDA_INJECTION64_PATH: the CUDA driver calls InitializeInjection()
// at cuInit in any CUDA process (PyTorch included); it starts the CUPTI recorder and writes the
// timeline (Chrome-trace JSON) to $OFFLOADKIT_CAPTURE_OUT when the process exits.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>

#include "offloadkit/traces/cupti_recorder.hpp"
#include "offloadkit/traces/export.hpp"

namespace {

offloadkit::traces::cupti_recorder* recorder = nullptr;
std::once_flag written;

void write_timeline() noexcept {
  std::call_once(written, [] {
    if (recorder == nullptr) return;
    const char* out = std::getenv("OFFLOADKIT_CAPTURE_OUT");
    try {
      recorder->stop();
      auto t = recorder->take();
      if (const char* cmd = std::getenv("OFFLOADKIT_CAPTURE_COMMAND")) t.source = cmd;
      std::string path = out != nullptr && *out != '\0' ? out : "offloadkit_timeline.json";
      // Child processes that use CUDA as well (workers) get files of their own, not the same one.
      const char* main_pid = std::getenv("OFFLOADKIT_CAPTURE_PID");
      if (main_pid != nullptr && std::to_string(getpid()) != main_pid) {
        path += "." + std::to_string(getpid()) + ".json";
      }
      offloadkit::traces::write_chrome_trace(t, path);
      std::fprintf(stderr, "offloadkit: wrote %zu records to %s\n", t.records.size(), path.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "offloadkit: could not write the timeline: %s\n", e.what());
    }
  });
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::once_flag started;
  int rc = 1;
  std::call_once(started, [&] {
    try {
      // Leaked: it must outlive static destructors that may still issue CUDA work at exit.
      recorder = new offloadkit::traces::cupti_recorder();
      recorder->start();
      std::atexit(write_timeline);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "offloadkit: recording disabled: %s\n", e.what());
      rc = 0;
    }
  });
  return rc;
}

// A process may end without running atexit handlers registered this late only through _exit or a
// signal; the destructor below covers dlclose and normal exit orderings alike.
__attribute__((destructor)) static void offloadkit_injection_fini() { write_timeline(); }
