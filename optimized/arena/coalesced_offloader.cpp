// Coalesced offloader: one pinned arena, one plan per shape, batched non-blocking copies.
#include "offloadkit/arena/coalesced_offloader.hpp"

#include <utility>

#include "offloadkit/error.hpp"

namespace offloadkit::arena {

namespace {

/// Streams the copies of `runs` runs go over: one per copies_per_stream, at most max_copy_streams.
std::size_t lanes_for(std::size_t runs, const coalesced_options& o) {
  const std::size_t lanes = (runs + o.copies_per_stream - 1) / o.copies_per_stream;
  return lanes < 1 ? 1 : (lanes > o.max_copy_streams ? o.max_copy_streams : lanes);
}

const coalesced_options& checked(const coalesced_options& o) {
  OFFLOADKIT_EXPECTS(o.copies_per_stream >= 1, out_of_range,
                     "coalesced_options::copies_per_stream = ", o.copies_per_stream,
                     " is out of range: valid range 1 or more");
  OFFLOADKIT_EXPECTS(o.max_copy_streams >= 1 && o.max_copy_streams <= 64, out_of_range,
                     "coalesced_options::max_copy_streams = ", o.max_copy_streams,
                     " is out of range: valid range 1..64");
  return o;
}

}  // namespace

coalesced_offloader::coalesced_offloader(executor& ex, coalesced_options options)
    : ex_(&ex),
      extent_of_([ex = &ex](const void* p) { return ex->extent_of(p); }),
      options_(checked(options)),
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

void coalesced_offloader::fork_lanes(std::size_t lanes, stream_ref s) {
  if (side_device_ != s.device) {
    side_.clear();
    side_joined_.clear();
    side_fork_ = event();
    side_device_ = s.device;
  }
  if (side_.empty()) side_fork_ = event(*ex_, s.device);
  while (side_.size() + 1 < lanes) {
    side_joined_.emplace_back(*ex_, s.device);
    side_.emplace_back(*ex_, s.device);
  }
  ex_->record(side_fork_, s);
  for (std::size_t k = 0; k + 1 < lanes; ++k) ex_->wait(side_fork_, side_[k].ref());
}

void coalesced_offloader::join_lanes(std::size_t lanes, stream_ref s) noexcept {
  for (std::size_t k = 0; k + 1 < lanes; ++k) {
    try {
      ex_->record(side_joined_[k], side_[k].ref());
      ex_->wait(side_joined_[k], s);
    } catch (...) {
      // Without the join in stream order, the host waits for the side stream instead: its copies
      // are then done before anything queued on `s` later, so the order still holds.
      try {
        ex_->synchronize(side_[k].ref());
      } catch (...) {
        // noexcept: a side stream that cannot even be waited for has failed its copies, and that
        // failure is the device's: the next wait on `s` (the caller's, or reload's) reports it.
      }
    }
  }
}

void coalesced_offloader::issue(const std::vector<copy_run>& runs, tensor_set_view set,
                                bool to_host, stream_ref s) {
  std::byte* host = runs.empty() ? nullptr : lease_.data();
  last_copies_ = 0;
  last_streams_ = 1;
  const std::size_t lanes = lanes_for(runs.size(), options_);
  std::size_t forked = 1;
  std::size_t k = 0;
  try {
    if (lanes > 1) {
      fork_lanes(lanes, s);
      forked = lanes;
      last_streams_ = lanes;
    }
    for (; k < runs.size(); ++k) {
      const copy_run& r = runs[k];
      const stream_ref on = k % lanes == 0 ? s : side_[k % lanes - 1].ref();
      if (to_host) {
        ex_->copy(host + r.host_offset, set[r.first].data, r.bytes, on);
      } else {
        ex_->copy(set[r.first].data, host + r.host_offset, r.bytes, on);
      }
      ++last_copies_;
    }
  } catch (...) {
    join_lanes(forked, s);
    fence(s);
    if (forked < lanes) {
      detail::rethrow_with_context(::offloadkit::detail::concat(
          to_host ? "coalesced offload" : "coalesced reload", ": forking ", lanes,
          " copy streams for ", runs.size(), " copies failed",
          to_host ? "" : "; the host copy is kept, retry reload()"));
    }
    const copy_run& r = runs[k];
    detail::rethrow_with_context(::offloadkit::detail::concat(
        to_host ? "coalesced offload" : "coalesced reload", ": copy of tensor ", r.first,
        r.count > 1
            ? ::offloadkit::detail::concat(" (with the next ", r.count - 1, " contiguous tensors)")
            : std::string(),
        " of ", set.size(), ", ", r.bytes, " bytes at host offset ", r.host_offset,
        (to_host ? " to the host failed"
                 : " to the device failed; the host copy is kept, retry reload()")));
  }
  join_lanes(forked, s);
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
  // The copy is held only once nothing can fail: an offload that throws holds no copy.
  event done = completion(s);
  held_ = std::move(plan);
  return done;
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
