// unified_region: managed memory moved by prefetch. See unified_region.hpp for how its release
// behaviour differs from vmm_region.
#include "offloadkit/region/unified_region.hpp"

#include <cuda_runtime_api.h>

#include "offloadkit/error.hpp"

namespace offloadkit::region {
namespace {

void cuda_check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so that later calls are not blamed
  throw cuda_error(offloadkit::detail::concat(call, " failed: ", cudaGetErrorName(e), ": ",
                                              cudaGetErrorString(e), " (", file, ":", line, ")"),
                   static_cast<int>(e));
}

#define REGION_CUDA_TRY(call) cuda_check((call), #call, __FILE__, __LINE__)

}  // namespace

unified_region::unified_region(executor& ex, region_config config)
    : ex_(&ex), bytes_(config.bytes), device_(config.device), managed_(ex.kind() == backend::cuda) {
  OFFLOADKIT_EXPECTS(config.bytes > 0, out_of_range,
                     "unified_region: bytes = 0; a region holds at least 1 byte");
  const int devices = ex.device_count();
  OFFLOADKIT_EXPECTS(config.device >= 0 && config.device < devices, out_of_range,
                     "unified_region: device = ", config.device, " is outside [0, ", devices, ")");
  if (managed_) {
    REGION_CUDA_TRY(cudaMallocManaged(&data_, bytes_, cudaMemAttachGlobal));
  } else {
    data_ = ex.allocate(memory_kind::pageable, bytes_);
  }
}

unified_region::~unified_region() {
  for (auto& [id, g] : graphs_) ex_->destroy_graph(g);
  if (managed_) {
    // cudaFree waits for work using the allocation; a failure here cannot be reported.
    (void)cudaFree(data_);
  } else {
    ex_->deallocate(memory_kind::pageable, data_, bytes_);
  }
}

void unified_region::prefetch(bool to_device, stream_ref s) {
  if (!managed_) return;  // host back end: managed memory is host memory already
  cudaMemLocation where{};
  where.type = to_device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  where.id = to_device ? device_ : 0;
  REGION_CUDA_TRY(
      cudaMemPrefetchAsync(data_, bytes_, where, 0, static_cast<cudaStream_t>(s.native)));
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
