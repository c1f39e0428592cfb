// Coalesced offloader: one pinned arena, one plan per shape, batched non-blocking copies.
#include "offloadkit/arena/coalesced_offloader.hpp"

#include <utility>

#include "offloadkit/error.hpp"

namespace offloadkit::arena {

coalesced_offloader::coalesced_offloader(executor& ex, coalesced_options options)
    : ex_(&ex),
      extent_of_([ex = &ex](const void* p) { return ex->extent_of(p); }),
      options_(options),
      plans_(options.alignment),
      last_use_(ex, options.device),
      arena_(ex, options.device) {}

void coalesced_offloader::fence(stream_ref s) noexcept {
  try {
    ex_->record(last_use_, s);
    pending_ = true;
    lease_.set_fence(last_use_);
  } catch (...) {
    // Without a fresh fence, growth and release wait for the stream itself.
    try {
      ex_->synchronize(s);
    } catch (...) {
      // noexcept, called where a copy's own error is being reported or the work is issued: a
      // failed wait is that stream's failure, which its next wait (reload's, or the caller's)
      // reports again.
    }
  }
}

event coalesced_offloader::completion(stream_ref s) {
  event done(*ex_, s.device);
  ex_->record(done, s);
  return done;
}

void coalesced_offloader::issue(const std::vector<copy_run>& runs, tensor_set_view set,
                                bool to_host, stream_ref s) {
  std::byte* host = runs.empty() ? nullptr : lease_.data();
  last_copies_ = 0;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const copy_run& r = runs[k];
    try {
      if (to_host) {
        ex_->copy(host + r.host_offset, set[r.first].data, r.bytes, s);
      } else {
        ex_->copy(set[r.first].data, host + r.host_offset, r.bytes, s);
      }
      ++last_copies_;
    } catch (...) {
      fence(s);
      detail::rethrow_with_context(::offloadkit::detail::concat(
          to_host ? "coalesced offload" : "coalesced reload", ": copy of tensor ", r.first,
          r.count > 1 ? ::offloadkit::detail::concat(" (with the next ", r.count - 1,
                                                     " contiguous tensors)")
                      : std::string(),
          " of ", set.size(), ", ", r.bytes, " bytes at host offset ", r.host_offset,
          (to_host ? " to the host failed"
                   : " to the device failed; the host copy is kept, retry reload()")));
    }
  }
}

event coalesced_offloader::do_offload(tensor_set_view set, stream_ref s) {
  std::shared_ptr<const layout_plan> plan = plans_.get(set, extent_of_);
  // From here the arena's contents are being replaced: no complete copy until this succeeds.
  held_.reset();
  if (!lease_) lease_ = arena_.acquire();
  try {
    lease_.reserve(plan->total_bytes);
  } catch (...) {
    pending_ = false;  // the buffer the fence guarded is gone
    lease_.clear_fence();
    detail::rethrow_with_context(::offloadkit::detail::concat(
        "coalesced offload of ", set.size(), " tensors (", plan->total_bytes, " bytes)"));
  }
  // The previous reload may still be reading the arena on another stream.
  if (pending_) ex_->wait(last_use_, s);
  issue(plan->runs, set, true, s);
  fence(s);
  held_ = std::move(plan);
  return completion(s);
}

event coalesced_offloader::do_reload(tensor_set_view set, stream_ref s) {
  detail::expect_sizes(held_->key.sizes, set, "coalesced reload");
  // The same addresses (the usual case) reuse the plan's runs; other addresses get runs merged
  // only where both sides are contiguous.
  const layout_key key = make_key(set, extent_of_);
  std::vector<copy_run> other;
  const bool same = key == held_->key;
  if (!same) other = coalesce(*held_, set, extent_of_);
  // The offload that filled the arena may still be running on another stream.
  if (pending_) ex_->wait(last_use_, s);
  issue(same ? held_->runs : other, set, false, s);
  fence(s);
  return completion(s);
}

void coalesced_offloader::do_release() noexcept {
  lease_.release();  // waits for the last use, then frees the pinned memory
  pending_ = false;
  held_.reset();
  released_ = true;
}

std::size_t coalesced_offloader::do_host_bytes() const noexcept {
  return lease_ ? lease_.capacity() : 0;
}

}  // namespace offloadkit::arena
