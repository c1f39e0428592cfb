// The reference activation offloader (see the header).
#include "offloadkit/activation/reference_offloader.hpp"

#include "offloadkit/error.hpp"

namespace offloadkit::activation {

reference_offloader::reference_offloader(executor& ex, offload_options options)
    : ex_(ex), options_(options) {}

reference_offloader::~reference_offloader() {
  // Whatever was never unpacked goes back to its owner; host copies are freed.
  for (auto& [id, e] : entries_) {
    if (e.host != nullptr) ex_.deallocate(memory_kind::pageable, e.host, e.source.bytes);
    if (e.kept && e.source.release) {
      try {
        e.source.release();
      } catch (...) {
        // A destructor cannot report the owner's failure, and the other sources must still go
        // back to their owners.
      }
    }
  }
}

std::size_t reference_offloader::do_keep_threshold() const noexcept {
  return options_.keep_threshold;
}

offload_stats reference_offloader::do_stats() const { return stats_; }

stream_ref reference_offloader::copy_stream(int device) {
  auto it = streams_.find(device);
  if (it == streams_.end()) it = streams_.emplace(device, stream(ex_, device)).first;
  return it->second.ref();
}

handle reference_offloader::do_pack(tensor t, stream_ref s) {
  validate_for_pack(t, ex_.device_count());
  entry e;
  if (t.bytes < options_.keep_threshold) {
    e.kept = true;
    stats_.kept += 1;
  } else {
    e.host = ex_.allocate(memory_kind::pageable, t.bytes);
    try {
      if (t.bytes > 0) {
        ex_.copy(e.host, t.data, t.bytes, s);  // after the producer, in the order of s
        ex_.synchronize(s);
      }
    } catch (...) {
      ex_.deallocate(memory_kind::pageable, e.host, t.bytes);
      throw;
    }
    stats_.offloaded_bytes += t.bytes;
    // The copy has completed: the source can go back to its owner now.
    auto release = std::move(t.release);
    t.release = nullptr;
    t.data = nullptr;
    if (release) release();
  }
  stats_.packed += 1;
  e.source = std::move(t);
  const handle h{next_id_++};
  entries_.emplace(h.id, std::move(e));
  return h;
}

tensor reference_offloader::do_unpack(handle h, stream_ref s) {
  auto it = entries_.find(h.id);
  OFFLOADKIT_EXPECTS(it != entries_.end(), out_of_range, "handle ", h.id,
                     " is not packed (never packed, or already unpacked); valid ids lie in [1, ",
                     next_id_, ")");
  entry& e = it->second;
  if (e.kept) {
    tensor t = std::move(e.source);
    entries_.erase(it);
    return t;
  }
  const int device = e.source.device;
  const std::size_t bytes = e.source.bytes;
  void* dev = ex_.allocate(memory_kind::device, bytes, device);
  try {
    if (bytes > 0) {
      const stream_ref cs = copy_stream(device);
      ex_.copy(dev, e.host, bytes, cs);
      ex_.synchronize(cs);
    }
  } catch (...) {
    ex_.deallocate(memory_kind::device, dev, bytes);
    throw;
  }
  stats_.restored_bytes += bytes;
  stats_.demand_uploads += 1;
  ex_.deallocate(memory_kind::pageable, e.host, bytes);
  tensor t = std::move(e.source);
  entries_.erase(it);
  t.data = dev;
  executor* ex = &ex_;
  // The caller's work on s may still read the buffer: wait for it before freeing.
  t.release = [ex, dev, bytes, s] {
    ex->synchronize(s);
    ex->deallocate(memory_kind::device, dev, bytes);
  };
  return t;
}

}  // namespace offloadkit::activation
