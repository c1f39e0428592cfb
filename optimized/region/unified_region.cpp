// unified_region: managed memory moved by prefetch. See unified_region.hpp for how its release
// behaviour differs from vmm_region.
#include "offloadkit/region/unified_region.hpp"

#include <utility>

#include "offloadkit/error.hpp"

namespace offloadkit::region {

unified_region::unified_region(executor& ex, region_config config)
    : ex_(&ex), bytes_(config.bytes), device_(config.device) {
  expect_valid_config(config, ex, "unified_region");
  data_ = ex.allocate_managed(bytes_, device_);
}

unified_region::~unified_region() {
  graphs_.clear();
  // The executor waits for work using the allocation before it goes.
  ex_->deallocate_managed(data_, bytes_);
}

void unified_region::prefetch(bool to_device, stream_ref s) {
  ex_->prefetch(data_, bytes_, to_device ? device_ : host_location, s);
}

void unified_region::do_pause(pause_mode, stream_ref s) {
  prefetch(false, s);
  ex_->synchronize(s);
  state_ = region_state::paused;
}

void unified_region::do_resume(stream_ref s) {
  prefetch(true, s);
  state_ = region_state::active;
}

graph_id unified_region::do_register_graph(capture_fn fn, stream_ref s) {
  return graphs_.add(std::move(fn), data_, s);
}

void unified_region::do_replay(graph_id g, stream_ref s) { graphs_.replay(g, s); }

void unified_region::do_unregister_graph(graph_id g) noexcept { graphs_.remove(g); }

}  // namespace offloadkit::region
