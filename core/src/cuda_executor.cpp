// Placeholder, replaced by the back end implementation.
#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/error.hpp"

namespace offloadkit {
struct cuda_executor::impl { cuda_executor_options options; };
cuda_executor::cuda_executor(cuda_executor_options options) : impl_(new impl{options}) {}
cuda_executor::~cuda_executor() = default;
const cuda_executor_options& cuda_executor::options() const noexcept { return impl_->options; }
std::string cuda_unavailable_reason() { return "cuda back end not built"; }
backend cuda_executor::do_kind() const noexcept { return backend::cuda; }
std::string cuda_executor::do_name() const { return "cuda"; }
int cuda_executor::do_device_count() const { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_device_count is not implemented"); }
void* cuda_executor::do_allocate(memory_kind kind, std::size_t bytes, int device) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_allocate is not implemented"); }
void cuda_executor::do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept {}
pointer_info cuda_executor::do_classify(const void* p) const { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_classify is not implemented"); }
memory_info cuda_executor::do_device_memory(int device) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_device_memory is not implemented"); }
stream_ref cuda_executor::do_create_stream(int device) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_create_stream is not implemented"); }
void cuda_executor::do_destroy_stream(stream_ref s) noexcept {}
event_ref cuda_executor::do_create_event(int device) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_create_event is not implemented"); }
void cuda_executor::do_destroy_event(event_ref e) noexcept {}
void cuda_executor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_copy is not implemented"); }
void cuda_executor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_fill is not implemented"); }
void cuda_executor::do_launch(const launch_request& r, stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_launch is not implemented"); }
void cuda_executor::do_host_function(std::function<void()> fn, stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_host_function is not implemented"); }
void cuda_executor::do_record(event_ref e, stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_record is not implemented"); }
void cuda_executor::do_wait(event_ref e, stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_wait is not implemented"); }
void cuda_executor::do_synchronize_stream(stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_synchronize_stream is not implemented"); }
void cuda_executor::do_synchronize_event(event_ref e) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_synchronize_event is not implemented"); }
bool cuda_executor::do_ready(event_ref e) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_ready is not implemented"); }
std::size_t cuda_executor::do_granularity(int device) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_granularity is not implemented"); }
void* cuda_executor::do_reserve(std::size_t bytes, int device) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_reserve is not implemented"); }
void cuda_executor::do_unreserve(void* va, std::size_t bytes) noexcept {}
physical_handle cuda_executor::do_create_physical(std::size_t bytes, int device) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_create_physical is not implemented"); }
void cuda_executor::do_release_physical(physical_handle h) noexcept {}
void cuda_executor::do_map(void* va, std::size_t bytes, physical_handle h) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_map is not implemented"); }
void cuda_executor::do_unmap(void* va, std::size_t bytes) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_unmap is not implemented"); }
void cuda_executor::do_set_access(void* va, std::size_t bytes, int device) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_set_access is not implemented"); }
void cuda_executor::do_begin_capture(stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_begin_capture is not implemented"); }
graph_ref cuda_executor::do_end_capture(stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_end_capture is not implemented"); }
void cuda_executor::do_replay(graph_ref g, stream_ref s) { OFFLOADKIT_FAIL(logic_error, "cuda_executor::do_replay is not implemented"); }
void cuda_executor::do_destroy_graph(graph_ref g) noexcept {}
}  // namespace offloadkit
