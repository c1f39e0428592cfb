// The host executor's streams and events: a worker thread per stream draining its queue, copies,
// fills, launches and host functions queued on it, events recorded and waited on.
#include "host_executor_impl.hpp"

namespace offloadkit {

// ---- streams and events
// --------------------------------------------------------------------------

stream_ref host_executor::do_create_stream(int device) {
  impl& m = *impl_;
  m.check_device(device, "create_stream");
  auto s = m.start_stream(device, false);
  std::lock_guard<std::mutex> lk(m.handle_mu);
  m.streams[s.get()] = s;
  return stream_ref{s.get(), device};
}

void host_executor::do_destroy_stream(stream_ref ref) noexcept {
  impl& m = *impl_;
  if (ref.native == nullptr) return;  // the default stream lives as long as the executor
  std::shared_ptr<stream_state> s;
  {
    std::lock_guard<std::mutex> lk(m.handle_mu);
    auto it = m.streams.find(ref.native);
    const bool destroy_stream_of_a_live_stream = it != m.streams.end();
    OFFLOADKIT_ASSERT_NOEXCEPT(destroy_stream_of_a_live_stream);
    if (!destroy_stream_of_a_live_stream) return;
    s = std::move(it->second);
    m.streams.erase(it);
    if (tls_executor_thread) {
      // Joining from a worker could be joining itself; the destructor joins it instead.
      impl::stop_stream(*s);
      m.orphans.push_back(std::move(s));
      return;
    }
  }
  impl::stop_stream(*s);
  impl::join_stream(*s);
}

event_ref host_executor::do_create_event(int device) {
  impl& m = *impl_;
  m.check_device(device, "create_event");
  auto e = std::make_shared<event_state>();
  e->device = device;
  std::lock_guard<std::mutex> lk(m.handle_mu);
  m.events[e.get()] = e;
  return event_ref{e.get(), device};
}

void host_executor::do_destroy_event(event_ref e) noexcept {
  impl& m = *impl_;
  // Queued records and waits hold their own markers, so they complete normally (as on CUDA).
  std::lock_guard<std::mutex> lk(m.handle_mu);
  const bool destroy_event_of_a_live_event = m.events.erase(e.native) == 1;
  OFFLOADKIT_ASSERT_NOEXCEPT(destroy_event_of_a_live_event);
}

void host_executor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("copy");
  if (bytes == 0) return;
  OFFLOADKIT_EXPECTS(dst != nullptr && src != nullptr, logic_error,
                     "host_executor::copy: null pointer (dst = ", dst, ", src = ", src, ") for ",
                     bytes, " bytes");
  m.check_extent(dst, bytes, "copy destination");
  m.check_extent(src, bytes, "copy source");
  const std::uintptr_t d = address(dst);
  const std::uintptr_t r = address(src);
  OFFLOADKIT_EXPECTS(d + bytes <= r || r + bytes <= d, logic_error, "host_executor::copy: source [",
                     src, ", +", bytes, ") and destination [", dst, ", +", bytes, ") overlap");
  op o;
  o.t = op::type::copy;
  o.dst = dst;
  o.src = src;
  o.bytes = bytes;
  m.issue(s, std::move(o), "copy");
}

void host_executor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("fill");
  if (bytes == 0) return;
  OFFLOADKIT_EXPECTS(dst != nullptr, logic_error, "host_executor::fill: null destination for ",
                     bytes, " bytes");
  m.check_extent(dst, bytes, "fill");
  op o;
  o.t = op::type::fill;
  o.dst = dst;
  o.value = static_cast<unsigned char>(value);
  o.bytes = bytes;
  m.issue(s, std::move(o), "fill");
}

void host_executor::do_launch(const launch_request& r, stream_ref s) {
  impl& m = *impl_;
  OFFLOADKIT_EXPECTS(r.host_run != nullptr, logic_error, "host_executor::launch: '", launch_name(r),
                     "' has no host entry point (host_run is null); build requests with "
                     "offloadkit::make_launch");
  OFFLOADKIT_EXPECTS(r.block >= 1 && r.block <= max_block, out_of_range, "host_executor::launch: '",
                     launch_name(r), "' block = ", r.block, " is outside [1, ", max_block, "]");
  if (r.n == 0) {
    (void)m.find_stream(s, "launch");  // still reject a bad stream
    return;
  }
  op o;
  o.t = op::type::launch;
  o.request = r;
  m.issue(s, std::move(o), "launch");
}

void host_executor::do_host_function(std::function<void()> fn, stream_ref s) {
  OFFLOADKIT_EXPECTS(static_cast<bool>(fn), logic_error,
                     "host_executor::host_function: the function is empty");
  op o;
  o.t = op::type::host_function;
  o.fn = std::move(fn);
  impl_->issue(s, std::move(o), "host_function");
}

void host_executor::do_record(event_ref e, stream_ref s) {
  impl& m = *impl_;
  auto ev = m.find_event(e, "record");
  OFFLOADKIT_EXPECTS(ev->device == s.device, logic_error, "host_executor::record: event ", e.native,
                     " of device ", ev->device, " cannot be recorded on a stream of device ",
                     s.device, " (CUDA requires the same device)");
  op o;
  o.t = op::type::record;
  o.event = std::move(ev);
  m.issue(s, std::move(o), "record");
}

void host_executor::do_wait(event_ref e, stream_ref s) {
  impl& m = *impl_;
  op o;
  o.t = op::type::wait;
  o.event = m.find_event(e, "wait");
  m.issue(s, std::move(o), "wait");
}

void host_executor::do_synchronize_stream(stream_ref ref) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("synchronize(stream)");
  auto s = m.find_stream(ref, "synchronize");
  std::unique_lock<std::mutex> lk(s->mu);
  OFFLOADKIT_EXPECTS(!s->capture, state_error, "host_executor::synchronize: stream ", ref.native,
                     " is capturing; end the capture first");
  const std::uint64_t target = s->enqueued;
  s->done_cv.wait(lk, [&] { return s->completed >= target; });
  if (s->sticky) {
    std::exception_ptr error = std::exchange(s->sticky, nullptr);
    lk.unlock();
    std::rethrow_exception(error);
  }
}

void host_executor::do_synchronize_event(event_ref e) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("synchronize(event)");
  auto ev = m.find_event(e, "synchronize");
  std::unique_lock<std::mutex> lk(m.signal_mu);
  std::shared_ptr<marker> mark = ev->latest;
  if (!mark) return;
  m.signal_cv.wait(lk, [&] { return mark->done; });
}

bool host_executor::do_ready(event_ref e) {
  impl& m = *impl_;
  auto ev = m.find_event(e, "ready");
  std::lock_guard<std::mutex> lk(m.signal_mu);
  return !ev->latest || ev->latest->done;
}

}  // namespace offloadkit
