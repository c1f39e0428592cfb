// The reference region: one device allocation, a fresh pageable host copy per pause, synchronous
// copies, and re-capture of every registered graph on resume.
#include "offloadkit/region/reference_region.hpp"

#include <utility>

#include "offloadkit/error.hpp"

namespace offloadkit::region {

reference_region::reference_region(executor& ex, region_config config)
    : ex_(&ex), bytes_(config.bytes), device_id_(config.device) {
  expect_valid_config(config, ex, "reference_region");
  device_ = ex.allocate(memory_kind::device, bytes_, device_id_);
}

reference_region::~reference_region() {
  graphs_.clear();
  if (device_ != nullptr) ex_->deallocate(memory_kind::device, device_, bytes_);
  if (host_ != nullptr) ex_->deallocate(memory_kind::pageable, host_, bytes_);
}

void reference_region::do_pause(pause_mode mode, stream_ref s) {
  if (mode == pause_mode::discard) {
    ex_->synchronize(s);
    ex_->deallocate(memory_kind::device, device_, bytes_);
    device_ = nullptr;
    state_ = region_state::paused;
    return;
  }
  void* host = ex_->allocate(memory_kind::pageable, bytes_);
  try {
    ex_->copy(host, device_, bytes_, s);
    ex_->synchronize(s);
  } catch (...) {
    // The device allocation still holds the contents: stay active.
    try {
      ex_->synchronize(s);
    } catch (const std::exception&) {
      // The caller gets the copy's error; a failed drain is the stream's failure seen again.
    }
    ex_->deallocate(memory_kind::pageable, host, bytes_);
    throw;
  }
  ex_->deallocate(memory_kind::device, device_, bytes_);
  device_ = nullptr;
  host_ = host;
  state_ = region_state::paused;
}

void reference_region::do_resume(stream_ref s) {
  void* dev = ex_->allocate(memory_kind::device, bytes_, device_id_);
  try {
    if (host_ != nullptr) {
      ex_->copy(dev, host_, bytes_, s);
      ex_->synchronize(s);
    }
    // Graphs captured on the old address would write freed memory: capture them again (all or
    // nothing: on failure the old ones stay registered).
    graphs_.recapture(dev, s);
  } catch (...) {
    // Back to paused: the host copy is untouched.
    try {
      ex_->synchronize(s);
    } catch (const std::exception&) {
      // The caller gets the error that stopped the resume; a failed drain is the stream's
      // failure seen again.
    }
    ex_->deallocate(memory_kind::device, dev, bytes_);
    throw;
  }
  if (host_ != nullptr) ex_->deallocate(memory_kind::pageable, host_, bytes_);
  host_ = nullptr;
  device_ = dev;
  state_ = region_state::active;
}

graph_id reference_region::do_register_graph(capture_fn fn, stream_ref s) {
  return graphs_.add(std::move(fn), device_, s);
}

void reference_region::do_replay(graph_id g, stream_ref s) { graphs_.replay(g, s); }

void reference_region::do_unregister_graph(graph_id g) noexcept { graphs_.remove(g); }

}  // namespace offloadkit::region
