// The training-step driver: forward produces patterned activations and packs them, backward
// unpacks them in reverse and verifies the pattern on the device. Compiled by nvcc so that the
// compute, fill and verify bodies are kernels on the cuda back end; the host back end runs the
// same bodies.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cuda/atomic>
#include <sstream>

#include "offloadkit/detail/splitmix64.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/host_device.hpp"
#include "offloadkit/launch.hpp"
#include "offloadkit/workloads/training_step.hpp"

namespace offloadkit::activation {
namespace {

using offloadkit::detail::splitmix64_hash;

/// Writes the pattern of `key` into `bytes` bytes, one 8-byte word per index.
struct fill_pattern {
  unsigned char* data;
  std::size_t bytes;
  std::uint64_t key;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    const std::uint64_t v = splitmix64_hash(key + i);
    for (std::size_t b = 0; b < 8; ++b) {
      const std::size_t at = i * 8 + b;
      if (at < bytes) data[at] = static_cast<unsigned char>(v >> (8 * b));
    }
  }
};

/// Counts the words of `data` that differ from the pattern of `key`.
struct verify_pattern {
  const unsigned char* data;
  std::size_t bytes;
  std::uint64_t key;
  unsigned long long* wrong;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    const std::uint64_t v = splitmix64_hash(key + i);
    bool bad = false;
    for (std::size_t b = 0; b < 8; ++b) {
      const std::size_t at = i * 8 + b;
      if (at < bytes && data[at] != static_cast<unsigned char>(v >> (8 * b))) bad = true;
    }
    if (bad) {
      cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> w(*wrong);
      w.fetch_add(1ull, cuda::memory_order_relaxed);
    }
  }
};

/// A dependent multiply-add chain: its duration is linear in `iterations` and it cannot be folded
/// away (float arithmetic is not reassociated without fast-math).
struct compute_body {
  float* sink;
  std::uint64_t iterations;
  OFFLOADKIT_HD void operator()(std::size_t i) const {
    float x = static_cast<float>(i & 1023) * 1e-3f;
    for (std::uint64_t k = 0; k < iterations; ++k) x = x * 0.9999f + 0.5f;
    sink[i] = x;
  }
};

std::size_t words(std::size_t bytes) { return (bytes + 7) / 8; }

std::uint64_t tensor_key(std::uint64_t seed, std::size_t layer, std::size_t index) {
  return splitmix64_hash(seed ^ (static_cast<std::uint64_t>(layer) << 40) ^ (index << 8) ^
                         0x5a5aull);
}

}  // namespace

void launch_compute(executor& ex, float* sink, std::size_t threads, std::uint64_t iterations,
                    stream_ref s) {
  if (iterations == 0 || threads == 0) return;
  launch(ex, threads, compute_body{sink, iterations}, "activation_compute", s);
}

std::string step_report::describe() const {
  std::ostringstream os;
  os << "tensors=" << tensors << " bytes=" << bytes << " wrong_words=" << wrong_words
     << " wrong_device=" << wrong_device << " wrong_meta=" << wrong_meta
     << " bad_releases=" << bad_releases;
  return os.str();
}

struct training_step::device_state {
  stream compute;
  buffer sink;
  buffer wrong;                                    // device counter of mismatching words
  buffer wrong_host;                               // pinned copy of it
  std::map<std::size_t, std::vector<void*>> free;  // released activation buffers by size
  std::vector<std::pair<void*, std::size_t>> owned;
};

training_step::training_step(executor& ex, std::vector<layer_spec> layers, std::size_t threads)
    : ex_(ex), layers_(std::move(layers)), threads_(threads) {
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const int d = layers_[l].device;
    OFFLOADKIT_EXPECTS(d >= 0 && d < ex_.device_count(), out_of_range, "layers[", l,
                       "].device = ", d, " is outside [0, ", ex_.device_count(), ")");
    for (const auto& t : layers_[l].saved) (void)t.bytes();  // validates the shapes
  }
}

training_step::~training_step() {
  for (auto& [d, st] : devices_) {
    try {
      st->compute.synchronize();
    } catch (...) {
      // A destructor cannot report: the step's work is waited for so that none uses the buffers
      // freed below, and a failure of that work was reported by run() or has nowhere to go now.
    }
    for (auto& [p, n] : st->owned) ex_.deallocate(memory_kind::device, p, n);
  }
}

training_step::device_state& training_step::state(int device) {
  auto it = devices_.find(device);
  if (it != devices_.end()) return *it->second;
  auto st = std::make_unique<device_state>();
  st->compute = stream(ex_, device);
  st->sink =
      buffer(ex_, memory_kind::device, std::max<std::size_t>(threads_, 1) * sizeof(float), device);
  st->wrong = buffer(ex_, memory_kind::device, sizeof(unsigned long long), device);
  st->wrong_host = buffer(ex_, memory_kind::pinned, sizeof(unsigned long long));
  return *devices_.emplace(device, std::move(st)).first->second;
}

stream_ref training_step::compute_stream(int device) { return state(device).compute.ref(); }

void training_step::set_iterations(std::uint64_t forward, std::uint64_t backward) {
  for (auto& l : layers_) {
    l.forward_iterations = forward;
    l.backward_iterations = backward;
  }
}

void* training_step::take(int device, std::size_t bytes) {
  auto& st = state(device);
  auto& list = st.free[bytes];
  if (!list.empty()) {
    // Most recently released first, so that a buffer given back early is overwritten at once.
    void* p = list.back();
    list.pop_back();
    return p;
  }
  void* p = ex_.allocate(memory_kind::device, bytes, device);
  st.owned.emplace_back(p, bytes);
  return p;
}

void training_step::give_back(int device, void* p, std::size_t bytes, bool poison) {
  auto& st = state(device);
  if (poison && bytes > 0) ex_.fill(p, 0xA5, bytes, st.compute.ref());
  st.free[bytes].push_back(p);
}

step_report training_step::run(offloader* off, std::uint64_t seed, const step_options& opt) {
  step_report rep;
  const auto start = std::chrono::steady_clock::now();
  const std::size_t n_layers = layers_.size();

  for (const auto& l : layers_) state(l.device);
  if (opt.unpack_device >= 0) state(opt.unpack_device);
  for (auto& [d, st] : devices_)
    ex_.fill(st->wrong.data(), 0, sizeof(unsigned long long), st->compute.ref());

  // releases[l][j]: how many times the source of tensor (l, j) was given back.
  auto releases = std::make_shared<std::vector<std::vector<int>>>(n_layers);
  std::vector<std::vector<handle>> handles(n_layers);
  std::vector<std::vector<tensor>> kept(n_layers);
  std::vector<event> events;  // cross-device ordering, destroyed after the step completes

  // ---- forward ---------------------------------------------------------------------------------
  for (std::size_t l = 0; l < n_layers; ++l) {
    const layer_spec& ls = layers_[l];
    auto& st = state(ls.device);
    const stream_ref s = st.compute.ref();
    launch_compute(ex_, st.sink.as<float>(), threads_, ls.forward_iterations, s);
    (*releases)[l].assign(ls.saved.size(), 0);
    for (std::size_t j = 0; j < ls.saved.size(); ++j) {
      const tensor_spec& spec = ls.saved[j];
      const std::size_t bytes = spec.bytes();
      void* p = take(ls.device, bytes);
      if (bytes > 0) {
        launch(ex_, words(bytes),
               fill_pattern{static_cast<unsigned char*>(p), bytes, tensor_key(seed, l, j)},
               "activation_fill", s);
      }
      tensor t;
      t.data = p;
      t.bytes = bytes;
      t.device = ls.device;
      t.type = spec.type;
      t.shape = spec.shape;
      const int dev = ls.device;
      const bool poison = opt.poison_on_release;
      t.release = [this, releases, l, j, dev, p, bytes, poison] {
        if (++(*releases)[l][j] == 1) give_back(dev, p, bytes, poison);
      };
      rep.tensors += 1;
      rep.bytes += bytes;
      if (off != nullptr) {
        handles[l].push_back(off->pack(std::move(t), s));
      } else {
        kept[l].push_back(std::move(t));
      }
    }
    if (off != nullptr) off->forward_layer_end(static_cast<int>(l), s);
  }

  auto backward_start = start;
  if (opt.phase_sync) {
    if (off != nullptr) off->synchronize();
    for (auto& [d, st] : devices_) st->compute.synchronize();
    backward_start = std::chrono::steady_clock::now();
    rep.forward_seconds = std::chrono::duration<double>(backward_start - start).count();
  }

  // ---- backward --------------------------------------------------------------------------------
  for (std::size_t l = n_layers; l-- > 0;) {
    const layer_spec& ls = layers_[l];
    auto& st = state(ls.device);
    const stream_ref s_layer = st.compute.ref();
    const int udev = opt.unpack_device >= 0 ? opt.unpack_device : ls.device;
    const stream_ref s_unpack = state(udev).compute.ref();
    if (off != nullptr) off->backward_layer_begin(static_cast<int>(l), s_unpack);

    std::vector<tensor> got(ls.saved.size());
    for (std::size_t j = ls.saved.size(); j-- > 0;) {
      got[j] = off != nullptr ? off->unpack(handles[l][j], s_unpack) : std::move(kept[l][j]);
      const tensor& t = got[j];
      const tensor_spec& spec = ls.saved[j];
      if (t.bytes != spec.bytes() || t.type != spec.type || t.shape != spec.shape) {
        rep.wrong_meta += 1;
      }
      const int home = opt.return_on_unpack_device ? udev : ls.device;
      bool at_home = t.device == home;
      if (t.data != nullptr) {
        const pointer_info pi = ex_.classify(t.data);
        at_home = at_home && pi.kind == pointer_kind::device && pi.device == home;
      }
      if (!at_home) rep.wrong_device += 1;
    }
    if (s_unpack != s_layer) {
      events.emplace_back(ex_, udev);
      ex_.record(events.back(), s_unpack);
      ex_.wait(events.back(), s_layer);
    }
    launch_compute(ex_, st.sink.as<float>(), threads_, ls.backward_iterations, s_layer);
    const int home = opt.return_on_unpack_device ? udev : ls.device;
    for (std::size_t j = ls.saved.size(); j-- > 0;) {
      const tensor& t = got[j];
      // Verify on the device the tensor belongs on (the layer's stream, or unpack's for tensors
      // returned on its device); a tensor on the wrong device is only counted above.
      if (opt.verify && t.bytes > 0 && t.bytes == ls.saved[j].bytes() && t.device == home) {
        launch(ex_, words(t.bytes),
               verify_pattern{static_cast<const unsigned char*>(t.data), t.bytes,
                              tensor_key(seed, l, j), state(home).wrong.as<unsigned long long>()},
               "activation_verify", home == ls.device ? s_layer : s_unpack);
      }
    }
    if (s_unpack != s_layer) {
      events.emplace_back(ex_, ls.device);
      ex_.record(events.back(), s_layer);
      ex_.wait(events.back(), s_unpack);
    }
    for (auto& t : got) {
      if (t.release) t.release();
    }
  }

  if (off != nullptr) off->synchronize();
  for (auto& [d, st] : devices_) {
    ex_.copy(st->wrong_host.data(), st->wrong.data(), sizeof(unsigned long long),
             st->compute.ref());
  }
  for (auto& [d, st] : devices_) {
    st->compute.synchronize();
    rep.wrong_words += *st->wrong_host.as<unsigned long long>();
  }
  for (const auto& per_layer : *releases) {
    for (int c : per_layer) {
      if (c != 1) rep.bad_releases += 1;
    }
  }
  const auto end = std::chrono::steady_clock::now();
  rep.seconds = std::chrono::duration<double>(end - start).count();
  if (opt.phase_sync)
    rep.backward_seconds = std::chrono::duration<double>(end - backward_start).count();
  return rep;
}

std::uint64_t calibrate_iterations(executor& ex, int device, std::size_t threads, double seconds) {
  stream s(ex, device);
  buffer sink(ex, memory_kind::device, std::max<std::size_t>(threads, 1) * sizeof(float), device);
  auto time_it = [&](std::uint64_t iters) {
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      launch_compute(ex, sink.as<float>(), threads, iters, s);
      s.synchronize();
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  // Grow until one run takes a measurable time, then scale linearly from two points.
  std::uint64_t iters = 1024;
  double t = time_it(iters);
  while (t < 2e-3 && iters < (std::uint64_t{1} << 40)) {
    iters *= 4;
    t = time_it(iters);
  }
  const double t_half = time_it(iters / 2);
  const double per_iter = std::max((t - t_half) / static_cast<double>(iters - iters / 2), 1e-15);
  const double fixed = std::max(t - per_iter * static_cast<double>(iters), 0.0);
  const double want = std::max(seconds - fixed, 0.0);
  return static_cast<std::uint64_t>(want / per_iter);
}

}  // namespace offloadkit::activation
