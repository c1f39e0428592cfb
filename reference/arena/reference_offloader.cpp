// Reference offloader: per-tensor pageable buffers and synchronous copies.
#include "offloadkit/arena/reference_offloader.hpp"

#include <utility>

#include "offloadkit/error.hpp"

namespace offloadkit::arena {

event reference_offloader::do_offload(tensor_set_view set, stream_ref s) {
  // The new copy is built aside and replaces the old one only when complete, so a failure
  // leaves no half-written copy behind.
  std::vector<buffer> fresh;
  fresh.reserve(set.size());
  valid_ = false;
  for (std::size_t i = 0; i < set.size(); ++i) {
    try {
      fresh.emplace_back(*ex_, memory_kind::pageable, set[i].bytes);
    } catch (...) {
      detail::rethrow_with_context(
          ::offloadkit::detail::concat("reference offload: pageable allocation of ", set[i].bytes,
                                       " bytes for tensor ", i, " of ", set.size(), " failed"));
    }
    try {
      if (set[i].bytes != 0) {
        ex_->copy(fresh.back().data(), set[i].data, set[i].bytes, s);
        ex_->synchronize(s);
      }
    } catch (...) {
      detail::rethrow_with_context(
          ::offloadkit::detail::concat("reference offload: copy of tensor ", i, " of ", set.size(),
                                       " (", set[i].bytes, " bytes) to the host failed"));
    }
  }
  // The copy is held only once nothing can fail: an offload that throws holds no copy.
  event done(*ex_, s.device);
  ex_->record(done, s);
  host_ = std::move(fresh);
  valid_ = true;
  return done;
}

event reference_offloader::do_reload(tensor_set_view set, stream_ref s) {
  std::vector<std::size_t> sizes;
  sizes.reserve(host_.size());
  for (const buffer& b : host_) sizes.push_back(b.size());
  detail::expect_sizes(sizes, set, "reference reload");
  for (std::size_t i = 0; i < set.size(); ++i) {
    if (set[i].bytes == 0) continue;
    try {
      ex_->copy(set[i].data, host_[i].data(), set[i].bytes, s);
      ex_->synchronize(s);
    } catch (...) {
      detail::rethrow_with_context(::offloadkit::detail::concat(
          "reference reload: copy of tensor ", i, " of ", set.size(), " (", set[i].bytes,
          " bytes) to the device failed; the host copy is kept, retry reload()"));
    }
  }
  event done(*ex_, s.device);
  ex_->record(done, s);
  return done;
}

void reference_offloader::do_release() noexcept {
  host_.clear();
  valid_ = false;
  released_ = true;
}

std::size_t reference_offloader::do_host_bytes() const noexcept {
  std::size_t n = 0;
  for (const buffer& b : host_) n += b.size();
  return n;
}

}  // namespace offloadkit::arena
