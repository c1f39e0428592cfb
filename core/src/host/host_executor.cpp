// The host back end of the executor: CUDA's semantics on the CPU with real concurrency.
//
// Memory is host memory recorded in a registry so that classify() and the simulated device
// capacity work as on a GPU. Each stream is a worker thread draining an in-order queue; events are
// markers that the worker of the recording stream signals. A launch runs the functor's host entry
// point over chunks of its index space on a small thread pool. Virtual memory is a PROT_NONE
// reservation into which memfd-backed physical memory is mapped MAP_FIXED, so a stale address
// faults. Graph capture records the operations issued to a stream and replay re-issues them.
// This file: construction, destruction and identity.
#include "host_executor_impl.hpp"

namespace offloadkit {

// ---- construction ------------------------------------------------------------------------------

namespace {
host_executor_options validated(host_executor_options o) {
  const long page = sysconf(_SC_PAGESIZE);
  const std::size_t page_size = page > 0 ? static_cast<std::size_t>(page) : 4096;
  OFFLOADKIT_EXPECTS(o.devices >= 1, out_of_range, "host_executor_options::devices = ", o.devices,
                     " must be at least 1");
  OFFLOADKIT_EXPECTS(o.granularity > 0 && o.granularity % page_size == 0, out_of_range,
                     "host_executor_options::granularity = ", o.granularity,
                     " must be a positive multiple of the page size ", page_size);
  OFFLOADKIT_EXPECTS(o.launch_threads >= 1 && o.launch_threads <= 256, out_of_range,
                     "host_executor_options::launch_threads = ", o.launch_threads,
                     " is outside [1, 256]");
  return o;
}
}  // namespace

host_executor::host_executor(host_executor_options options)
    : impl_(std::make_unique<impl>(validated(options))) {}

host_executor::~host_executor() {
  impl& m = *impl_;
  // Streams first: their queued work may still touch the memory released below.
  std::vector<std::shared_ptr<stream_state>> all;
  {
    std::lock_guard<std::mutex> lk(m.handle_mu);
    for (auto& kv : m.streams) all.push_back(kv.second);
    for (auto& kv : m.default_streams) all.push_back(kv.second);
    for (auto& s : m.orphans) all.push_back(s);
    m.streams.clear();
    m.default_streams.clear();
    m.orphans.clear();
    m.graphs.clear();
    m.events.clear();
  }
  for (auto& s : all) impl::stop_stream(*s);
  for (auto& s : all) {
    if (s->worker.joinable()) s->worker.join();
  }
  std::lock_guard<std::mutex> lk(m.mem_mu);
  // Carved allocations go with their arenas, when the impl is destroyed.
  for (auto& kv : m.allocations) {
    if (!kv.second.carved) std::free(kv.first);
  }
  m.allocations.clear();
  for (auto& kv : m.reservations) munmap(kv.first, kv.second.bytes);
  m.reservations.clear();
  for (auto& kv : m.physicals) {
    if (kv.second.fd >= 0) close(kv.second.fd);
  }
  m.physicals.clear();
}

const host_executor_options& host_executor::options() const noexcept { return impl_->options; }

backend host_executor::do_kind() const noexcept { return backend::host; }

std::string host_executor::do_name() const { return "host"; }

int host_executor::do_device_count() const { return impl_->options.devices; }

}  // namespace offloadkit
