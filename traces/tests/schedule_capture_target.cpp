// A program for `offloadkit capture` that runs on the host executor (no GPU needed): two steps,
// each an NVTX range "step N", of a small pipeline rank whose stash row counts live in "device"
// memory and are recorded without a host synchronization (async_schedule_recorder). It writes
// the recorder's schedule file of the last step to argv[1]; the capture's NVTX marks must turn
// back into the same file (`offloadkit schedule-from-trace`, test traces_capture.schedule_routes).
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "offloadkit/host_executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/traces/async_recorder.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SCHEDULE.json\n", argv[0]);
    return 2;
  }
  namespace ot = offloadkit::traces;
  try {
    offloadkit::host_executor ex;
    offloadkit::stream s(ex);
    ot::schedule_shape shape;
    shape.name = "capture target, pp=4 rank=1";
    shape.pipeline_size = 4;
    shape.pipeline_rank = 1;
    shape.virtual_stages = 2;
    shape.layers = 3;
    shape.microbatches = 6;
    shape.row_bytes = {1024};
    shape.max_rows = 512;
    shape.page_rows = 64;
    const std::size_t keys = std::size_t{2} * 3 * 6;
    offloadkit::buffer dev(ex, offloadkit::memory_kind::device, keys * 4);
    offloadkit::buffer host(ex, offloadkit::memory_kind::pinned, keys * 4);
    std::mt19937 rng(7);
    for (int step = 0; step < 2; ++step) {
      nvtxRangePushA(("step " + std::to_string(step)).c_str());
      // The "router": this step's row counts, written to device memory in stream order.
      std::vector<std::uint32_t> rows(keys);
      for (auto& r : rows) r = std::uniform_int_distribution<std::uint32_t>(0, 512)(rng);
      std::memcpy(host.data(), rows.data(), keys * 4);
      ex.copy(dev.data(), host.data(), keys * 4, s);
      ot::async_schedule_recorder rec(shape, ex);
      const auto at = [&](std::uint32_t v, std::uint32_t l, std::uint32_t m) {
        return dev.as<std::uint32_t>() + ((std::size_t{v} * 3 + l) * 6) + m;
      };
      // 1F1B with two warm-up microbatches, each forward over (vp, layer) and back.
      std::uint32_t next_f = 0, next_b = 0;
      const auto forward = [&] {
        for (std::uint32_t v = 0; v < 2; ++v) {
          for (std::uint32_t l = 0; l < 3; ++l)
            rec.record_stash({v, l, next_f}, at(v, l, next_f), s);
        }
        ++next_f;
      };
      const auto backward = [&] {
        for (std::uint32_t v = 2; v-- > 0;) {
          for (std::uint32_t l = 3; l-- > 0;) rec.record_restore({v, l, next_b});
        }
        ++next_b;
      };
      forward();
      forward();
      while (next_b < 6) {
        if (next_f < 6) forward();
        backward();
      }
      rec.set_pools(64, 128);
      ex.synchronize(s);  // the step's end: the job synchronizes here anyway
      rec.resolve();
      nvtxRangePop();
      if (step == 1) rec.write(argv[1]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "schedule_capture_target: %s\n", e.what());
    return 1;
  }
  return 0;
}
