// bench_activation_mlp: the headline comparison. An MLP stack (blocks of Linear h->4h, GELU,
// Linear 4h->h, bf16, the GEMMs by cuBLAS) trained for one step with every saved activation (each
// block's input, pre-GELU and post-GELU tensors, as autograd saves them) offloaded by the
// optimized activation offloader, against the same step without offload. Reports each phase
// against max(phase without offload, phase copy floor), both measured in the same repetition
// (the floor: the phase's tensors copied plainly, right before it), and the step time against
// PyTorch's save_on_cpu(pin_memory=True) on the same shapes (measured by
// traces/pytorch_save_on_cpu.py, read with --pytorch). The offloader holds at most
// one block's sources while their copies are in flight (max_pending_bytes). A second table gives
// the peak device memory of activation buffers in use without offload, with that offloader, and
// with the same offloader without the bound. Offload must not change the result: the
// input gradient and the first block's weight gradient are hashed in every run and compared
// (#wrong).
//
// cuBLAS is loaded with dlopen so that the binary starts where it is missing (it then prints
// "skipped: ..."), like every offloadkit binary starts without a driver.
//
//   bench_activation_mlp [--executor cuda|host] [--quick] [--blocks N] [--shape HxT]
//                        [--pytorch FILE] [--json FILE] [--help]
// Exit status: 0 ok (or no GPU, cuBLAS or cuda executor: skipped), 1 the gradients differ or the
// run failed, 2 bad usage.
#include <cublas_api.h>
#include <cuda_bf16.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda/atomic>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.hpp"
#include "offloadkit/activation/async_offloader.hpp"
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/detail/splitmix64.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_device.hpp"
#include "offloadkit/launch.hpp"
#include "offloadkit/resources.hpp"

namespace {

using namespace offloadkit;
using bench::median;
using namespace offloadkit::activation;
using bf16 = __nv_bfloat16;

// ---- cuBLAS through dlopen ----------------------------------------------------------------------

struct cublas_api {
  void* lib = nullptr;
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;

  /// Empty on success, else why cuBLAS is not usable.
  std::string load() {
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
    }
    if (lib == nullptr) return std::string("cannot load libcublas: ") + dlerror();
    create = reinterpret_cast<decltype(create)>(dlsym(lib, "cublasCreate_v2"));
    destroy = reinterpret_cast<decltype(destroy)>(dlsym(lib, "cublasDestroy_v2"));
    set_stream = reinterpret_cast<decltype(set_stream)>(dlsym(lib, "cublasSetStream_v2"));
    gemm_ex = reinterpret_cast<decltype(gemm_ex)>(dlsym(lib, "cublasGemmEx"));
    if (!create || !destroy || !set_stream || !gemm_ex)
      return "libcublas lacks a needed entry point";
    return {};
  }
};

void check_cublas(cublasStatus_t st, const char* what) {
  OFFLOADKIT_EXPECTS(st == CUBLAS_STATUS_SUCCESS, runtime_error, what, " failed: cublas status ",
                     static_cast<int>(st));
}

// ---- device bodies
// --------------------------------------------------------------------------------

using offloadkit::detail::splitmix64_hash;

/// Deterministic values in [-scale, scale].
struct init_body {
  bf16* p;
  std::uint64_t key;
  float scale;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    const float u = static_cast<float>(splitmix64_hash(key + i) % 2001) / 1000.0f - 1.0f;
    p[i] = __float2bfloat16(u * scale);
  }
};

OFFLOADKIT_HD inline float gelu(float a) {
  return 0.5f * a * (1.0f + tanhf(0.7978845608f * (a + 0.044715f * a * a * a)));
}

OFFLOADKIT_HD inline float gelu_grad(float a) {
  const float u = 0.7978845608f * (a + 0.044715f * a * a * a);
  const float t = tanhf(u);
  const float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * a * a);
  return 0.5f * (1.0f + t) + 0.5f * a * (1.0f - t * t) * du;
}

struct gelu_body {
  const bf16* a;
  bf16* g;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    g[i] = __float2bfloat16(gelu(__bfloat162float(a[i])));
  }
};

struct gelu_backward_body {
  const bf16* a;
  const bf16* dg;
  bf16* da;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    da[i] = __float2bfloat16(__bfloat162float(dg[i]) * gelu_grad(__bfloat162float(a[i])));
  }
};

/// Order-independent hash of a buffer: the sum over 8-byte words of splitmix64_hash(index ^ word).
/// Worker i of `workers` sums words i, i + workers, ... (coalesced) and adds its sum with one
/// atomic, so that the hash costs a read of the buffer, not one contended atomic per word.
struct hash_body {
  const std::uint64_t* p;
  std::size_t words;
  std::size_t workers;
  unsigned long long* out;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    unsigned long long sum = 0;
    for (std::size_t w = i; w < words; w += workers) {
      sum += static_cast<unsigned long long>(splitmix64_hash(p[w] ^ (w * 0x100000001b3ull)));
    }
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> o(*out);
    o.fetch_add(sum, cuda::memory_order_relaxed);
  }
};

// ---- the model
// ------------------------------------------------------------------------------------

struct shape_case {
  std::int64_t h, tokens;
  double pytorch_offload_ms = 0, pytorch_none_ms = 0;  // from --pytorch (0: not measured)
};

/// Reads the step times that traces/pytorch_save_on_cpu.py printed in this run (lines
/// "save_on_cpu=on|off blocks=B hidden=H tokens=T: median X ms/step ...") into the shapes they
/// match; throws naming the file and line when one cannot be read.
void read_pytorch_times(const std::string& path, int blocks, std::vector<shape_case>& shapes) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--pytorch " + path + ": cannot open the file");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind("save_on_cpu=", 0) != 0) continue;
    char mode[8] = {};
    int b = 0;
    long long h = 0, t = 0;
    double ms = 0;
    if (std::sscanf(line.c_str(),
                    "save_on_cpu=%7[a-z] blocks=%d hidden=%lld tokens=%lld: median %lf", mode, &b,
                    &h, &t, &ms) != 5) {
      throw std::runtime_error("--pytorch " + path + " line " + std::to_string(n) +
                               ": not a save_on_cpu result line: '" + line + "'");
    }
    if (b != blocks) continue;
    for (auto& sc : shapes) {
      if (sc.h != h || sc.tokens != t) continue;
      (std::string(mode) == "on" ? sc.pytorch_offload_ms : sc.pytorch_none_ms) = ms;
    }
  }
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class mlp {
 public:
  mlp(executor& ex, cublas_api& api, int blocks, std::int64_t h, std::int64_t tokens)
      : ex_(ex), api_(api), blocks_(blocks), h_(h), t_(tokens), compute_(ex) {
    check_cublas(api_.create(&handle_), "cublasCreate");
    check_cublas(api_.set_stream(handle_, static_cast<cudaStream_t>(compute_.ref().native)),
                 "cublasSetStream");
    for (int b = 0; b < blocks_; ++b) {
      w1_.emplace_back(ex_, memory_kind::device, bytes(h_ * 4 * h_));
      w2_.emplace_back(ex_, memory_kind::device, bytes(4 * h_ * h_));
      init(w1_.back().as<bf16>(), h_ * 4 * h_, 100 + b, 1.0f / std::sqrt(float(h_)));
      init(w2_.back().as<bf16>(), 4 * h_ * h_, 200 + b, 1.0f / std::sqrt(float(4 * h_)));
    }
    dw1_ = buffer(ex_, memory_kind::device, bytes(h_ * 4 * h_));
    dw2_ = buffer(ex_, memory_kind::device, bytes(4 * h_ * h_));
    input_ = buffer(ex_, memory_kind::device, bytes(t_ * h_));
    init(input_.as<bf16>(), t_ * h_, 7, 1.0f);
    dy_ = buffer(ex_, memory_kind::device, bytes(t_ * h_));
    init(dy_.as<bf16>(), t_ * h_, 8, 1e-2f);
    hash_ = buffer(ex_, memory_kind::device, 2 * sizeof(unsigned long long));
    hash_host_ = buffer(ex_, memory_kind::pinned, 2 * sizeof(unsigned long long));
    compute_.synchronize();
  }
  ~mlp() {
    try {
      compute_.synchronize();
    } catch (...) {
    }
    for (auto& [n, list] : free_) {
      for (void* p : list) ex_.deallocate(memory_kind::device, p, n);
    }
    api_.destroy(handle_);
  }

  [[nodiscard]] std::size_t saved_bytes() const {
    return static_cast<std::size_t>(blocks_) * bytes(t_ * h_ + 2 * t_ * 4 * h_);
  }

  struct result {
    double fw = 0, bw = 0, total = 0;
    std::size_t peak_activation_bytes = 0;  // peak device bytes of activation buffers in use
    unsigned long long hash[2] = {0, 0};
  };

  /// One training step; `phase_sync` waits for forward (compute and copies) before backward.
  /// `range` names its NVTX range instead of the default below.
  result step(offloader* off, bool phase_sync, const char* range = nullptr) {
    result r;
    const stream_ref s = compute_.ref();
    // Back-to-back steps of the headline offloader are NVTX ranges "step ..." so that
    // `offloadkit capture` measures overlap in them alone: not in bandwidth probes, no-offload
    // steps ("baseline ..."), steps of the unbounded comparison, or phase-timed steps, whose
    // synchronization between forward and backward exposes one layer's copies by construction
    // ("phase-timed ..."). The range covers the host's issue and its final synchronization, i.e.
    // the whole step.
    nvtxRangePushA(range != nullptr ? range
                   : off == nullptr ? "baseline step"
                   : phase_sync     ? "phase-timed offload step"
                                    : "step offload");
    peak_live_ = live_;
    const double t0 = now_s();
    std::vector<std::vector<handle>> handles(blocks_);
    std::vector<std::vector<tensor>> kept(blocks_);
    bf16* x = input_.as<bf16>();
    tensor x_t = borrowed(x, t_, h_);  // the step's input is the caller's: it is not given back
    for (int b = 0; b < blocks_; ++b) {
      bf16* a = take(t_ * 4 * h_);
      gemm(false, false, t_, 4 * h_, h_, x, w1_[b].as<bf16>(), a);
      bf16* g = take(t_ * 4 * h_);
      launch(ex_, static_cast<std::size_t>(t_ * 4 * h_), gelu_body{a, g}, "gelu", s);
      bf16* y = take(t_ * h_);
      gemm(false, false, t_, h_, 4 * h_, g, w2_[b].as<bf16>(), y);
      std::vector<tensor> saved;
      saved.push_back(std::move(x_t));
      saved.push_back(owned(a, t_, 4 * h_));
      saved.push_back(owned(g, t_, 4 * h_));
      for (auto& t : saved) {
        if (off != nullptr) {
          handles[b].push_back(off->pack(std::move(t), s));
        } else {
          kept[b].push_back(std::move(t));
        }
      }
      if (off != nullptr) off->forward_layer_end(b, s);
      x = y;
      x_t = owned(y, t_, h_);
    }
    // The last block's output is not saved: it goes back to the pool once backward has begun.
    auto last_release = std::move(x_t.release);
    double tb = t0;
    if (phase_sync) {
      if (off != nullptr) off->synchronize();
      compute_.synchronize();
      tb = now_s();
      r.fw = tb - t0;
    }
    bf16* dy = dy_.as<bf16>();
    bf16* dy_owned = nullptr;
    for (int b = blocks_; b-- > 0;) {
      if (off != nullptr) off->backward_layer_begin(b, s);
      // Each saved tensor is unpacked just before its first use and given back after its last,
      // as autograd does node by node: the post-GELU output for Linear 4h->h's weight gradient,
      // the pre-GELU input for GELU's backward, the block input for Linear h->4h's.
      auto saved = [&](int j) {
        return off != nullptr ? off->unpack(handles[b][j], s) : std::move(kept[b][j]);
      };
      auto done = [](tensor& t) {
        if (t.release) t.release();
      };
      tensor g = saved(2);
      gemm(true, false, 4 * h_, h_, t_, static_cast<const bf16*>(g.data), dy,
           dw2_.as<bf16>());  // dW2 = g^T dy
      done(g);
      bf16* dg = take(t_ * 4 * h_);
      gemm(false, true, t_, 4 * h_, h_, dy, w2_[b].as<bf16>(), dg);  // dg = dy W2^T
      tensor a = saved(1);
      launch(ex_, static_cast<std::size_t>(t_ * 4 * h_),
             gelu_backward_body{static_cast<const bf16*>(a.data), dg, dg}, "gelu_backward", s);
      done(a);
      tensor x = saved(0);
      gemm(true, false, h_, 4 * h_, t_, static_cast<const bf16*>(x.data), dg,
           dw1_.as<bf16>());  // dW1 = x^T da
      done(x);
      bf16* dx = take(t_ * h_);
      gemm(false, true, t_, h_, 4 * h_, dg, w1_[b].as<bf16>(), dx);  // dx = da W1^T
      give_back(dg, t_ * 4 * h_);
      if (dy_owned != nullptr) give_back(dy_owned, t_ * h_);
      dy = dx;
      dy_owned = dx;
      if (b == blocks_ - 1 && last_release) last_release();
      if (b == 0) {
        ex_.fill(hash_.data(), 0, 2 * sizeof(unsigned long long), s);
        auto* h = hash_.as<unsigned long long>();
        constexpr std::size_t workers = 132 * 1024;
        launch(ex_, workers,
               hash_body{reinterpret_cast<const std::uint64_t*>(dx),
                         static_cast<std::size_t>(t_ * h_ / 4), workers, h},
               "hash", s);
        launch(ex_, workers,  // h*4h bf16 = h*h words
               hash_body{reinterpret_cast<const std::uint64_t*>(dw1_.data()),
                         static_cast<std::size_t>(h_ * h_), workers, h + 1},
               "hash", s);
        ex_.copy(hash_host_.data(), hash_.data(), 2 * sizeof(unsigned long long), s);
      }
    }
    if (dy_owned != nullptr) give_back(dy_owned, t_ * h_);
    if (off != nullptr) off->synchronize();
    compute_.synchronize();
    const double t1 = now_s();
    nvtxRangePop();
    r.total = t1 - t0;
    r.peak_activation_bytes = peak_live_;
    if (phase_sync) r.bw = t1 - tb;
    r.hash[0] = hash_host_.as<unsigned long long>()[0];
    r.hash[1] = hash_host_.as<unsigned long long>()[1];
    return r;
  }

 private:
  static std::size_t bytes(std::int64_t elems) { return static_cast<std::size_t>(elems) * 2; }

  void init(bf16* p, std::int64_t n, std::uint64_t key, float scale) {
    launch(ex_, static_cast<std::size_t>(n), init_body{p, key, scale}, "init", compute_.ref());
  }

  /// Row-major C[M,N] = op(A) op(B); A is [K,M] when ta, else [M,K]; B is [N,K] when tb, else
  /// [K,N]. cuBLAS is column-major, so it computes C^T = op(B)^T op(A)^T.
  void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a,
            const bf16* b, bf16* c) {
    const float one = 1.0f, zero = 0.0f;
    check_cublas(
        api_.gemm_ex(handle_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                     static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, b,
                     CUDA_R_16BF, static_cast<int>(tb ? k : n), a, CUDA_R_16BF,
                     static_cast<int>(ta ? m : k), &zero, c, CUDA_R_16BF, static_cast<int>(n),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }

  // Activation buffers come from a pool; live_ counts those in use (taken and not given back),
  // which is what an allocator would have to provide at that moment.
  bf16* take(std::int64_t elems) {
    const std::size_t n = bytes(elems);
    live_ += n;
    peak_live_ = std::max(peak_live_, live_);
    auto& list = free_[n];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      return static_cast<bf16*>(p);
    }
    return static_cast<bf16*>(ex_.allocate(memory_kind::device, n));
  }
  void give_back(void* p, std::int64_t elems) {
    live_ -= bytes(elems);
    free_[bytes(elems)].push_back(p);
  }

  tensor owned(bf16* p, std::int64_t rows, std::int64_t cols) {
    tensor t{p, bytes(rows * cols), 0, dtype::bf16, {rows, cols}, nullptr};
    t.release = [this, p, rows, cols] { give_back(p, rows * cols); };
    return t;
  }
  tensor borrowed(bf16* p, std::int64_t rows, std::int64_t cols) {
    return tensor{p, bytes(rows * cols), 0, dtype::bf16, {rows, cols}, [] {}};
  }

  executor& ex_;
  cublas_api& api_;
  int blocks_;
  std::int64_t h_, t_;
  stream compute_;
  cublasHandle_t handle_ = nullptr;
  std::vector<buffer> w1_, w2_;
  buffer dw1_, dw2_, input_, dy_, hash_, hash_host_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::size_t live_ = 0, peak_live_ = 0;
};

/// The copy floor of a phase, measured next to it: the phase's saved tensors (per block its input,
/// pre-GELU and post-GELU tensors) copied back to back between one device buffer and one pinned
/// buffer on one stream, as the offloader copies them but with nothing else running. It is taken
/// in every repetition right before the phase it bounds, so that both meet the link in the same
/// state: the link's throughput can dip for tens of milliseconds at a time (to 25-40 GB/s, either
/// direction, seen in CUPTI timelines of every kind of step), and a floor measured once at the
/// start would charge such a dip to the offloader.
class phase_floor {
 public:
  phase_floor(executor& ex, int blocks, std::int64_t h, std::int64_t tokens) : ex_(ex), s_(ex) {
    const std::size_t x = static_cast<std::size_t>(tokens * h) * 2;
    for (int b = 0; b < blocks; ++b) sizes_.insert(sizes_.end(), {x, 4 * x, 4 * x});
    dev_ = buffer(ex, memory_kind::device, 4 * x);
    host_ = buffer(ex, memory_kind::pinned, 4 * x);
    ex.fill(dev_.data(), 1, 4 * x, s_);
    s_.synchronize();
  }
  /// Seconds for the phase's copies, device to host (forward) or host to device (backward).
  double seconds(bool to_host) {
    const double t0 = now_s();
    for (const std::size_t n : sizes_) {
      if (to_host) {
        ex_.copy(host_.data(), dev_.data(), n, s_);
      } else {
        ex_.copy(dev_.data(), host_.data(), n, s_);
      }
    }
    s_.synchronize();
    return now_s() - t0;
  }

 private:
  executor& ex_;
  stream s_;
  std::vector<std::size_t> sizes_;
  buffer dev_, host_;
};

/// One repetition of a phase: without offload, its copy floor, with offload.
struct phase_run {
  double none_s = 0, floor_s = 0, offload_s = 0;
  [[nodiscard]] double ratio() const { return offload_s / std::max(none_s, floor_s); }
};

/// Peak activation memory of one shape's steps, by offload mode.
struct memory_row {
  std::int64_t h = 0, tokens = 0;
  std::size_t none = 0, offload = 0, unbounded = 0;
  double unbounded_s = 0, none_s = 0;
};

/// A phase's medians over the repetitions; the ratio is the median of each repetition's ratio to
/// its own limit.
struct phase_summary {
  double none_s = 0, floor_s = 0, offload_s = 0, ratio = 0;
};

phase_summary summarize(const std::vector<phase_run>& runs) {
  std::vector<double> none, floor, offload, ratio;
  for (const phase_run& r : runs) {
    none.push_back(r.none_s);
    floor.push_back(r.floor_s);
    offload.push_back(r.offload_s);
    ratio.push_back(r.ratio());
  }
  return {median(none), median(floor), median(offload), median(ratio)};
}

bench::json phase_json(const std::vector<phase_run>& runs) {
  const phase_summary m = summarize(runs);
  bench::json out = {{"none_s", m.none_s},
                     {"floor_s", m.floor_s},
                     {"offload_s", m.offload_s},
                     {"ratio", m.ratio},
                     {"runs", bench::json::array()}};
  for (const phase_run& r : runs) {
    out["runs"].push_back(
        {{"none_s", r.none_s}, {"floor_s", r.floor_s}, {"offload_s", r.offload_s}});
  }
  return out;
}

/// The benchmark, once its command line is read.
int run(const bench::command_line& cl, bool quick, int blocks, long long only_h,
        long long only_tokens, const std::string& pytorch) {
  if (const std::string why = bench::gpu_only_skip_reason(
          cl.executor_name(),
          "the MLP step's GEMMs are cuBLAS calls, which need the cuda executor");
      !why.empty()) {
    return cl.skip(why);
  }
  cublas_api api;
  if (const std::string why = api.load(); !why.empty()) return cl.skip(why);
  cuda_executor ex;
  std::vector<shape_case> shapes =
      quick ? std::vector<shape_case>{{1024, 2048}}
            : std::vector<shape_case>{{4096, 4096}, {4096, 16384}, {8192, 8192}};
  if (only_h != 0) shapes = {{only_h, only_tokens}};
  if (!pytorch.empty()) read_pytorch_times(pytorch, blocks, shapes);
  const int reps = quick ? 2 : 5;
  const std::size_t probe = std::size_t{256} << 20;
  const double bw_d2h = bench::pinned_copy_bandwidth(ex, probe, true, 5);
  const double bw_h2d = bench::pinned_copy_bandwidth(ex, probe, false, 5);
  std::printf(
      "# MLP stack, %d blocks (Linear h->4h, GELU, Linear 4h->h; bf16; cuBLAS), every "
      "saved activation offloaded\n# pinned bandwidth measured now: D2H %.2f GB/s, "
      "H2D %.2f GB/s\n# step: forward+backward back to back; phases: synchronized "
      "between them; limit = max(no offload, copy floor) per phase and repetition, the copy "
      "floor being the phase's tensors copied plainly right before it; x/limit: median over "
      "%d repetitions\n",
      blocks, bw_d2h / 1e9, bw_h2d / 1e9, reps);
  std::printf("%6s %6s %8s %9s %9s %8s %9s %9s %9s %9s %9s %9s %8s %6s %6s %6s %6s %7s %6s\n", "h",
              "tokens", "saved GB", "none ms", "offl ms", "x none", "torch ms", "x faster", "fw ms",
              "fw/limit", "bw ms", "bw/limit", "on-dev", "demand", "d-allc", "p-allc", "pt-dem",
              "pt-allc", "#wrong");
  // A file that cannot be written fails the run before it is measured, not after.
  if (!cl.json_path().empty()) bench::write_json(cl.json_path(), bench::json::object());
  bench::json doc = {{"benchmark", "activation_mlp"},
                     {"blocks", blocks},
                     {"bw_d2h", bw_d2h},
                     {"bw_h2d", bw_h2d},
                     {"rows", bench::json::array()}};
  int wrong_total = 0;
  std::vector<memory_row> mems;
  for (std::size_t si = 0; si < shapes.size(); ++si) {
    const shape_case& sc = shapes[si];
    mlp model(ex, api, blocks, sc.h, sc.tokens);
    const std::size_t layer_bytes = model.saved_bytes() / static_cast<std::size_t>(blocks);
    offload_options o;
    o.keep_threshold = 0;
    o.prefetch_bytes = 2 * layer_bytes + (std::size_t{64} << 20);
    o.prefetch_layers = 2;
    // At most one block's sources held while their copies are in flight: pack() waits for
    // older copies, so that memory comes back during forward although the host runs ahead.
    o.max_pending_bytes = layer_bytes;
    async_offloader off(ex, o);
    // The same without that bound, for the memory table: the host issues the whole forward
    // before any copy completes, so no source goes back before the end of the step.
    offload_options ou = o;
    ou.max_pending_bytes = 0;
    async_offloader off_unbounded(ex, ou);

    // Warm-up (pools, cuBLAS heuristics), the headline offloader last: its first step is the
    // one `offloadkit capture` allows pinned allocations in.
    (void)model.step(nullptr, false);
    (void)model.step(&off_unbounded, false, "unbounded offload step");
    (void)model.step(&off, false);
    std::vector<double> none, opt, unbounded;
    std::vector<phase_run> fw_runs, bw_runs;
    phase_floor floor(ex, blocks, sc.h, sc.tokens);
    memory_row mem{sc.h, sc.tokens};
    int wrong = 0;
    std::size_t from_source = 0, demand = 0, dev_allocs = 0, pin_allocs = 0;
    std::size_t pt_demand = 0, pt_dev_allocs = 0;  // the same in one phase-timed step
    for (int r = 0; r < reps; ++r) {
      const auto rn = model.step(nullptr, false);
      const auto before = off.stats();
      const auto ro = model.step(&off, false);
      const auto after = off.stats();
      from_source = after.served_from_source - before.served_from_source;
      demand = after.demand_uploads - before.demand_uploads;
      dev_allocs = after.device_allocations - before.device_allocations;
      pin_allocs = after.pinned_allocations - before.pinned_allocations;
      none.push_back(rn.total);
      opt.push_back(ro.total);
      if (rn.hash[0] != ro.hash[0] || rn.hash[1] != ro.hash[1]) ++wrong;
      const auto ru = model.step(&off_unbounded, false, "unbounded offload step");
      unbounded.push_back(ru.total);
      if (rn.hash[0] != ru.hash[0] || rn.hash[1] != ru.hash[1]) ++wrong;
      mem.none = std::max(mem.none, rn.peak_activation_bytes);
      mem.offload = std::max(mem.offload, ro.peak_activation_bytes);
      mem.unbounded = std::max(mem.unbounded, ru.peak_activation_bytes);
      const auto pn = model.step(nullptr, true);
      const double floor_d2h = floor.seconds(true);
      const double floor_h2d = floor.seconds(false);
      const auto pt_before = off.stats();
      const auto po = model.step(&off, true);
      const auto pt_after = off.stats();
      pt_demand = pt_after.demand_uploads - pt_before.demand_uploads;
      pt_dev_allocs = pt_after.device_allocations - pt_before.device_allocations;
      fw_runs.push_back({pn.fw, floor_d2h, po.fw});
      bw_runs.push_back({pn.bw, floor_h2d, po.bw});
      if (pn.hash[0] != po.hash[0] || pn.hash[1] != po.hash[1]) ++wrong;
    }
    wrong_total += wrong;
    const double saved = static_cast<double>(model.saved_bytes());
    const phase_summary fw = summarize(fw_runs), bw = summarize(bw_runs);
    const double t_none = median(none), t_opt = median(opt);
    mem.unbounded_s = median(unbounded);
    mem.none_s = t_none;
    mems.push_back(mem);
    std::printf(
        "%6lld %6lld %8.2f %9.1f %9.1f %8.2f %9.0f %9.2f %9.1f %9.3f %9.1f %9.3f %8zu %6zu %6zu "
        "%6zu %6zu %7zu %6d\n",
        static_cast<long long>(sc.h), static_cast<long long>(sc.tokens), saved / 1e9, t_none * 1e3,
        t_opt * 1e3, t_opt / t_none, sc.pytorch_offload_ms,
        sc.pytorch_offload_ms > 0 ? sc.pytorch_offload_ms / (t_opt * 1e3) : 0.0, fw.offload_s * 1e3,
        fw.ratio, bw.offload_s * 1e3, bw.ratio, from_source, demand, dev_allocs, pin_allocs,
        pt_demand, pt_dev_allocs, wrong);
    std::fflush(stdout);
    bench::json runs_s = bench::json::array();
    for (const double t : opt) runs_s.push_back(t);
    doc["rows"].push_back(
        {{"h", sc.h},
         {"tokens", sc.tokens},
         {"saved_bytes", saved},
         {"none_s", t_none},
         {"offload_s", t_opt},
         {"offload_runs_s", runs_s},
         {"pytorch_save_on_cpu_ms", sc.pytorch_offload_ms},
         {"pytorch_no_offload_ms", sc.pytorch_none_ms},
         {"forward", phase_json(fw_runs)},
         {"backward", phase_json(bw_runs)},
         {"phase_timed", {{"demand_uploads", pt_demand}, {"device_allocations", pt_dev_allocs}}},
         {"served_from_source", from_source},
         {"peak_activation_bytes",
          {{"none", mem.none}, {"offload", mem.offload}, {"offload_unbounded", mem.unbounded}}},
         {"offload_unbounded_s", mem.unbounded_s},
         {"wrong", wrong}});
  }
  if (!cl.json_path().empty()) bench::write_json(cl.json_path(), doc);
  std::printf(
      "# x none = offload step / no-offload step; x faster = PyTorch save_on_cpu step (torch ms, "
      "measured by --pytorch's run; 0: not given) / offload step; on-dev: tensors of the last "
      "block served from their resident source;\n"
      "# demand / d-allc / p-allc: in one steady offload step, tensors uploaded inside "
      "unpack() (not prefetched), device and pinned allocations; pt-dem / pt-allc: demand "
      "uploads and device allocations in one phase-timed step\n");
  std::printf(
      "\n# peak device memory of activation buffers in use during a back-to-back step (GB): "
      "no offload; offload as above (max_pending_bytes = one block's saved bytes); offload "
      "without that bound, and its step time\n%6s %6s %9s %9s %9s %9s %9s\n",
      "h", "tokens", "none GB", "offl GB", "unbnd GB", "unbnd ms", "x none");
  for (const memory_row& m : mems) {
    std::printf("%6lld %6lld %9.2f %9.2f %9.2f %9.1f %9.2f\n", static_cast<long long>(m.h),
                static_cast<long long>(m.tokens), static_cast<double>(m.none) / 1e9,
                static_cast<double>(m.offload) / 1e9, static_cast<double>(m.unbounded) / 1e9,
                m.unbounded_s * 1e3, m.unbounded_s / m.none_s);
  }
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  long long only_h = 0, only_tokens = 0;
  bool quick = false;
  int blocks = 8;
  std::string pytorch, shape;
  bench::command_line cl(
      "bench_activation_mlp",
      "One training step of an MLP stack with every saved activation offloaded, against the same "
      "step without offload and each phase's copy floor (measured in the same repetition), and "
      "against PyTorch's save_on_cpu on the same shapes.",
      "Exit status: 0 ok (or no GPU, cuBLAS or cuda executor: skipped), 1 the gradients differ "
      "or the run failed, 2 bad usage.");
  CLI::App& app = cl.app();
  app.add_flag("--quick", quick, "one small shape, 2 repetitions (a smoke run)");
  app.add_option("--blocks", blocks, "blocks of the stack, 1..64 (default 8)")
      ->type_name("N")
      ->check(tools::integer_range(1, 64));
  app.add_option("--shape", shape,
                 "one shape instead of the three defaults: HIDDEN a multiple of 64, TOKENS >= 1, "
                 "e.g. 4096x4096")
      ->type_name("HIDDENxTOKENS")
      ->check(CLI::Validator(
          [&only_h, &only_tokens](std::string& v) -> std::string {
            char tail = 0;
            if (std::sscanf(v.c_str(), "%lldx%lld%c", &only_h, &only_tokens, &tail) != 2 ||
                only_h < 64 || only_tokens < 1 || only_h % 64 != 0) {
              return "'" + v +
                     "' is not HIDDENxTOKENS with HIDDEN a multiple of 64 and TOKENS >= 1, e.g. "
                     "4096x4096";
            }
            return {};
          },
          ""));
  app.add_option("--pytorch", pytorch,
                 "PyTorch's times (the output of traces/pytorch_save_on_cpu.py)")
      ->type_name("FILE");
  return cl.run(argc, argv, [&] { return run(cl, quick, blocks, only_h, only_tokens, pytorch); });
}
