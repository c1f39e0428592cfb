// bench_stash_floor: the time floor of the batched stash on this device, as ratios to a plain
// copy. The paged stash's batch kernels (optimized/stash/src/paged_kernels.cuh) plan on the device
// (the keys' row counts and states are read there and their pages numbered by prefix sums), look
// each page up in a freelist, count their blocks so that the last one commits, write a page-table
// entry per page, stage each block's first item in shared memory while the plan is made, and hand
// the other items out from a counter. Here an SM copy kernel (16 KiB items, 256 threads a block,
// three blocks a multiprocessor, launched programmatically like the stash's kernels) takes those
// steps on one at a time, each with the stash's dependences (a store waits for the plan and for
// its page's id, the next item for the counter's answer) but none of its bookkeeping: no
// decisions, one tier, 16-byte units. So each ratio is a ceiling that a stash kernel taking the
// same steps would not beat. The rungs up to +table are the steps that the batch's contract (the
// result of one launch per key in order, page ids included, with row counts read on the device)
// leaves no such kernel without; staging and the counter are the stash kernels' own choices.
//
// Every step copies a layer out and back (two launches) and is timed against two
// cudaMemcpyAsync of the same bytes in the same run, as bench_stash's batch rows are; every
// step's copy is checked byte for byte (#wrong).
//
//   bench_stash_floor [--executor cuda|host] [--quick] [--windows N] [--json FILE] [--help]
// Exit status: 0 ok (or no GPU, or --executor host: skipped), 1 a copy was wrong or the run
// failed, 2 bad usage.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda/atomic>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "moe_layer.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/detail/cuda_try.hpp"
#include "offloadkit/host_device.hpp"
#include "offloadkit/launch.hpp"

namespace {

namespace tools = offloadkit::tools;

// The steps, as bits of the kernel's template argument; each row of the ladder adds one.
enum step : unsigned {
  plan = 1,      ///< warp 0 reads every key's row count and state and numbers their pages
  page_id = 2,   ///< each item's store waits for its page's id (a freelist load after the plan)
  count = 4,     ///< thread 0: release fence and a count of the block; the last block commits
  staged = 8,    ///< the first item's loads go to shared memory (cp.async) while warp 0 plans
  counter = 16,  ///< items after the first come from a launch-wide counter
  table = 32,    ///< a page-table entry written per page
  helper = 64,   ///< the count in a 9th warp that does not copy, instead of thread 0
};

constexpr unsigned copy_threads = 256;
constexpr unsigned lane_units = 4;                             // 16-byte units per thread and item
constexpr std::size_t item_units = copy_threads * lane_units;  // 16 KiB
constexpr std::size_t items_per_page = 32;                     // 512 KiB pages (64 rows of 8 KiB)

struct floor_args {
  const uint4* src;
  uint4* dst;
  std::size_t units;            ///< 16-byte units of the layer
  const std::uint64_t* rows;    ///< [keys] row counts
  const std::uint32_t* states;  ///< [keys] key states, all 0 (empty)
  const std::uint32_t* ids;     ///< [pages] freelist, ids[j] == j
  std::uint32_t* table;         ///< [pages]
  std::uint64_t* head;          ///< the freelist head, moved by the commit (by 0: ids stay)
  std::uint32_t* done;          ///< blocks counted in this launch
  std::uint32_t* next;          ///< items handed out in this launch
  std::uint32_t keys;
  std::uint64_t pages;  ///< the keys' pages in all (what the plan must find)
};

template <unsigned Steps>
constexpr unsigned block_threads() {
  return (Steps & helper) != 0 ? copy_threads + 32 : copy_threads;
}

__device__ inline void copy_barrier() {
  // The copying threads only: a helper warp never waits for them.
  asm volatile("bar.sync 1, %0;" ::"n"(copy_threads) : "memory");
}

/// Counts the block; the last to count commits (resets the count, moves the head by `delta`).
__device__ inline std::uint32_t count_block(const floor_args& a) {
  cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_device);
  return atomicAdd(a.done, 1u);
}
__device__ inline void commit_if_last(const floor_args& a, std::uint32_t before,
                                      std::uint64_t delta) {
  if (before + 1 != gridDim.x) return;
  cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_device);
  *a.done = 0;
  *a.head += delta;
}

/// The kernel of a rung, as a launch body (launch.hpp), so that it is launched as the stash's
/// bodies are: programmatically where the device and the compiled code allow it.
template <unsigned Steps>
struct floor_body {
  static constexpr bool programmatic_launch = true;
  static constexpr unsigned max_block_threads = block_threads<Steps>();
  static constexpr unsigned min_blocks_per_sm = 3;
  floor_args a;
  // One index per thread: the grid is exactly the launch's blocks.
  __device__ void operator()(std::size_t) const {
    __shared__ std::uint64_t plan_total, plan_head;
    __shared__ uint4 stage[item_units];
    __shared__ std::uint32_t handed;
    offloadkit::wait_for_prior_grids();
    const std::size_t items = (a.units + item_units - 1) / item_units;
    static_assert((Steps & helper) == 0 || (Steps & (plan | count)) == (plan | count),
                  "the helper warp counts once the plan is made");
    if ((Steps & helper) != 0 && threadIdx.x >= copy_threads) {
      __syncthreads();  // the plan
      if (threadIdx.x == copy_threads) {
        commit_if_last(a, count_block(a), plan_total - a.pages);
      }
      return;
    }
    std::size_t t = blockIdx.x;
    const bool copies = t < items;  // a block past the layer's items neither copies nor asks
    // The first item's loads, before anything else: into registers, or staged in shared memory.
    uint4 r[lane_units];
    for (unsigned j = 0; j < lane_units; ++j) {
      const std::size_t u = t * item_units + threadIdx.x + j * copy_threads;
      if (!copies || u >= a.units) continue;
      if ((Steps & staged) != 0) {
        const auto to =
            static_cast<unsigned>(__cvta_generic_to_shared(stage + threadIdx.x + j * copy_threads));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to),
                     "l"(__cvta_generic_to_global(a.src + u))
                     : "memory");
      } else {
        r[j] = a.src[u];
      }
    }
    // Every store's offset is 0 when the plan, the page ids and the head hold what they should; the
    // stores depend on those loads as a stash's stores depend on its plan and pages.
    std::int64_t planned = 0;
    if ((Steps & plan) != 0) {
      if (threadIdx.x < 32) {
        const unsigned lane = threadIdx.x;
        // Both of the lane's keys are loaded before either is used: one round of loads.
        const std::uint32_t k0 = lane, k1 = lane + 32;
        std::uint64_t rows0 = 0, rows1 = 0;
        std::uint32_t state0 = 1, state1 = 1;
        if (k0 < a.keys) {
          rows0 = a.rows[k0];
          state0 = a.states[k0];
        }
        if (k1 < a.keys) {
          rows1 = a.rows[k1];
          state1 = a.states[k1];
        }
        std::uint64_t pages =
            (state0 == 0 ? (rows0 + 63) / 64 : 0) + (state1 == 0 ? (rows1 + 63) / 64 : 0);
        for (unsigned o = 16; o > 0; o /= 2) pages += __shfl_xor_sync(0xffffffffu, pages, o);
        if (lane == 0) {
          plan_total = pages;
          plan_head = *a.head;
        }
      }
      __syncthreads();
      planned = static_cast<std::int64_t>(plan_total - a.pages);
    }
    std::uint32_t before = 0;
    if ((Steps & count) != 0 && (Steps & helper) == 0 && threadIdx.x == 0) before = count_block(a);
    for (unsigned round = 0; copies; ++round) {
      std::uint32_t asked = 0;
      if ((Steps & counter) != 0 && threadIdx.x == 0) asked = atomicAdd(a.next, 1u);
      std::int64_t off = planned;
      const std::size_t page = t / items_per_page;
      std::uint32_t id = static_cast<std::uint32_t>(page);
      if ((Steps & page_id) != 0) {
        static_assert((Steps & page_id) == 0 || (Steps & plan) != 0,
                      "page ids need the plan's head");
        std::uint64_t at = plan_head + page;
        if (at >= a.pages) at -= a.pages;
        id = a.ids[at];
        off += static_cast<std::int64_t>(id) - static_cast<std::int64_t>(at);
      }
      if ((Steps & table) != 0 && threadIdx.x == 0 && t % items_per_page == 0) a.table[page] = id;
      if (round == 0 && (Steps & staged) != 0) asm volatile("cp.async.wait_all;\n" ::: "memory");
      for (unsigned j = 0; j < lane_units; ++j) {
        const std::size_t u = t * item_units + threadIdx.x + j * copy_threads;
        if (u >= a.units) continue;
        a.dst[static_cast<std::int64_t>(u) + off] =
            round == 0 && (Steps & staged) != 0 ? stage[threadIdx.x + j * copy_threads] : r[j];
      }
      if ((Steps & counter) != 0) {
        if (threadIdx.x == 0) {
          handed = asked;
          if (asked == items - 1) *a.next = 0;
        }
        copy_barrier();
        t = gridDim.x + handed;
        copy_barrier();  // thread 0 writes `handed` again only after every thread has read it
      } else {
        t += gridDim.x;
      }
      if (t >= items) break;
      for (unsigned j = 0; j < lane_units; ++j) {
        const std::size_t u = t * item_units + threadIdx.x + j * copy_threads;
        if (u < a.units) r[j] = a.src[u];
      }
    }
    if ((Steps & count) != 0 && (Steps & helper) == 0 && threadIdx.x == 0) {
      commit_if_last(a, before, static_cast<std::uint64_t>(planned));
    }
  }
};

struct rung {
  const char* name;
  const char* adds;
  void (*launch)(const floor_args&, unsigned blocks, cudaStream_t);
  const void* kernel;
  unsigned threads;
};

template <unsigned Steps>
void launch_floor(const floor_args& a, unsigned blocks, cudaStream_t s) {
  const floor_body<Steps> body{a};
  constexpr unsigned threads = block_threads<Steps>();
  offloadkit::detail::device_launch<floor_body<Steps>>(&body, std::size_t{blocks} * threads,
                                                       threads, s);
  OFFLOADKIT_CUDA_TRY(cudaGetLastError());
}

template <unsigned Steps>
rung make_rung(const char* name, const char* adds) {
  return rung{name, adds, &launch_floor<Steps>,
              reinterpret_cast<const void*>(offloadkit::detail::kernel_for<floor_body<Steps>>()),
              block_threads<Steps>()};
}

/// The ladder: each rung adds one step to the one before. Up to +table, the steps that the
/// contract (a batch's result is that of one launch per key in order, row counts read on the
/// device) leaves no kernel without; then the stash kernels' own choices for larger layers.
std::vector<rung> ladder() {
  constexpr unsigned contract = plan | page_id | count | table;
  return {
      make_rung<0>("copy", "an SM copy kernel"),
      make_rung<plan>("+plan", "warp 0 numbers the keys' pages from their row counts"),
      make_rung<plan | page_id>("+page_id", "each store waits for its page's id"),
      make_rung<plan | page_id | count>("+count", "thread 0 fences and counts its block"),
      make_rung<contract>("+table", "a page-table entry per page (the contract's floor)"),
      make_rung<contract | staged>("+staged", "the first item staged in shared memory"),
      make_rung<contract | staged | counter>("+counter", "items after the first from a counter"),
      make_rung<contract | staged | counter | helper>(
          "helper_count", "the same, counted by a warp that does not copy")};
}

struct result {
  std::uint64_t mib = 0, keys = 0;
  double memcpy_us = 0;
  std::vector<double> us, ratio;
  std::vector<std::uint64_t> wrong;
};

template <class T>
T* device_alloc(std::size_t count) {
  void* p = nullptr;
  OFFLOADKIT_CUDA_TRY(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

result run_layer(const std::vector<rung>& rungs, std::uint64_t mib, std::uint64_t keys, int windows,
                 cudaStream_t s) {
  result r;
  r.mib = mib;
  r.keys = keys;
  const std::size_t bytes = mib << 20, units = bytes / 16;
  const std::uint64_t row_bytes = 8192, total_rows = bytes / row_bytes;
  // The rows of bench_stash's layers of hidden 4096 (its seed).
  const std::vector<std::uint64_t> rows =
      offloadkit::bench::layer_rows(keys, total_rows, keys * 7919 + 4096);
  // The keys' pages, each key's rounded up: at least the layer's, so every item's page has an id.
  std::uint64_t pages = 0;
  for (const std::uint64_t c : rows) pages += (c + 63) / 64;
  int device = 0, sms = 0;
  OFFLOADKIT_CUDA_TRY(cudaGetDevice(&device));
  OFFLOADKIT_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  auto* a = device_alloc<uint4>(units);
  auto* b = device_alloc<uint4>(units);
  auto* c = device_alloc<uint4>(units);
  auto* d_rows = device_alloc<std::uint64_t>(keys);
  auto* states = device_alloc<std::uint32_t>(keys);
  auto* ids = device_alloc<std::uint32_t>(pages);
  auto* page_table = device_alloc<std::uint32_t>(pages);
  auto* control = device_alloc<std::uint64_t>(2);  // head; done and next
  std::vector<unsigned char> host(bytes), back(bytes);
  std::mt19937_64 rng(mib * 31 + keys);
  for (std::size_t o = 0; o + 8 <= bytes; o += 8) {
    const std::uint64_t v = rng();
    std::memcpy(host.data() + o, &v, 8);
  }
  std::vector<std::uint32_t> identity(pages);
  for (std::uint32_t j = 0; j < pages; ++j) identity[j] = j;
  OFFLOADKIT_CUDA_TRY(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice));
  OFFLOADKIT_CUDA_TRY(cudaMemcpy(d_rows, rows.data(), keys * 8, cudaMemcpyHostToDevice));
  OFFLOADKIT_CUDA_TRY(cudaMemset(states, 0, keys * 4));
  OFFLOADKIT_CUDA_TRY(cudaMemcpy(ids, identity.data(), pages * 4, cudaMemcpyHostToDevice));
  OFFLOADKIT_CUDA_TRY(cudaMemset(control, 0, 16));

  floor_args out{a,
                 b,
                 units,
                 d_rows,
                 states,
                 ids,
                 page_table,
                 control,
                 reinterpret_cast<std::uint32_t*>(control + 1),
                 reinterpret_cast<std::uint32_t*>(control + 1) + 1,
                 static_cast<std::uint32_t>(keys),
                 pages};
  floor_args in = out;
  in.src = b;
  in.dst = c;
  std::vector<std::function<void()>> fns;
  fns.emplace_back([&] {
    OFFLOADKIT_CUDA_TRY(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    OFFLOADKIT_CUDA_TRY(cudaMemcpyAsync(c, b, bytes, cudaMemcpyDeviceToDevice, s));
  });
  for (const rung& g : rungs) {
    int per_sm = 0;
    OFFLOADKIT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, g.kernel, static_cast<int>(g.threads), 0));
    const auto blocks = static_cast<unsigned>(sms * std::min(per_sm, 3));
    fns.emplace_back([&, g, blocks] {
      g.launch(out, blocks, s);
      g.launch(in, blocks, s);
    });
  }
  // Medians of windows of 20 pairs, the functions' windows taking turns (as bench_stash).
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  OFFLOADKIT_CUDA_TRY(cudaEventCreate(&e0));
  OFFLOADKIT_CUDA_TRY(cudaEventCreate(&e1));
  constexpr int iters = 20;
  std::vector<std::vector<double>> t(fns.size());
  for (const auto& f : fns) f();
  for (int w = 0; w < windows; ++w) {
    for (std::size_t i = 0; i < fns.size(); ++i) {
      OFFLOADKIT_CUDA_TRY(cudaEventRecord(e0, s));
      for (int k = 0; k < iters; ++k) fns[i]();
      OFFLOADKIT_CUDA_TRY(cudaEventRecord(e1, s));
      OFFLOADKIT_CUDA_TRY(cudaEventSynchronize(e1));
      float ms = 0;
      OFFLOADKIT_CUDA_TRY(cudaEventElapsedTime(&ms, e0, e1));
      t[i].push_back(1e3 * ms / iters);
    }
  }
  r.memcpy_us = offloadkit::bench::median(t[0]);
  for (std::size_t i = 1; i < fns.size(); ++i) {
    r.us.push_back(offloadkit::bench::median(t[i]));
    r.ratio.push_back(r.memcpy_us / r.us.back());
    // Each rung's own copy, checked.
    OFFLOADKIT_CUDA_TRY(cudaMemsetAsync(c, 0, bytes, s));
    fns[i]();
    OFFLOADKIT_CUDA_TRY(cudaMemcpyAsync(back.data(), c, bytes, cudaMemcpyDeviceToHost, s));
    OFFLOADKIT_CUDA_TRY(cudaStreamSynchronize(s));
    std::uint64_t wrong = 0;
    for (std::size_t u = 0; u < units; ++u) {
      wrong += std::memcmp(back.data() + 16 * u, host.data() + 16 * u, 16) != 0;
    }
    r.wrong.push_back(wrong);
  }
  OFFLOADKIT_CUDA_TRY(cudaEventDestroy(e0));
  OFFLOADKIT_CUDA_TRY(cudaEventDestroy(e1));
  for (void* p : std::initializer_list<void*>{a, b, c, d_rows, states, ids, page_table, control}) {
    OFFLOADKIT_CUDA_TRY(cudaFree(p));
  }
  return r;
}

/// The figures as the JSON document --json writes.
offloadkit::bench::json figures(const std::vector<rung>& rungs,
                                const std::vector<result>& results) {
  using offloadkit::bench::json;
  json doc = {{"benchmark", "stash_floor"}, {"rungs", json::array()}, {"layers", json::array()}};
  for (const rung& g : rungs) doc["rungs"].push_back({{"name", g.name}, {"adds", g.adds}});
  for (const result& r : results) {
    doc["layers"].push_back({{"mib", r.mib},
                             {"keys", r.keys},
                             {"memcpy_us", r.memcpy_us},
                             {"us", r.us},
                             {"ratio", r.ratio},
                             {"wrong", r.wrong}});
  }
  return doc;
}

/// The benchmark, once its command line is read.
int run(const offloadkit::bench::command_line& cl, bool quick, int windows) {
  const std::vector<rung> rungs = ladder();
  const std::string skipped = offloadkit::bench::gpu_only_skip_reason(
      cl.executor_name(), "the floor is a set of GPU kernels, which need the cuda executor");
  if (!skipped.empty()) return cl.skip(skipped, figures(rungs, {}));
  cudaStream_t s = nullptr;
  OFFLOADKIT_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf(
      "# an SM copy kernel out and back with the stash batch kernels' steps added one at a "
      "time, against two cudaMemcpyAsync (memcpy); ratio = memcpy time / kernel pair time, "
      "median of %d windows of 20 pairs; log-normal row counts of 8 KiB rows, 64-row pages\n",
      quick ? 1 : windows);
  for (const rung& g : rungs) std::printf("#   %-13s %s\n", g.name, g.adds);
  std::printf("%5s %5s %10s", "MiB", "keys", "memcpy_us");
  for (const rung& g : rungs) std::printf(" %13s", g.name);
  std::printf(" %7s\n", "#wrong");
  std::vector<result> results;
  const std::vector<std::uint64_t> mibs =
      quick ? std::vector<std::uint64_t>{8} : std::vector<std::uint64_t>{8, 32, 128};
  const std::vector<std::uint64_t> key_counts =
      quick ? std::vector<std::uint64_t>{8} : std::vector<std::uint64_t>{8, 32, 64};
  for (const std::uint64_t mib : mibs) {
    for (const std::uint64_t keys : key_counts) {
      result r = run_layer(rungs, mib, keys, quick ? 1 : windows, s);
      std::uint64_t wrong = 0;
      std::printf("%5llu %5llu %10.2f", static_cast<unsigned long long>(mib),
                  static_cast<unsigned long long>(keys), r.memcpy_us);
      for (std::size_t j = 0; j < r.ratio.size(); ++j) {
        std::printf(" %13.3f", r.ratio[j]);
        wrong += r.wrong[j];
      }
      std::printf(" %7llu\n", static_cast<unsigned long long>(wrong));
      std::fflush(stdout);
      results.push_back(std::move(r));
    }
  }
  OFFLOADKIT_CUDA_TRY(cudaStreamDestroy(s));
  if (!cl.json_path().empty())
    offloadkit::bench::write_json(cl.json_path(), figures(rungs, results));
  for (const result& r : results) {
    for (const std::uint64_t w : r.wrong) {
      if (w != 0) {
        std::fprintf(stderr, "bench_stash_floor: a rung's copy was wrong (see #wrong)\n");
        return tools::exit_status::check_failed;
      }
    }
  }
  return tools::exit_status::ok;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int windows = 9;
  offloadkit::bench::command_line cl(
      "bench_stash_floor",
      "The floor of the batched stash on this device: an SM copy kernel, out and back, taking "
      "the stash batch kernels' steps on one at a time (device plan, page-id loads, block count, "
      "staging, item counter, page table), each against two cudaMemcpyAsync of the same bytes "
      "measured in the same run.",
      "Exit status: 0 ok (or no GPU, or --executor host: skipped), 1 a copy was wrong or the run "
      "failed, 2 bad usage.");
  cl.app().add_flag("--quick", quick, "one layer (8 MiB, 8 keys), 1 window (a smoke run)");
  cl.app()
      .add_option("--windows", windows,
                  "windows of 20 iterations per time, median taken, 1..100 (default 9)")
      ->type_name("N")
      ->check(tools::integer_range(1, 100));
  return cl.run(argc, argv, [&] { return run(cl, quick, windows); });
}
