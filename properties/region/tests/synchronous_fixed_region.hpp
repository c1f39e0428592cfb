// A test double of a common real region: its pause mode is fixed when its memory is allocated, its
// pause() and resume() are synchronous (they wait for the caller's stream, do their copies on a
// stream of their own and return when those are done), and it keeps no graphs. Written from the
// public descriptions of pause/resume allocators (a backup-or-not choice per allocation, calls
// that take no stream); it passes the battery under the profile it declares
// (synchronous_fixed_region_implementation), which is how a profile shows that it fits such code.
// Planted variants (planted_mode) break one declared policy each.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "offloadkit/detail/text.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/region/region.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::region::testing_doubles {

/// What a planted variant of the double gets wrong.
enum class planted_mode {
  none,
  /// Declared synchronous, but resume() copies in on the caller's stream and returns without
  /// waiting for it: right for a stream-ordered region, wrong for what it declares.
  returns_before_resume_copy,
  /// A pause in the mode it does not offer discards the contents before it refuses.
  discards_before_refusing,
  /// pause() does not wait for the caller's stream: it polls it from the host for at most 200 ms
  /// (a timeout on cudaStreamQuery), then copies out on its own stream whatever the device holds.
  polls_caller_briefly,
};

class synchronous_fixed_region final : public offload_region {
 public:
  synchronous_fixed_region(executor& ex, const region_config& c,
                           planted_mode planted = planted_mode::none)
      : ex_(&ex),
        bytes_(c.bytes),
        device_(c.device),
        mode_(c.fixed_mode.value_or(pause_mode::preserve)),
        planted_(planted) {
    OFFLOADKIT_EXPECTS(c.bytes > 0, out_of_range,
                       "synchronous_fixed_region: bytes is 0; give 1 or more");
    OFFLOADKIT_EXPECTS(c.device >= 0 && c.device < ex.device_count(), out_of_range,
                       "synchronous_fixed_region: device ", c.device, " is not in [0, ",
                       ex.device_count(), ")");
    own_ = ex.create_stream(device_);
    try {
      copied_in_ = ex.create_event(device_);
      try {
        device_ptr_ = ex.allocate(memory_kind::device, bytes_, device_);
      } catch (...) {
        ex.destroy_event(copied_in_);
        throw;
      }
    } catch (...) {
      ex.destroy_stream(own_);
      throw;
    }
  }
  ~synchronous_fixed_region() override {
    // Every copy was waited for before the call that issued it returned, but the planted
    // resume's.
    try {
      wait_copy_in();
      if (host_ != nullptr) ex_->deallocate(memory_kind::pinned, host_, bytes_);
    } catch (const std::exception&) {
      // A destructor has no caller to report to; the host buffer is then left to the process.
    }
    if (device_ptr_ != nullptr) ex_->deallocate(memory_kind::device, device_ptr_, bytes_);
    ex_->destroy_event(copied_in_);
    ex_->destroy_stream(own_);
  }
  synchronous_fixed_region(const synchronous_fixed_region&) = delete;
  synchronous_fixed_region& operator=(const synchronous_fixed_region&) = delete;
  synchronous_fixed_region(synchronous_fixed_region&&) = delete;
  synchronous_fixed_region& operator=(synchronous_fixed_region&&) = delete;

 private:
  [[nodiscard]] void* do_data() const noexcept override { return device_ptr_; }
  [[nodiscard]] std::size_t do_size() const noexcept override { return bytes_; }
  [[nodiscard]] int do_device() const noexcept override { return device_; }
  [[nodiscard]] region_state do_state() const noexcept override {
    return device_ptr_ != nullptr ? region_state::active : region_state::paused;
  }
  [[nodiscard]] bool do_address_stable() const noexcept override { return false; }
  [[nodiscard]] std::size_t do_footprint() const noexcept override { return bytes_; }
  [[nodiscard]] std::size_t do_captures() const noexcept override { return 0; }

  void do_pause(pause_mode mode, stream_ref s) override {
    if (mode != mode_) {
      if (planted_ == planted_mode::discards_before_refusing) release_device();
      throw unsupported_error(offloadkit::detail::concat(
          "synchronous_fixed_region::pause(", to_string(mode), "): this region was allocated for ",
          to_string(mode_), " pauses only"));
    }
    wait_for_caller(s);  // the caller's work on the region comes first
    if (mode == pause_mode::preserve) {
      // One pinned buffer, kept across cycles: a pause in steady state allocates nothing.
      if (host_ == nullptr) host_ = ex_->allocate(memory_kind::pinned, bytes_, device_);
      wait_copy_in();
      try {
        ex_->copy(host_, device_ptr_, bytes_, own_);
        ex_->synchronize(own_);
      } catch (...) {
        drain_quietly();
        throw;  // still active, nothing lost
      }
    }
    preserved_ = mode == pause_mode::preserve;
    release_device();
  }

  void do_resume(stream_ref s) override {
    ex_->synchronize(s);
    void* dev = ex_->allocate(memory_kind::device, bytes_, device_);
    try {
      if (preserved_) {
        if (planted_ == planted_mode::returns_before_resume_copy) {
          ex_->copy(dev, host_, bytes_, s);
          ex_->record(copied_in_, s);
          copy_in_pending_ = true;
        } else {
          ex_->copy(dev, host_, bytes_, own_);
          ex_->synchronize(own_);
        }
      }
    } catch (...) {
      drain_quietly();
      ex_->deallocate(memory_kind::device, dev, bytes_);
      throw;  // still paused, the host copy intact
    }
    device_ptr_ = dev;
    preserved_ = false;
  }

  graph_id do_register_graph(capture_fn /*fn*/, stream_ref /*s*/) override {
    throw unsupported_error(
        "synchronous_fixed_region keeps no graphs (profile: graphs none); offloadkit's "
        "with_executor_graphs keeps them");
  }
  void do_replay(graph_id g, stream_ref /*s*/) override {
    throw unsupported_error(offloadkit::detail::concat("synchronous_fixed_region::replay(graph ", g,
                                                       "): it keeps no graphs"));
  }
  void do_unregister_graph(graph_id /*g*/) noexcept override {}

  /// Waits for the work queued on the caller's stream (the planted variant gives up after 200 ms).
  void wait_for_caller(stream_ref s) {
    if (planted_ != planted_mode::polls_caller_briefly) {
      ex_->synchronize(s);
      return;
    }
    const event queued(*ex_, device_);
    ex_->record(queued.ref(), s);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (!ex_->ready(queued.ref()) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  /// Waits for the planted resume's copy, which may still read the host buffer.
  void wait_copy_in() {
    if (copy_in_pending_) ex_->synchronize(copied_in_);
    copy_in_pending_ = false;
  }
  void release_device() {
    ex_->deallocate(memory_kind::device, device_ptr_, bytes_);
    device_ptr_ = nullptr;
  }
  /// After a failed copy: the copy stream's queued work ends before its buffers go.
  void drain_quietly() noexcept {
    try {
      ex_->synchronize(own_);
    } catch (const std::exception&) {
      // The caller gets the error that stopped the call; a failed drain is that failure again.
    }
  }

  executor* ex_;
  std::size_t bytes_;
  int device_;
  pause_mode mode_;
  planted_mode planted_;
  stream_ref own_{};
  event_ref copied_in_{};         ///< the planted resume's copy, on the caller's stream
  bool copy_in_pending_ = false;  ///< that copy may still read host_
  void* device_ptr_ = nullptr;
  void* host_ = nullptr;    ///< pinned, allocated at the first preserving pause and kept
  bool preserved_ = false;  ///< paused, and host_ holds the contents
};

/// The double's descriptor: the profile it declares.
inline offloadkit::testing::region_implementation synchronous_fixed_region_implementation(
    planted_mode planted = planted_mode::none) {
  offloadkit::testing::region_implementation impl;
  impl.name = planted == planted_mode::none ? "synchronous_fixed" : "planted_synchronous_fixed";
  impl.caps.address_stable = false;
  impl.caps.releases_memory = true;
  impl.caps.multi_device = true;
  impl.caps.pause_modes = offloadkit::testing::region_pause_modes::fixed_per_allocation;
  impl.caps.streams = offloadkit::testing::region_streams::synchronous;
  impl.caps.graphs = offloadkit::testing::region_graphs::none;
  impl.make = [planted](executor& ex, region_config c) -> std::unique_ptr<offload_region> {
    return std::make_unique<synchronous_fixed_region>(ex, c, planted);
  };
  return impl;
}

}  // namespace offloadkit::region::testing_doubles
