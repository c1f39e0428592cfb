// The optimized activation offloader (see the header for the scheme).
#include "offloadkit/activation/async_offloader.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "offloadkit/error.hpp"

namespace offloadkit::activation {
namespace {

/// A cached buffer serves a request when it is large enough and not wastefully larger.
bool fits(std::size_t capacity, std::size_t bytes) {
  return capacity >= bytes && capacity <= 2 * bytes + 4096;
}

}  // namespace

async_offloader::async_offloader(executor& ex, offload_options options)
    : ex_(ex), options_(options) {
  OFFLOADKIT_EXPECTS(options_.prefetch_layers >= 0, out_of_range,
                     "prefetch_layers = ", options_.prefetch_layers, " is outside [0, 2^31)");
}

async_offloader::~async_offloader() {
  try {
    do_synchronize();
  } catch (...) {
    // A destructor cannot report: the copies that failed already threw from the call that waited
    // on them (pack, unpack or synchronize), and what follows frees every buffer either way.
  }
  for (auto& [id, r] : records_) {
    try {
      if (r.kept || !r.source_released) {
        auto f = std::move(r.source.release);
        if (f) f();
      }
    } catch (...) {
      // The owner's release failed in a destructor, which cannot report it; the other sources
      // must still go back to their owners, so the loop goes on.
    }
    if (r.pinned.ptr != nullptr)
      ex_.deallocate(memory_kind::pinned, r.pinned.ptr, r.pinned.capacity);
    if (r.prefetched) drop_device(r.dev);
  }
  for (auto& d : deferred_) {
    try {
      if (d.release) d.release();
    } catch (...) {
      // As above: a destructor cannot report the owner's failure, and the rest must go back.
    }
  }
  for (auto& p : pinned_free_) ex_.deallocate(memory_kind::pinned, p.ptr, p.capacity);
  for (auto& b : device_free_) drop_device(b);
  for (auto e : all_events_) ex_.destroy_event(e);
}

std::size_t async_offloader::do_keep_threshold() const noexcept { return options_.keep_threshold; }

offload_stats async_offloader::do_stats() const { return stats_; }

void async_offloader::note_peak() noexcept {
  stats_.peak_prefetch_bytes = std::max(stats_.peak_prefetch_bytes, held());
}

async_offloader::lane& async_offloader::lane_of(int device) {
  auto it = lanes_.find(device);
  if (it != lanes_.end()) return it->second;
  lane l;
  l.copy = stream(ex_, device);
  l.upload = stream(ex_, device);
  return lanes_.emplace(device, std::move(l)).first->second;
}

event_ref async_offloader::take_event(int device) {
  lane& l = lane_of(device);
  if (!l.free_events.empty()) {
    const event_ref e = l.free_events.back();
    l.free_events.pop_back();
    return e;
  }
  event_ref e = ex_.create_event(device);
  e.device = device;
  all_events_.push_back(e);
  return e;
}

// An event goes back to the pool only once it has completed, so that recording it again never
// races with a wait still pending on its previous record.
void async_offloader::retire_event(event_ref e) { retiring_.push_back(e); }

void async_offloader::reap(bool wait) {
  // Where it waits, it polls first: after do_synchronize() most events are already complete, and a
  // poll, unlike a synchronization, is not a host wait in a timeline.
  auto settle = [this](event_ref e) {
    if (!ex_.ready(e)) ex_.synchronize(e);
  };
  std::vector<std::function<void()>> to_call;
  // Sources already marked released are handed back even if a wait below throws, and every one
  // of them even if a release throws: the first release error is returned for the caller.
  auto call_collected = [&to_call] {
    std::exception_ptr first;
    for (auto& f : to_call) {
      try {
        if (f) f();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    return first;
  };
  try {
    for (auto& [device, l] : lanes_) {
      while (record* r = oldest_in_copy(l)) {
        // In backward, the last layer's sources stay until their unpack serves them in place:
        // handed back earlier, they would be uploaded after tensors that prefetch, skipping
        // them, already uploaded, and their unpack would wait behind those.
        if (!wait && in_backward_ && r->layer == last_pack_layer_) break;
        if (wait) {
          settle(r->copy_done);
        } else if (!ex_.ready(r->copy_done)) {
          break;  // copies complete in issue order on one copy stream
        }
        to_call.push_back(hand_back_oldest(l));
      }
    }
    for (std::size_t i = 0; i < deferred_.size();) {
      auto& d = deferred_[i];
      bool done;
      if (wait) {
        settle(d.copy_done);
        if (d.has_used) settle(d.used);
        done = true;
      } else {
        done = ex_.ready(d.copy_done) && (!d.has_used || ex_.ready(d.used));
      }
      if (done) {
        to_call.push_back(std::move(d.release));
        retire_event(d.copy_done);
        if (d.has_used) retire_event(d.used);
        deferred_.erase(deferred_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    for (std::size_t i = 0; i < retiring_.size();) {
      const event_ref e = retiring_[i];
      if (wait) settle(e);
      if (wait || ex_.ready(e)) {
        lane_of(e.device).free_events.push_back(e);
        retiring_[i] = retiring_.back();
        retiring_.pop_back();
      } else {
        ++i;
      }
    }
  } catch (...) {
    // The wait's error is the one the caller gets: it is why this call failed, and a release
    // error returned here would hide it. The releases themselves still all run.
    (void)call_collected();
    throw;
  }
  if (std::exception_ptr e = call_collected()) std::rethrow_exception(e);
}

async_offloader::record* async_offloader::oldest_in_copy(lane& l) {
  while (!l.in_copy.empty()) {
    const auto it = records_.find(l.in_copy.front());
    if (it != records_.end() && !it->second.source_released) return &it->second;
    l.in_copy.pop_front();  // unpacked meanwhile, or already handed back
  }
  return nullptr;
}

std::function<void()> async_offloader::hand_back_oldest(lane& l) {
  record& r = records_.at(l.in_copy.front());
  r.source_released = true;
  auto release = std::move(r.source.release);
  r.source.release = nullptr;
  l.in_copy.pop_front();
  return release;
}

void async_offloader::make_room_for(std::size_t incoming, int device) {
  if (options_.max_pending_bytes == 0) return;
  lane& l = lane_of(device);
  std::size_t pending = 0;
  for (const std::uint64_t id : l.in_copy) {
    const auto it = records_.find(id);
    if (it != records_.end() && !it->second.source_released) pending += it->second.source.bytes;
  }
  while (pending + incoming > options_.max_pending_bytes) {
    record* r = oldest_in_copy(l);
    if (r == nullptr) break;
    ex_.synchronize(r->copy_done);  // throws with nothing changed
    pending -= r->source.bytes;
    stats_.pending_waits += 1;
    auto release = hand_back_oldest(l);
    if (release) release();
  }
}

async_offloader::pooled async_offloader::take_pinned(std::size_t bytes) {
  auto best = pinned_free_.end();
  for (auto it = pinned_free_.begin(); it != pinned_free_.end(); ++it) {
    if (fits(it->capacity, bytes) &&
        (best == pinned_free_.end() || it->capacity < best->capacity)) {
      best = it;
    }
  }
  if (best != pinned_free_.end()) {
    pooled p = *best;
    pinned_free_.erase(best);
    return p;
  }
  pooled p;
  p.ptr = ex_.allocate(memory_kind::pinned, bytes);
  p.capacity = bytes;
  stats_.pinned_allocations += 1;
  return p;
}

void async_offloader::drop_device(pooled& b) noexcept {
  if (b.ptr == nullptr) return;
  if (b.has_free_after) {
    try {
      ex_.synchronize(b.free_after);
    } catch (...) {
      // Cleanup that cannot fail (noexcept, called from destructors and failure paths): the
      // buffer goes back either way, as keeping it would leak it, and a failed wait means the
      // stream that last used the buffer failed, which was reported by the call that issued
      // that use or will be by the next wait on that stream.
    }
    retiring_.push_back(b.free_after);
    b.has_free_after = false;
  }
  ex_.deallocate(memory_kind::device, b.ptr, b.capacity);
  b.ptr = nullptr;
}

bool async_offloader::evict_cached(std::size_t need) {
  // Oldest first: the most recently cached buffers are the likeliest to be reused.
  while (held() + need > options_.prefetch_bytes && !device_free_.empty()) {
    pooled b = device_free_.front();
    device_free_.erase(device_free_.begin());
    cached_bytes_ -= b.capacity;
    drop_device(b);
  }
  return held() + need <= options_.prefetch_bytes;
}

async_offloader::pooled async_offloader::take_device(std::size_t bytes, int device,
                                                     bool for_prefetch) {
  auto best = device_free_.end();
  for (auto it = device_free_.begin(); it != device_free_.end(); ++it) {
    if (it->device == device && fits(it->capacity, bytes) &&
        (best == device_free_.end() || it->capacity < best->capacity)) {
      best = it;
    }
  }
  if (best != device_free_.end()) {
    pooled b = *best;
    device_free_.erase(best);
    cached_bytes_ -= b.capacity;
    return b;
  }
  if (for_prefetch && !evict_cached(bytes)) return {};
  pooled b;
  b.ptr = ex_.allocate(memory_kind::device, bytes, device);
  b.capacity = bytes;
  b.device = device;
  stats_.device_allocations += 1;
  return b;
}

void async_offloader::give_back_device(pooled b, stream_ref s) {
  // The caller's reads of b are issued before this point on s: later users wait for this event.
  // If it cannot be recorded, waiting for s on the host orders them just as well.
  try {
    const event_ref e = take_event(s.device);
    ex_.record(e, s);
    b.free_after = e;
    b.has_free_after = true;
  } catch (...) {
    ex_.synchronize(s);
  }
  if (held() + b.capacity <= options_.prefetch_bytes) {
    cached_bytes_ += b.capacity;
    device_free_.push_back(b);
    note_peak();
  } else {
    drop_device(b);
  }
}

void async_offloader::upload(record& r, pooled buf) {
  const int device = r.source.device;
  lane& l = lane_of(device);
  const stream_ref up = l.upload.ref();
  ex_.wait(r.copy_done, up);  // the host copy must be complete before it is read back
  if (buf.has_free_after) {
    ex_.wait(buf.free_after, up);  // the buffer's previous user is done with it
    retire_event(buf.free_after);
    buf.has_free_after = false;
  }
  if (r.source.bytes > 0) ex_.copy(buf.ptr, r.pinned.ptr, r.source.bytes, up);
  r.upload_done = take_event(device);
  ex_.record(r.upload_done, up);
  r.pinned.free_after = take_event(device);
  ex_.record(r.pinned.free_after, up);
  r.pinned.has_free_after = true;
  r.dev = buf;
  stats_.restored_bytes += r.source.bytes;
}

void async_offloader::prefetch() {
  if (backward_layer_ < 0 || options_.prefetch_layers == 0) return;
  if (by_layer_.empty()) return;
  // No lower than the lowest layer holding records: a window of 2^31 layers is a valid option and
  // must not cost 2^31 lookups.
  const int lowest =
      std::max(backward_layer_ - options_.prefetch_layers + 1, by_layer_.begin()->first);
  for (int layer = backward_layer_; layer >= lowest; --layer) {
    auto lit = by_layer_.find(layer);
    if (lit == by_layer_.end()) continue;
    const auto& ids = lit->second;
    for (auto idit = ids.rbegin(); idit != ids.rend(); ++idit) {
      auto rit = records_.find(*idit);
      if (rit == records_.end()) continue;
      record& r = rit->second;
      if (r.kept || r.prefetched) continue;
      // The last layer's sources are usually still on the device when its backward begins:
      // serve them from there rather than copying them twice (reap keeps them in place).
      if (r.layer == last_pack_layer_ && !r.source_released) continue;
      pooled buf = take_device(r.source.bytes, r.source.device, true);
      if (buf.ptr == nullptr) return;  // the bound is reached: stay in strict backward order
      try {
        upload(r, buf);
      } catch (...) {
        abandon(buf, r.source.device);  // the record stays packed, to be uploaded on demand
        throw;
      }
      r.prefetched = true;
      prefetched_bytes_ += buf.capacity;
      stats_.prefetched += 1;
      note_peak();
    }
  }
}

handle async_offloader::do_pack(tensor t, stream_ref s) {
  validate_for_pack(t, ex_.device_count());
  reap(false);
  const handle h{next_id_};
  record r;
  r.layer = pack_layer_;
  if (t.bytes < options_.keep_threshold) {
    r.kept = true;
    r.source = std::move(t);
    records_.emplace(h.id, std::move(r));
    ++next_id_;
    stats_.packed += 1;
    stats_.kept += 1;
    return h;
  }
  const int device = t.device;
  make_room_for(t.bytes, device);  // before anything of t is touched: a throw leaves t the caller's
  lane& l = lane_of(device);
  const stream_ref cp = l.copy.ref();
  r.pinned = take_pinned(t.bytes);
  try {
    const event_ref ready = take_event(s.device);
    ex_.record(ready, s);  // the producer's writes come first
    ex_.wait(ready, cp);
    retire_event(ready);
    if (r.pinned.has_free_after) {
      ex_.wait(r.pinned.free_after, cp);  // the pinned buffer's last upload has read it
      retire_event(r.pinned.free_after);
      r.pinned.has_free_after = false;
    }
    if (t.bytes > 0) ex_.copy(r.pinned.ptr, t.data, t.bytes, cp);
    r.copy_done = take_event(device);
    ex_.record(r.copy_done, cp);
  } catch (...) {
    // Nothing is packed and the caller still owns the source: whatever was issued that reads it
    // finishes first.
    try {
      ex_.synchronize(cp);
    } catch (const std::exception&) {
      // The caller gets the error that stopped the pack; a failed drain of the copy stream is
      // the same failure seen again (or the next use of that stream reports it).
    }
    pinned_free_.push_back(r.pinned);
    throw;
  }
  stats_.packed += 1;
  stats_.offloaded_bytes += t.bytes;
  r.source = std::move(t);
  last_pack_layer_ = r.layer;
  by_layer_[r.layer].push_back(h.id);
  records_.emplace(h.id, std::move(r));
  l.in_copy.push_back(h.id);
  ++next_id_;
  return h;
}

tensor async_offloader::do_unpack(handle h, stream_ref s) {
  // No reap before the source is looked at: a source prefetch left in place (its copy was still
  // in flight at the backward hint) would be handed back here and then uploaded on demand.
  auto it = records_.find(h.id);
  OFFLOADKIT_EXPECTS(it != records_.end(), out_of_range, "handle ", h.id,
                     " is not packed (never packed, or already unpacked); valid ids lie in [1, ",
                     next_id_, ")");
  record& rr = it->second;
  const int device = rr.source.device;  // the device of origin, whatever s belongs to
  // Everything that can fail happens while the record is still packed, so that a failed unpack
  // loses nothing and a retry can succeed; the record leaves only once nothing can throw.
  auto commit = [&] {
    record r = std::move(rr);
    records_.erase(it);
    auto lit = by_layer_.find(r.layer);
    if (lit != by_layer_.end()) {
      auto& ids = lit->second;
      ids.erase(std::remove(ids.begin(), ids.end(), h.id), ids.end());
      if (ids.empty()) by_layer_.erase(lit);
    }
    return r;
  };
  if (rr.kept) return std::move(commit().source);

  if (!rr.prefetched && !rr.source_released) {
    // The source is still ours: hand it out directly; its owner gets it back once both the
    // copy and the caller's use have completed.
    lane& l = lane_of(device);
    const event_ref pinned_free = take_event(device);
    ex_.record(pinned_free, l.copy.ref());
    record r = commit();
    r.pinned.free_after = pinned_free;
    r.pinned.has_free_after = true;
    pinned_free_.push_back(r.pinned);
    tensor t = std::move(r.source);
    auto owner_release = std::move(t.release);
    const event_ref copy_done = r.copy_done;
    t.release = [this, owner_release, copy_done, s]() mutable {
      try {
        const event_ref used = take_event(s.device);
        ex_.record(used, s);
        deferred_.push_back({std::move(owner_release), copy_done, used, true});
      } catch (...) {
        ex_.synchronize(s);  // the caller's use is complete: only the copy remains to wait for
        deferred_.push_back({std::move(owner_release), copy_done, {}, false});
      }
    };
    stats_.served_from_source += 1;
    return t;
  }

  reap(false);
  const bool demand = !rr.prefetched;
  pooled buf;
  if (demand) {
    buf = take_device(rr.source.bytes, device, false);
    try {
      upload(rr, buf);
    } catch (...) {
      abandon(buf, device);
      throw;
    }
  } else {
    buf = rr.dev;
  }
  try {
    ex_.wait(rr.upload_done, s);  // the caller's stream sees the tensor only once it has arrived
  } catch (...) {
    if (demand) {
      retire_event(rr.upload_done);
      abandon(buf, device);
    }
    throw;
  }

  record r = commit();
  if (demand) {
    stats_.demand_uploads += 1;
  } else {
    prefetched_bytes_ -= buf.capacity;
  }
  // A reused buffer may be larger than the tensor: the caller holds the tensor's bytes, the rest
  // stays within the bound until the buffer comes back.
  const std::size_t slack = buf.capacity - r.source.bytes;
  lent_slack_ += slack;
  retire_event(r.upload_done);
  if (r.source_released) {
    retire_event(r.copy_done);
  } else {
    // Restored from the host copy before the copy was seen complete: the source still goes back
    // only once it is.
    deferred_.push_back({std::move(r.source.release), r.copy_done, {}, false});
    r.source.release = nullptr;
  }
  pinned_free_.push_back(r.pinned);

  tensor t = std::move(r.source);
  t.data = buf.ptr;
  t.release = [this, buf, s, slack] {
    lent_slack_ -= slack;
    give_back_device(buf, s);
  };
  try {
    prefetch();  // opportunistic: a failure leaves the remaining records packed
  } catch (...) {
    // The tensor asked for is restored, so this unpack succeeds; the records not prefetched are
    // uploaded on demand when unpacked, and the failure is counted and kept for the caller
    // (stats().failed_prefetches, last_prefetch_error()).
    stats_.failed_prefetches += 1;
    last_prefetch_error_ = std::current_exception();
  }
  return t;
}

void async_offloader::abandon(pooled& buf, int device) noexcept {
  // An upload may have been issued into the buffer: let it finish before the buffer goes.
  try {
    lane_of(device).upload.synchronize();
  } catch (...) {
    // Called only while an upload's own error propagates to the caller (noexcept): a failed
    // drain is that stream's failure again, and the buffer must go back either way.
  }
  drop_device(buf);
}

void async_offloader::do_forward_layer_end(int layer, stream_ref) {
  pack_layer_ = layer + 1;
  in_backward_ = false;
  reap(false);
}

void async_offloader::do_backward_layer_begin(int layer, stream_ref) {
  backward_layer_ = layer;
  in_backward_ = true;
  pack_layer_ = layer;  // tensors saved while recomputing belong to this layer
  reap(false);
  prefetch();
}

void async_offloader::do_synchronize() {
  for (auto& [device, l] : lanes_) {
    l.copy.synchronize();
    l.upload.synchronize();
  }
  reap(true);
}

}  // namespace offloadkit::activation
