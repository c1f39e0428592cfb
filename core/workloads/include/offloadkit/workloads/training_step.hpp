// A small training-step driver for checks and benchmarks: a stack of layers, each producing saved
// activations of given shapes and dtypes in forward and consuming them in reverse in backward, with
// a compute kernel of controllable duration standing in for the layer's math. Activations carry a
// pattern derived from (seed, layer, index) and backward verifies it on the device, so any
// offloader's result is checked bit for bit; released buffers go back to a pool that forward reuses
// at once (and may poison), so a source given back too early is caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/activation/offloader.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/resources.hpp"

namespace offloadkit::activation {

struct tensor_spec {
  std::vector<std::int64_t> shape;
  dtype type = dtype::u8;
  [[nodiscard]] std::size_t bytes() const { return element_count(shape) * dtype_size(type); }
};

struct layer_spec {
  std::vector<tensor_spec> saved;
  int device = 0;
  /// Iterations of the compute kernel in forward and in backward.
  std::uint64_t forward_iterations = 0;
  std::uint64_t backward_iterations = 0;
};

struct step_options {
  /// Stream device used for unpack() ("the current device"); -1: the layer's own device.
  int unpack_device = -1;
  /// Where unpacked tensors belong: false, the device they were packed from; true, the device of
  /// the stream given to unpack() (an offloader that returns tensors on the current device).
  /// A tensor elsewhere counts as wrong_device.
  bool return_on_unpack_device = false;
  /// Fill a released buffer with a poison byte on its device's compute stream.
  bool poison_on_release = true;
  /// Verify every unpacked tensor on the device.
  bool verify = true;
  /// Wait for forward (its compute and the offloader's copies) before backward starts, so that
  /// each phase is timed on its own. Off for a real step, where the phases run back to back.
  bool phase_sync = false;
};

struct step_report {
  std::size_t tensors = 0;
  std::size_t bytes = 0;
  std::uint64_t wrong_words = 0;  ///< 8-byte words that differ from the packed pattern
  std::size_t wrong_device = 0;   ///< unpacked tensors not on the device they belong on
  std::size_t wrong_meta = 0;     ///< bytes, dtype or shape changed
  std::size_t bad_releases = 0;   ///< sources released twice or never
  double seconds = 0;             ///< wall time of the step, both phases, to completion
  double forward_seconds = 0;     ///< with phase_sync: forward to completion, else 0
  double backward_seconds = 0;    ///< with phase_sync: backward to completion, else 0
  [[nodiscard]] bool ok() const noexcept {
    return wrong_words == 0 && wrong_device == 0 && wrong_meta == 0 && bad_releases == 0;
  }
  [[nodiscard]] std::string describe() const;
};

/// The stand-in for a layer's math: a dependent arithmetic chain of `iterations` per thread over
/// `threads` threads, issued with offloadkit::launch (a kernel on the cuda back end).
void launch_compute(executor& ex, float* sink, std::size_t threads, std::uint64_t iterations,
                    stream_ref s);

class training_step {
 public:
  /// `threads`: width of the compute kernel (its sink is allocated per device).
  training_step(executor& ex, std::vector<layer_spec> layers, std::size_t threads = 256);
  ~training_step();
  training_step(const training_step&) = delete;
  training_step& operator=(const training_step&) = delete;

  /// Runs forward then backward once. With `off` null, activations stay on the device (the
  /// no-offload baseline). Returns when all the step's work has completed.
  step_report run(offloader* off, std::uint64_t seed, const step_options& opt = {});

  /// The compute stream of `device` (created on first use).
  stream_ref compute_stream(int device);
  [[nodiscard]] const std::vector<layer_spec>& layers() const noexcept { return layers_; }
  /// Sets every layer's iterations (forward, backward).
  void set_iterations(std::uint64_t forward, std::uint64_t backward);

 private:
  struct device_state;
  device_state& state(int device);
  void* take(int device, std::size_t bytes);
  void give_back(int device, void* p, std::size_t bytes, bool poison);

  executor& ex_;
  std::vector<layer_spec> layers_;
  std::size_t threads_;
  std::map<int, std::unique_ptr<device_state>> devices_;
};

/// Measures how many iterations of the compute kernel take `seconds` on `device` (median of a few
/// timed runs, linear in iterations).
std::uint64_t calibrate_iterations(executor& ex, int device, std::size_t threads, double seconds);

}  // namespace offloadkit::activation
