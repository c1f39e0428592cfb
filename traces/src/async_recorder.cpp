// The schedule recorder that reads row counts from the device without a host synchronization
// (async_recorder.hpp).
#include "offloadkit/traces/async_recorder.hpp"

#include <nvtx3/nvToolsExt.h>

#include <cstring>

#include "offloadkit/error.hpp"
#include "offloadkit/traces/schedule_trace.hpp"

namespace offloadkit::traces {
namespace {

/// A slot no copy has written yet: larger than any valid row count (max_rows < 2^31).
constexpr std::uint32_t unwritten = 0xffffffffu;

nvtxDomainHandle_t domain() {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA(schedule_nvtx_domain);
  return d;
}

}  // namespace

async_schedule_recorder::async_schedule_recorder(schedule_shape shape, executor& ex, options o)
    : ex_(ex), opt_(o), shape_(shape), rec_(std::move(shape)) {
  OFFLOADKIT_EXPECTS(o.ring_slots >= 1 && o.ring_slots <= (std::size_t{1} << 24), out_of_range,
                     "ring_slots = ", o.ring_slots, " is outside [1, 2^24]");
  ring_ = static_cast<std::uint32_t*>(
      ex_.allocate(memory_kind::pinned, o.ring_slots * sizeof(std::uint32_t)));
}

async_schedule_recorder::~async_schedule_recorder() {
  ex_.deallocate(memory_kind::pinned, ring_, opt_.ring_slots * sizeof(std::uint32_t));
}

void async_schedule_recorder::check_key(stash::stash_key k) const {
  OFFLOADKIT_EXPECTS(k.vp < shape_.virtual_stages, out_of_range, "vp = ", k.vp, " is outside [0, ",
                     shape_.virtual_stages, ")");
  OFFLOADKIT_EXPECTS(k.layer < shape_.layers, out_of_range, "layer = ", k.layer, " is outside [0, ",
                     shape_.layers, ")");
  OFFLOADKIT_EXPECTS(k.microbatch < shape_.microbatches, out_of_range,
                     "microbatch = ", k.microbatch, " is outside [0, ", shape_.microbatches, ")");
}

std::size_t async_schedule_recorder::take_slots(const std::uint32_t* device_rows, std::size_t n,
                                                stream_ref s) {
  if (used_slots_ == 0) next_slot_ = 0;  // every count was resolved: start the ring over
  OFFLOADKIT_EXPECTS(next_slot_ + n <= opt_.ring_slots, state_error, "the ring's ", opt_.ring_slots,
                     " row-count slots cannot take ", n, " more (", used_slots_,
                     " wait for resolve()): resolve() at a point the job synchronizes, or give "
                     "more ring_slots");
  const std::size_t slot = next_slot_;
  // The host marks the slots before the copy is enqueued; the copy overwrites the marks.
  for (std::size_t i = 0; i < n; ++i) ring_[slot + i] = unwritten;
  ex_.copy(ring_ + slot, device_rows, n * sizeof(std::uint32_t), s);
  next_slot_ += n;
  used_slots_ += n;
  return slot;
}

void async_schedule_recorder::record_stash(stash::stash_key k, const std::uint32_t* device_rows,
                                           stream_ref s) {
  record_stashes(k, device_rows, 1, s);
}

void async_schedule_recorder::record_stashes(stash::stash_key k, const std::uint32_t* device_rows,
                                             std::size_t n, stream_ref s) {
  OFFLOADKIT_EXPECTS(device_rows != nullptr, logic_error,
                     "record_stash: device_rows is null for key (", k.vp, ", ", k.layer, ", ",
                     k.microbatch, ")");
  std::lock_guard<std::mutex> lock(mu_);
  if (n == 0) return;
  check_key(k);
  OFFLOADKIT_EXPECTS(n <= shape_.layers - k.layer, out_of_range, "layer = ", k.layer, " + ", n,
                     " counts runs past the shape's ", shape_.layers, " layers");
  const std::size_t slot = take_slots(device_rows, n, s);
  for (std::size_t i = 0; i < n; ++i) {
    pending_.push_back({entry::kind::stash_device,
                        {k.vp, k.layer + static_cast<std::uint32_t>(i), k.microbatch},
                        slot + i,
                        0});
  }
}

void async_schedule_recorder::record_stash(stash::stash_key k, std::uint64_t rows) {
  std::lock_guard<std::mutex> lock(mu_);
  check_key(k);
  pending_.push_back({entry::kind::stash_host, k, rows, 0});
}

void async_schedule_recorder::record_restore(stash::stash_key k) {
  std::lock_guard<std::mutex> lock(mu_);
  check_key(k);
  pending_.push_back({entry::kind::restore, k, 0, 0});
}

void async_schedule_recorder::set_pools(std::uint64_t device_pages, std::uint64_t pinned_pages) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back({entry::kind::pools, {}, device_pages, pinned_pages});
}

void async_schedule_recorder::emit(const std::string& text, const std::uint64_t* payload) const {
  if (!opt_.nvtx) return;
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = text.c_str();
  if (payload != nullptr) {
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = *payload;
  }
  nvtxDomainMarkEx(domain(), &a);
}

std::size_t async_schedule_recorder::resolve() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!header_written_) {
    emit(schedule_event_text(shape_), nullptr);
    header_written_ = true;
  }
  std::size_t done = 0;
  for (; done < pending_.size(); ++done) {
    const entry& e = pending_[done];
    switch (e.what) {
      case entry::kind::stash_device: {
        std::uint32_t rows = 0;
        std::memcpy(&rows, ring_ + e.a, sizeof rows);
        if (rows == unwritten) {
          pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
          OFFLOADKIT_FAIL(state_error, "resolve(): the row count of key (", e.key.vp, ", ",
                          e.key.layer, ", ", e.key.microbatch,
                          ") has not reached the host yet; call resolve() after the stream its "
                          "stash ran on has been synchronized");
        }
        rec_.record_stash(e.key);
        rec_.set_rows(e.key, rows);
        --used_slots_;
        const std::uint64_t p = rows;
        emit(stash_event_text(e.key, rows), &p);
        break;
      }
      case entry::kind::stash_host:
        rec_.record_stash(e.key);
        rec_.set_rows(e.key, e.a);
        emit(stash_event_text(e.key, e.a), &e.a);
        break;
      case entry::kind::restore:
        rec_.record_restore(e.key);
        emit(restore_event_text(e.key), nullptr);
        break;
      case entry::kind::pools:
        rec_.set_pools(e.a, e.b);
        emit(pools_event_text(e.a, e.b), nullptr);
        break;
    }
  }
  pending_.clear();
  return done;
}

std::size_t async_schedule_recorder::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

}  // namespace offloadkit::traces
