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
void executor_adaptor::before(op_kind /*kind*/, std::optional<stream_ref> /*stream*/) {}
void* executor_adaptor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  before(allocation_op(kind), std::nullopt);
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
  before(op_kind::allocate_managed, std::nullopt);
  return upstream().allocate_managed(bytes, device);
}
void executor_adaptor::do_deallocate_managed(void* p, std::size_t bytes) noexcept {
  upstream().deallocate_managed(p, bytes);
}
void executor_adaptor::do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) {
  before(op_kind::prefetch, s);
  upstream().prefetch(p, bytes, device, s);
}
stream_ref executor_adaptor::do_create_stream(int device) {
  return upstream().create_stream(device);
}
void executor_adaptor::do_destroy_stream(stream_ref s) noexcept { upstream().destroy_stream(s); }
event_ref executor_adaptor::do_create_event(int device) { return upstream().create_event(device); }
void executor_adaptor::do_destroy_event(event_ref e) noexcept { upstream().destroy_event(e); }
void executor_adaptor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  before(op_kind::copy, s);
  upstream().copy(dst, src, bytes, s);
}
void executor_adaptor::do_fill(void* dst, int value, std::size_t bytes, stream_ref s) {
  before(op_kind::fill, s);
  upstream().fill(dst, value, bytes, s);
}
void executor_adaptor::do_launch(const launch_request& r, stream_ref s) {
  before(op_kind::launch, s);
  upstream().launch(r, s);
}
void executor_adaptor::do_host_function(std::function<void()> fn, stream_ref s) {
  before(op_kind::host_function, s);
  upstream().host_function(std::move(fn), s);
}
void executor_adaptor::do_record(event_ref e, stream_ref s) {
  before(op_kind::record, s);
  upstream().record(e, s);
}
void executor_adaptor::do_wait(event_ref e, stream_ref s) {
  before(op_kind::wait, s);
  upstream().wait(e, s);
}
void executor_adaptor::do_synchronize_stream(stream_ref s) { upstream().synchronize(s); }
void executor_adaptor::do_synchronize_event(event_ref e) { upstream().synchronize(e); }
bool executor_adaptor::do_ready(event_ref e) { return upstream().ready(e); }
std::size_t executor_adaptor::do_granularity(int device) { return upstream().granularity(device); }
void* executor_adaptor::do_reserve(std::size_t bytes, int device) {
  before(op_kind::reserve, std::nullopt);
  return upstream().reserve(bytes, device);
}
void executor_adaptor::do_unreserve(void* va, std::size_t bytes) noexcept {
  upstream().unreserve(va, bytes);
}
physical_handle executor_adaptor::do_create_physical(std::size_t bytes, int device) {
  before(op_kind::create_physical, std::nullopt);
  return upstream().create_physical(bytes, device);
}
void executor_adaptor::do_release_physical(physical_handle h) noexcept {
  upstream().release_physical(h);
}
void executor_adaptor::do_map(void* va, std::size_t bytes, physical_handle h) {
  before(op_kind::map, std::nullopt);
  upstream().map(va, bytes, h);
}
void executor_adaptor::do_unmap(void* va, std::size_t bytes) {
  before(op_kind::unmap, std::nullopt);
  upstream().unmap(va, bytes);
}
void executor_adaptor::do_set_access(void* va, std::size_t bytes, int device) {
  before(op_kind::set_access, std::nullopt);
  upstream().set_access(va, bytes, device);
}
void executor_adaptor::do_begin_capture(stream_ref s) {
  before(op_kind::begin_capture, s);
  upstream().begin_capture(s);
}
graph_ref executor_adaptor::do_end_capture(stream_ref s) {
  before(op_kind::end_capture, s);
  return upstream().end_capture(s);
}
void executor_adaptor::do_replay(graph_ref g, stream_ref s) {
  before(op_kind::replay, s);
  upstream().replay(g, s);
}
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

void fault_injection_adaptor::before(op_kind k, std::optional<stream_ref> /*stream*/) {
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

void delay_adaptor::before(op_kind kind, std::optional<stream_ref> stream) {
  switch (kind) {
    case op_kind::prefetch:
    case op_kind::copy:
    case op_kind::fill:
    case op_kind::launch:
    case op_kind::host_function:
    case op_kind::record:
      break;
    default:
      return;
  }
  if (!stream) return;
  const stream_ref s = *stream;
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
  // the host and the other streams run on. Straight to the upstream: the hold is no call to delay.
  upstream().launch(detail::hold_request(d), s);
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

void counting_adaptor::before(op_kind k, std::optional<stream_ref> /*stream*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_.calls[kind_index(k)];
}

void* counting_adaptor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  // The attempt counts as a call (before()); only allocations that succeeded count as
  // allocations.
  void* p = executor_adaptor::do_allocate(kind, bytes, device);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto k = static_cast<std::size_t>(kind);
  ++counts_.allocations[k];
  counts_.allocated_bytes[k] += bytes;
  return p;
}

void counting_adaptor::do_copy(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  // Classified at call time: a pointer may be released or remapped by the time the copy runs.
  const pointer_kind from = upstream().classify(src).kind;
  const pointer_kind to = upstream().classify(dst).kind;
  executor_adaptor::do_copy(dst, src, bytes, s);
  std::lock_guard<std::mutex> lock(mutex_);
  counts_.copied_bytes[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)] += bytes;
}

}  // namespace offloadkit
