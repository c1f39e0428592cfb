// Forwarding base of every adaptor, and the adaptors: fault injection (countdown), delay
// injection (holds enqueued on a stream) and counting (calls, allocations, copied bytes by kind).
#include "offloadkit/adaptors.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include "hold.hpp"
#include "offloadkit/detail/splitmix64.hpp"
#include "offloadkit/error.hpp"

namespace offloadkit {

backend executor_adaptor::do_kind() const noexcept { return upstream().kind(); }
std::string executor_adaptor::do_name() const { return upstream().name(); }
int executor_adaptor::do_device_count() const { return upstream().device_count(); }
void* executor_adaptor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  return upstream().allocate(kind, bytes, device);
}
void executor_adaptor::do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept {
  upstream().deallocate(kind, p, bytes);
}
pointer_info executor_adaptor::do_classify(const void* p) const { return upstream().classify(p); }
allocation_extent executor_adaptor::do_extent_of(const void* p) const {
  return upstream().extent_of(p);
}
memory_info executor_adaptor::do_device_memory(int device) {
  return upstream().device_memory(device);
}
void* executor_adaptor::do_allocate_managed(std::size_t bytes, int device) {
  return upstream().allocate_managed(bytes, device);
}
void executor_adaptor::do_deallocate_managed(void* p, std::size_t bytes) noexcept {
  upstream().deallocate_managed(p, bytes);
}
void executor_adaptor::do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) {
  upstream().prefetch(p, bytes, device, s);
}
stream_ref executor_adaptor::do_create_stream(int device) {
  return upstream().create_stream(device);
}
void executor_adaptor::do_destroy_stream(stream_ref s) noexcept { upstream().destroy_stream(s); }
event_ref executor_adaptor::do_create_event(int device) { return upstream().create_event(device); }
void executor_adaptor::do_destroy_event(event_ref e) noexcept { upstream().destroy_event(e); }
void executor_adaptor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  upstream().copy(dst, src, bytes, s);
}
void executor_adaptor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  upstream().fill(dst, value, bytes, s);
}
void executor_adaptor::do_launch(const launch_request& r, stream_ref s) { upstream().launch(r, s); }
void executor_adaptor::do_host_function(std::function<void()> fn, stream_ref s) {
  upstream().host_function(std::move(fn), s);
}
void executor_adaptor::do_record(event_ref e, stream_ref s) { upstream().record(e, s); }
void executor_adaptor::do_wait(event_ref e, stream_ref s) { upstream().wait(e, s); }
void executor_adaptor::do_synchronize_stream(stream_ref s) { upstream().synchronize(s); }
void executor_adaptor::do_synchronize_event(event_ref e) { upstream().synchronize(e); }
bool executor_adaptor::do_ready(event_ref e) { return upstream().ready(e); }
std::size_t executor_adaptor::do_granularity(int device) { return upstream().granularity(device); }
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
void executor_adaptor::do_unmap(void* va, std::size_t bytes) { upstream().unmap(va, bytes); }
void executor_adaptor::do_set_access(void* va, std::size_t bytes, int device) {
  upstream().set_access(va, bytes, device);
}
void executor_adaptor::do_begin_capture(stream_ref s) { upstream().begin_capture(s); }
graph_ref executor_adaptor::do_end_capture(stream_ref s) { return upstream().end_capture(s); }
void executor_adaptor::do_replay(graph_ref g, stream_ref s) { upstream().replay(g, s); }
void executor_adaptor::do_destroy_graph(graph_ref g) noexcept { upstream().destroy_graph(g); }

// ---- fault_injection_adaptor
// ----------------------------------------------------------------------

namespace {

constexpr std::size_t kind_index(op_kind k) noexcept { return static_cast<std::size_t>(k); }

bool is_allocation_kind(op_kind k) noexcept {
  return k == op_kind::allocate_device || k == op_kind::allocate_pinned ||
         k == op_kind::allocate_pageable || k == op_kind::allocate_managed ||
         k == op_kind::create_physical;
}

}  // namespace

void fault_injection_adaptor::arm(const std::vector<op_kind>& kinds, std::size_t n) {
  for (op_kind k : kinds) {
    OFFLOADKIT_EXPECTS(kind_index(k) < kind_index(op_kind::count_), out_of_range,
                       "fault_injection_adaptor::arm: op kind ", kind_index(k), " is outside [0, ",
                       kind_index(op_kind::count_), ")");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  armed_.fill(false);
  for (op_kind k : kinds) armed_[kind_index(k)] = true;
  target_ = n;
  seen_ = 0;
  active_ = true;
  fired_ = false;
}

void fault_injection_adaptor::disarm() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_.fill(false);
  active_ = false;
}

bool fault_injection_adaptor::fired() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return fired_;
}

std::size_t fault_injection_adaptor::armed_calls() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return seen_;
}

void fault_injection_adaptor::maybe_fail(op_kind k) {
  std::size_t call = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!armed_[kind_index(k)]) return;
    call = seen_++;
    // Calls keep being counted after the fault fired, so armed_calls() tells how many calls of the
    // armed kinds an operation makes; only the n-th one fails, and only once per arm().
    if (!active_ || call != target_) return;
    active_ = false;
    fired_ = true;
  }
  const std::string what =
      detail::concat("injected fault: ", to_string(k), " failed as armed call #", call,
                     " (0-based) among the armed op kinds");
  if (is_allocation_kind(k)) throw out_of_memory(what);
  throw injected_fault(what);
}

void* fault_injection_adaptor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  maybe_fail(allocation_op(kind));
  return executor_adaptor::do_allocate(kind, bytes, device);
}
void* fault_injection_adaptor::do_allocate_managed(std::size_t bytes, int device) {
  maybe_fail(op_kind::allocate_managed);
  return executor_adaptor::do_allocate_managed(bytes, device);
}
void fault_injection_adaptor::do_prefetch(const void* p, std::size_t bytes, int device,
                                          stream_ref s) {
  maybe_fail(op_kind::prefetch);
  executor_adaptor::do_prefetch(p, bytes, device, s);
}
void fault_injection_adaptor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  maybe_fail(op_kind::copy);
  executor_adaptor::do_copy(dst, src, bytes, s);
}
void fault_injection_adaptor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  maybe_fail(op_kind::fill);
  executor_adaptor::do_fill(dst, value, bytes, s);
}
void fault_injection_adaptor::do_launch(const launch_request& r, stream_ref s) {
  maybe_fail(op_kind::launch);
  executor_adaptor::do_launch(r, s);
}
void fault_injection_adaptor::do_host_function(std::function<void()> fn, stream_ref s) {
  maybe_fail(op_kind::host_function);
  executor_adaptor::do_host_function(std::move(fn), s);
}
void fault_injection_adaptor::do_record(event_ref e, stream_ref s) {
  maybe_fail(op_kind::record);
  executor_adaptor::do_record(e, s);
}
void fault_injection_adaptor::do_wait(event_ref e, stream_ref s) {
  maybe_fail(op_kind::wait);
  executor_adaptor::do_wait(e, s);
}
void* fault_injection_adaptor::do_reserve(std::size_t bytes, int device) {
  maybe_fail(op_kind::reserve);
  return executor_adaptor::do_reserve(bytes, device);
}
physical_handle fault_injection_adaptor::do_create_physical(std::size_t bytes, int device) {
  maybe_fail(op_kind::create_physical);
  return executor_adaptor::do_create_physical(bytes, device);
}
void fault_injection_adaptor::do_map(void* va, std::size_t bytes, physical_handle h) {
  maybe_fail(op_kind::map);
  executor_adaptor::do_map(va, bytes, h);
}
void fault_injection_adaptor::do_unmap(void* va, std::size_t bytes) {
  maybe_fail(op_kind::unmap);
  executor_adaptor::do_unmap(va, bytes);
}
void fault_injection_adaptor::do_set_access(void* va, std::size_t bytes, int device) {
  maybe_fail(op_kind::set_access);
  executor_adaptor::do_set_access(va, bytes, device);
}
void fault_injection_adaptor::do_begin_capture(stream_ref s) {
  maybe_fail(op_kind::begin_capture);
  executor_adaptor::do_begin_capture(s);
}
graph_ref fault_injection_adaptor::do_end_capture(stream_ref s) {
  maybe_fail(op_kind::end_capture);
  return executor_adaptor::do_end_capture(s);
}
void fault_injection_adaptor::do_replay(graph_ref g, stream_ref s) {
  maybe_fail(op_kind::replay);
  executor_adaptor::do_replay(g, s);
}

// ---- delay_adaptor
// ----------------------------------------------------------------------------------

void delay_adaptor::delay_next(std::chrono::microseconds d, std::size_t ops, stream_ref s) {
  OFFLOADKIT_EXPECTS(d.count() >= 0, out_of_range, "delay_adaptor::delay_next: delay ", d.count(),
                     " us is negative; valid delays are >= 0");
  std::lock_guard<std::mutex> lock(mutex_);
  plan& p = plans_[s.native];
  p.fixed = d;
  p.fixed_ops = ops;
}

void delay_adaptor::delay_randomly(stream_ref s, std::chrono::microseconds max,
                                   std::uint64_t seed) {
  OFFLOADKIT_EXPECTS(max.count() >= 0, out_of_range, "delay_adaptor::delay_randomly: max ",
                     max.count(), " us is negative; valid maxima are >= 0");
  std::lock_guard<std::mutex> lock(mutex_);
  plan& p = plans_[s.native];
  p.random_max = max;
  p.state = seed;
}

void delay_adaptor::clear() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  plans_.clear();
}

void delay_adaptor::maybe_delay(stream_ref s) {
  std::chrono::microseconds d{0};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = plans_.find(s.native);
    if (it == plans_.end()) return;
    plan& p = it->second;
    if (p.fixed_ops > 0) {
      --p.fixed_ops;
      d = p.fixed;
    } else if (p.random_max.count() > 0) {
      const auto span = static_cast<std::uint64_t>(p.random_max.count()) + 1;
      d = std::chrono::microseconds(static_cast<std::int64_t>(detail::splitmix64(p.state) % span));
    }
  }
  if (d.count() <= 0) return;
  // The hold runs on the stream, not on the caller: the stream's later work starts late while
  // the host and the other streams run on.
  executor_adaptor::do_launch(detail::hold_request(d), s);
}

void delay_adaptor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  maybe_delay(s);
  executor_adaptor::do_copy(dst, src, bytes, s);
}
void delay_adaptor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  maybe_delay(s);
  executor_adaptor::do_fill(dst, value, bytes, s);
}
void delay_adaptor::do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) {
  maybe_delay(s);
  executor_adaptor::do_prefetch(p, bytes, device, s);
}
void delay_adaptor::do_launch(const launch_request& r, stream_ref s) {
  maybe_delay(s);
  executor_adaptor::do_launch(r, s);
}
void delay_adaptor::do_host_function(std::function<void()> fn, stream_ref s) {
  maybe_delay(s);
  executor_adaptor::do_host_function(std::move(fn), s);
}
void delay_adaptor::do_record(event_ref e, stream_ref s) {
  maybe_delay(s);
  executor_adaptor::do_record(e, s);
}

// ---- counting_adaptor
// -------------------------------------------------------------------------------

std::size_t counting_adaptor::counts::pageable_bytes() const noexcept {
  const auto pg = static_cast<std::size_t>(pointer_kind::pageable);
  std::size_t total = 0;
  for (std::size_t i = 0; i < copied_bytes.size(); ++i) {
    for (std::size_t j = 0; j < copied_bytes[i].size(); ++j) {
      if (i == pg || j == pg) total += copied_bytes[i][j];
    }
  }
  return total;
}

counting_adaptor::counts counting_adaptor::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

void counting_adaptor::reset() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  counts_ = counts{};
}

void counting_adaptor::count(op_kind k) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_.calls[kind_index(k)];
}

void* counting_adaptor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  count(allocation_op(kind));
  void* p = executor_adaptor::do_allocate(kind, bytes, device);
  // Only allocations that succeeded count as allocations; the attempt counts as a call.
  std::lock_guard<std::mutex> lock(mutex_);
  const auto k = static_cast<std::size_t>(kind);
  ++counts_.allocations[k];
  counts_.allocated_bytes[k] += bytes;
  return p;
}

void* counting_adaptor::do_allocate_managed(std::size_t bytes, int device) {
  count(op_kind::allocate_managed);
  return executor_adaptor::do_allocate_managed(bytes, device);
}

void counting_adaptor::do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) {
  count(op_kind::prefetch);
  executor_adaptor::do_prefetch(p, bytes, device, s);
}

void counting_adaptor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  count(op_kind::copy);
  // Classified at call time: a pointer may be released or remapped by the time the copy runs.
  const pointer_kind from = upstream().classify(src).kind;
  const pointer_kind to = upstream().classify(dst).kind;
  executor_adaptor::do_copy(dst, src, bytes, s);
  std::lock_guard<std::mutex> lock(mutex_);
  counts_.copied_bytes[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)] += bytes;
}

void counting_adaptor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  count(op_kind::fill);
  executor_adaptor::do_fill(dst, value, bytes, s);
}
void counting_adaptor::do_launch(const launch_request& r, stream_ref s) {
  count(op_kind::launch);
  executor_adaptor::do_launch(r, s);
}
void counting_adaptor::do_host_function(std::function<void()> fn, stream_ref s) {
  count(op_kind::host_function);
  executor_adaptor::do_host_function(std::move(fn), s);
}
void counting_adaptor::do_record(event_ref e, stream_ref s) {
  count(op_kind::record);
  executor_adaptor::do_record(e, s);
}
void counting_adaptor::do_wait(event_ref e, stream_ref s) {
  count(op_kind::wait);
  executor_adaptor::do_wait(e, s);
}
void* counting_adaptor::do_reserve(std::size_t bytes, int device) {
  count(op_kind::reserve);
  return executor_adaptor::do_reserve(bytes, device);
}
physical_handle counting_adaptor::do_create_physical(std::size_t bytes, int device) {
  count(op_kind::create_physical);
  return executor_adaptor::do_create_physical(bytes, device);
}
void counting_adaptor::do_map(void* va, std::size_t bytes, physical_handle h) {
  count(op_kind::map);
  executor_adaptor::do_map(va, bytes, h);
}
void counting_adaptor::do_unmap(void* va, std::size_t bytes) {
  count(op_kind::unmap);
  executor_adaptor::do_unmap(va, bytes);
}
void counting_adaptor::do_set_access(void* va, std::size_t bytes, int device) {
  count(op_kind::set_access);
  executor_adaptor::do_set_access(va, bytes, device);
}
void counting_adaptor::do_begin_capture(stream_ref s) {
  count(op_kind::begin_capture);
  executor_adaptor::do_begin_capture(s);
}
graph_ref counting_adaptor::do_end_capture(stream_ref s) {
  count(op_kind::end_capture);
  return executor_adaptor::do_end_capture(s);
}
void counting_adaptor::do_replay(graph_ref g, stream_ref s) {
  count(op_kind::replay);
  executor_adaptor::do_replay(g, s);
}

}  // namespace offloadkit
