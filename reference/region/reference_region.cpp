// The reference region: one device allocation, a fresh pageable host copy per pause, synchronous
// copies, and re-capture of every registered graph on resume.
#include "offloadkit/region/reference_region.hpp"

#include <vector>

#include "offloadkit/error.hpp"

namespace offloadkit::region {

reference_region::reference_region(executor& ex, region_config config)
    : ex_(&ex), bytes_(config.bytes), device_id_(config.device) {
  OFFLOADKIT_EXPECTS(config.bytes > 0, out_of_range,
                     "reference_region: bytes = 0; a region holds at least 1 byte");
  const int devices = ex.device_count();
  OFFLOADKIT_EXPECTS(config.device >= 0 && config.device < devices, out_of_range,
                     "reference_region: device = ", config.device, " is outside [0, ", devices,
                     ")");
  device_ = ex.allocate(memory_kind::device, bytes_, device_id_);
}

reference_region::~reference_region() {
  for (auto& [id, r] : graphs_) ex_->destroy_graph(r.graph);
  if (device_ != nullptr) ex_->deallocate(memory_kind::device, device_, bytes_);
  if (host_ != nullptr) ex_->deallocate(memory_kind::pageable, host_, bytes_);
}

void reference_region::do_pause(stream_ref s, pause_mode mode) {
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
  std::vector<std::pair<graph_id, graph_ref>> fresh;
  try {
    if (host_ != nullptr) {
      ex_->copy(dev, host_, bytes_, s);
      ex_->synchronize(s);
    }
    // Graphs captured on the old address would write freed memory: capture them again.
    for (auto& [id, r] : graphs_) {
      fresh.emplace_back(id, detail::capture_graph(*ex_, r.fn, dev, s));
      ++captures_;
    }
  } catch (...) {
    // Back to paused: the host copy is untouched.
    try {
      ex_->synchronize(s);
    } catch (const std::exception&) {
      // The caller gets the error that stopped the resume; a failed drain is the stream's
      // failure seen again.
    }
    for (auto& [id, g] : fresh) ex_->destroy_graph(g);
    ex_->deallocate(memory_kind::device, dev, bytes_);
    throw;
  }
  for (auto& [id, g] : fresh) {
    ex_->destroy_graph(graphs_[id].graph);
    graphs_[id].graph = g;
  }
  if (host_ != nullptr) ex_->deallocate(memory_kind::pageable, host_, bytes_);
  host_ = nullptr;
  device_ = dev;
  state_ = region_state::active;
}

graph_id reference_region::do_register_graph(capture_fn fn, stream_ref s) {
  graph_ref g = detail::capture_graph(*ex_, fn, device_, s);
  ++captures_;
  const graph_id id = next_id_++;
  graphs_.emplace(id, registered{std::move(fn), g});
  return id;
}

void reference_region::do_replay(graph_id g, stream_ref s) {
  auto it = graphs_.find(g);
  OFFLOADKIT_EXPECTS(it != graphs_.end(), out_of_range, "reference_region::replay: graph ", g,
                     " is not registered (ids are in [1, ", next_id_, "))");
  ex_->replay(it->second.graph, s);
}

void reference_region::do_unregister_graph(graph_id g) noexcept {
  auto it = graphs_.find(g);
  if (it == graphs_.end()) return;
  ex_->destroy_graph(it->second.graph);
  graphs_.erase(it);
}

}  // namespace offloadkit::region
