// unified_region: managed memory moved by prefetch. See unified_region.hpp for how its release
// behaviour differs from vmm_region.
#include "offloadkit/region/unified_region.hpp"

#include "offloadkit/error.hpp"

namespace offloadkit::region {

unified_region::unified_region(executor& ex, region_config config)
    : ex_(&ex), bytes_(config.bytes), device_(config.device) {
  OFFLOADKIT_EXPECTS(config.bytes > 0, out_of_range,
                     "unified_region: bytes = 0; a region holds at least 1 byte");
  const int devices = ex.device_count();
  OFFLOADKIT_EXPECTS(config.device >= 0 && config.device < devices, out_of_range,
                     "unified_region: device = ", config.device, " is outside [0, ", devices, ")");
  data_ = ex.allocate_managed(bytes_, device_);
}

unified_region::~unified_region() {
  for (auto& [id, g] : graphs_) ex_->destroy_graph(g);
  // The executor waits for work using the allocation before it goes.
  ex_->deallocate_managed(data_, bytes_);
}

void unified_region::prefetch(bool to_device, stream_ref s) {
  ex_->prefetch(data_, bytes_, to_device ? device_ : host_location, s);
}

void unified_region::do_pause(stream_ref s, pause_mode) {
  prefetch(false, s);
  ex_->synchronize(s);
  state_ = region_state::paused;
}

void unified_region::do_resume(stream_ref s) {
  prefetch(true, s);
  state_ = region_state::active;
}

graph_id unified_region::do_register_graph(capture_fn fn, stream_ref s) {
  graph_ref g = detail::capture_graph(*ex_, fn, data_, s);
  ++captures_;
  const graph_id id = next_id_++;
  graphs_.emplace(id, g);
  return id;
}

void unified_region::do_replay(graph_id g, stream_ref s) {
  auto it = graphs_.find(g);
  OFFLOADKIT_EXPECTS(it != graphs_.end(), out_of_range, "unified_region::replay: graph ", g,
                     " is not registered (ids are in [1, ", next_id_, "))");
  ex_->replay(it->second, s);
}

void unified_region::do_unregister_graph(graph_id g) noexcept {
  auto it = graphs_.find(g);
  if (it == graphs_.end()) return;
  ex_->destroy_graph(it->second);
  graphs_.erase(it);
}

}  // namespace offloadkit::region
