// Forwarding base of every adaptor, and the adaptors.
#include "offloadkit/adaptors.hpp"
#include "offloadkit/error.hpp"

namespace offloadkit {

backend executor_adaptor::do_kind() const noexcept {
  return upstream().kind();
}
std::string executor_adaptor::do_name() const {
  return upstream().name();
}
int executor_adaptor::do_device_count() const {
  return upstream().device_count();
}
void* executor_adaptor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  return upstream().allocate(kind, bytes, device);
}
void executor_adaptor::do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept {
  upstream().deallocate(kind, p, bytes);
}
pointer_info executor_adaptor::do_classify(const void* p) const {
  return upstream().classify(p);
}
memory_info executor_adaptor::do_device_memory(int device) {
  return upstream().device_memory(device);
}
stream_ref executor_adaptor::do_create_stream(int device) {
  return upstream().create_stream(device);
}
void executor_adaptor::do_destroy_stream(stream_ref s) noexcept {
  upstream().destroy_stream(s);
}
event_ref executor_adaptor::do_create_event(int device) {
  return upstream().create_event(device);
}
void executor_adaptor::do_destroy_event(event_ref e) noexcept {
  upstream().destroy_event(e);
}
void executor_adaptor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  upstream().copy(dst, src, bytes, s);
}
void executor_adaptor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  upstream().fill(dst, value, bytes, s);
}
void executor_adaptor::do_launch(const launch_request& r, stream_ref s) {
  upstream().launch(r, s);
}
void executor_adaptor::do_host_function(std::function<void()> fn, stream_ref s) {
  upstream().host_function(std::move(fn), s);
}
void executor_adaptor::do_record(event_ref e, stream_ref s) {
  upstream().record(e, s);
}
void executor_adaptor::do_wait(event_ref e, stream_ref s) {
  upstream().wait(e, s);
}
void executor_adaptor::do_synchronize_stream(stream_ref s) {
  upstream().synchronize(s);
}
void executor_adaptor::do_synchronize_event(event_ref e) {
  upstream().synchronize(e);
}
bool executor_adaptor::do_ready(event_ref e) {
  return upstream().ready(e);
}
std::size_t executor_adaptor::do_granularity(int device) {
  return upstream().granularity(device);
}
void* executor_adaptor::do_reserve(std::size_t bytes, int device) {
  return upstream().reserve(bytes, device);
}
void executor_adaptor::do_unreserve(void* va, std::size_t bytes) noexcept {
  upstream().unreserve(va, bytes);
}
physical_handle executor_adaptor::do_create_physical(std::size_t bytes, int device) {
  return upstream().create_physical(bytes, device);
}
void executor_adaptor::do_release_physical(physical_handle h) noexcept {
  upstream().release_physical(h);
}
void executor_adaptor::do_map(void* va, std::size_t bytes, physical_handle h) {
  upstream().map(va, bytes, h);
}
void executor_adaptor::do_unmap(void* va, std::size_t bytes) {
  upstream().unmap(va, bytes);
}
void executor_adaptor::do_set_access(void* va, std::size_t bytes, int device) {
  upstream().set_access(va, bytes, device);
}
void executor_adaptor::do_begin_capture(stream_ref s) {
  upstream().begin_capture(s);
}
graph_ref executor_adaptor::do_end_capture(stream_ref s) {
  return upstream().end_capture(s);
}
void executor_adaptor::do_replay(graph_ref g, stream_ref s) {
  upstream().replay(g, s);
}
void executor_adaptor::do_destroy_graph(graph_ref g) noexcept {
  upstream().destroy_graph(g);
}

}  // namespace offloadkit
