// vmm_region: reserve once, map chunks, pause/resume pipelined through a cached pinned buffer.
//
// Each chunk records where its contents are (device, host, none) and whether it is mapped, and
// every step updates that record only after the step has succeeded. A failure at any call
// therefore leaves a region whose every chunk is either resident or safely on the host; the
// state reads partial and pause() or resume() finishes the job.
#include "offloadkit/region/vmm_region.hpp"

#include <algorithm>
#include <utility>

#include "offloadkit/error.hpp"

namespace offloadkit::region {
namespace {

std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }

}  // namespace

vmm_region::vmm_region(executor& ex, region_config config)
    : ex_(&ex), bytes_(config.bytes), device_(config.device) {
  expect_valid_config(config, ex, "vmm_region");
  const std::size_t gran = ex.granularity(device_);
  reserved_ = round_up(bytes_, gran);
  chunk_ = round_up(config.chunk_bytes != 0 ? config.chunk_bytes : default_chunk_bytes, gran);
  if (chunk_ > reserved_) chunk_ = reserved_;
  for (std::size_t off = 0; off < reserved_; off += chunk_) {
    chunk c;
    c.offset = off;
    c.bytes = std::min(chunk_, reserved_ - off);
    c.used = std::min(c.bytes, bytes_ - off);
    chunks_.push_back(c);
  }
  chunk_done_[0] = event(ex, device_);
  chunk_done_[1] = event(ex, device_);
  resume_done_ = event(ex, device_);
  base_ = ex.reserve(reserved_, device_);
  try {
    for (auto& c : chunks_) map_chunk(c);
  } catch (...) {
    release_all();
    throw;
  }
}

vmm_region::~vmm_region() {
  if (resume_pending_) {
    try {
      ex_->synchronize(resume_done_.ref());
    } catch (...) {
      // A destructor cannot report: the resume's copies are waited for so that none writes into
      // memory released below, and a failed copy has nowhere to go once the region is gone.
    }
  }
  graphs_.clear();
  release_all();
}

void vmm_region::release_all() noexcept {
  for (auto& c : chunks_) {
    if (!c.mapped) continue;
    try {
      ex_->unmap(at(c), c.bytes);
    } catch (...) {
      // Teardown (noexcept: the destructor, or a constructor that is already throwing): every
      // chunk's memory must still be released, and the reservation with it.
    }
    ex_->release_physical(c.handle);
    c.mapped = false;
  }
  if (base_ != nullptr) ex_->unreserve(base_, reserved_);
}

region_state vmm_region::do_state() const noexcept {
  std::size_t resident = 0, unmapped = 0;
  for (const auto& c : chunks_) {
    if (c.mapped && c.where == contents::device) ++resident;
    if (!c.mapped) ++unmapped;
  }
  if (resident == chunks_.size()) return region_state::active;
  if (unmapped == chunks_.size()) return region_state::paused;
  return region_state::partial;
}

void vmm_region::map_chunk(chunk& c) {
  const bool fresh = !c.mapped;
  if (fresh) {
    physical_handle h = ex_->create_physical(c.bytes, device_);
    try {
      ex_->map(at(c), c.bytes, h);
    } catch (...) {
      ex_->release_physical(h);
      throw;
    }
    c.handle = h;
    c.mapped = true;
  }
  try {
    ex_->set_access(at(c), c.bytes, device_);
  } catch (...) {
    if (fresh) {
      try {
        unmap_chunk(c);
      } catch (const std::exception&) {
        // The caller gets set_access's error. The chunk's record stays mapped, which is true,
        // so a later resume() or the destructor finishes the unmap.
      }
    }
    throw;
  }
}

void vmm_region::unmap_chunk(chunk& c) {
  ex_->unmap(at(c), c.bytes);
  ex_->release_physical(c.handle);
  c.handle = {};
  c.mapped = false;
}

/// A preserving pause's copies out, chunk after chunk on `s` through the cached pinned buffer:
/// the copy of chunk k is queued before chunk k-1 is unmapped, so the copy engine works while the
/// host unmaps and releases. A chunk is recorded on the host and unmapped only once its copy has
/// landed.
struct vmm_region::copy_out_pipeline {
  vmm_region& r;
  stream_ref s;
  char* host;
  chunk* prev = nullptr;
  int prev_slot = 0;
  int slot = 0;

  copy_out_pipeline(vmm_region& region, stream_ref st) : r(region), s(st), host(nullptr) {
    if (!r.host_) r.host_ = buffer(*r.ex_, memory_kind::pinned, r.bytes_);
    // The host buffer may still feed the previous resume's copies (issued on another stream).
    if (r.resume_pending_) r.ex_->wait(r.resume_done_.ref(), s);
    host = r.host_.as<char>();
  }
  void step(chunk& c) {
    if (!c.mapped) return;
    if (c.where == contents::device) r.ex_->copy(host + c.offset, r.at(c), c.used, s);
    r.ex_->record(r.chunk_done_[slot].ref(), s);
    if (prev != nullptr) release(*prev, prev_slot);
    prev = &c;
    prev_slot = slot;
    slot ^= 1;
  }
  void finish() {
    if (prev != nullptr) release(*prev, prev_slot);
    prev = nullptr;
  }
  void release(chunk& c, int which) {
    r.ex_->synchronize(r.chunk_done_[which].ref());
    c.where = contents::host;
    r.unmap_chunk(c);
  }
};

void vmm_region::do_pause(pause_mode mode, stream_ref s) {
  if (mode == pause_mode::discard) {
    // Nothing to copy: wait for the work that uses the region, then give the memory back.
    ex_->synchronize(s);
    if (resume_pending_) ex_->synchronize(resume_done_.ref());
    resume_pending_ = false;
    for (auto& c : chunks_) {
      if (c.mapped) unmap_chunk(c);
      c.where = contents::none;
    }
    return;
  }
  copy_out_pipeline out(*this, s);
  try {
    for (auto& c : chunks_) out.step(c);
    out.finish();
  } catch (...) {
    // Drain what was queued so that no copy is in flight on a chunk the record calls resident.
    try {
      ex_->synchronize(s);
    } catch (const std::exception&) {
      // The caller gets the error that stopped the pause; a failed drain is the stream's failure
      // seen again. Chunks whose copy was not seen complete still read resident.
    }
    throw;
  }
  resume_pending_ = false;
}

void vmm_region::do_resume(stream_ref s) {
  const char* host = host_.as<const char>();
  try {
    // Creating and mapping chunk k+1 on the host overlaps the copy of chunk k.
    for (auto& c : chunks_) {
      if (c.mapped && c.where == contents::device) continue;
      map_chunk(c);
      if (c.where == contents::host) {
        try {
          ex_->copy(at(c), host + c.offset, c.used, s);
        } catch (...) {
          try {
            unmap_chunk(c);
          } catch (const std::exception&) {
            // The caller gets the copy's error; the chunk stays recorded as mapped with its
            // contents on the host, which is true, so resume() can be retried.
          }
          throw;
        }
      }
      c.where = contents::device;
    }
  } catch (...) {
    try {
      ex_->synchronize(s);
    } catch (const std::exception&) {
      // The caller gets the error that stopped the resume; a failed drain is the stream's
      // failure seen again.
    }
    throw;
  }
  try {
    ex_->record(resume_done_.ref(), s);
    resume_pending_ = true;
  } catch (...) {
    // Without the event, finish the copies now so that the host buffer is free again.
    ex_->synchronize(s);
    resume_pending_ = false;
  }
}

void vmm_region::do_swap(offload_region& other, pause_mode mode, stream_ref s) {
  auto* in = dynamic_cast<vmm_region*>(&other);
  if (in == nullptr || in->ex_ != ex_ || mode == pause_mode::discard ||
      state() == region_state::paused || in->state() == region_state::active) {
    offload_region::do_swap(other, mode, s);  // nothing to interleave
    return;
  }
  if (!in->side_) in->side_.emplace(*ex_, device_);
  const stream_ref side = in->side_->ref();
  // The other's chunks may still be filled by a resume of its own that stopped halfway.
  if (in->resume_pending_) ex_->wait(in->resume_done_.ref(), side);
  copy_out_pipeline out(*this, s);
  const char* in_host = in->host_.as<const char>();
  // Maps the other's next chunk that is not yet resident and queues its copy in on the side
  // stream.
  std::size_t k_in = 0;
  auto bring_in_next = [&] {
    while (k_in < in->chunks_.size()) {
      chunk& c = in->chunks_[k_in++];
      if (c.mapped && c.where == contents::device) continue;
      in->map_chunk(c);
      if (c.where == contents::host) {
        try {
          ex_->copy(in->at(c), in_host + c.offset, c.used, side);
        } catch (...) {
          try {
            in->unmap_chunk(c);
          } catch (const std::exception&) {
            // The caller gets the copy's error; the chunk stays recorded as mapped with its
            // contents on the host, which is true, so a retry copies it in.
          }
          throw;
        }
      }
      c.where = contents::device;
      return;
    }
  };
  // Step k queues the copy out of this region's chunk k on `s`, releases chunk k-1 once its copy
  // has landed, and then maps the other's next chunk into the memory just given back and queues
  // its copy in on the side stream. Where the device has room for one chunk more, the copies in
  // run one chunk ahead of the releases, so that the side stream still has a copy queued while the
  // host waits and maps: the two copy directions overlap without gaps, and the device holds about
  // two chunks more than either region alone. Otherwise they follow the releases, one chunk more.
  std::size_t in_chunk = 0;
  for (const chunk& c : in->chunks_) in_chunk = std::max(in_chunk, c.bytes);
  const bool lead = ex_->device_memory(device_).free >= 2 * in_chunk;
  std::size_t k_out = 0;
  try {
    if (lead) bring_in_next();
    while (k_out < chunks_.size() || k_in < in->chunks_.size()) {
      if (k_out < chunks_.size()) out.step(chunks_[k_out++]);
      bring_in_next();
    }
    out.finish();
  } catch (...) {
    // Drain both streams so that no copy is in flight on a chunk whose record says otherwise; a
    // failed drain of one still drains the other.
    for (const stream_ref st : {s, side}) {
      try {
        ex_->synchronize(st);
      } catch (const std::exception&) {
        // The caller gets the error that stopped the swap; a failed drain is a stream's failure
        // seen again.
      }
    }
    throw;
  }
  resume_pending_ = false;
  // Work issued to `s` from here on must see the other region's contents.
  try {
    ex_->record(in->resume_done_.ref(), side);
    in->resume_pending_ = true;
    ex_->wait(in->resume_done_.ref(), s);
  } catch (...) {
    // Without the event, finish the copies in now: `s` is ordered after them all the same.
    ex_->synchronize(side);
    in->resume_pending_ = false;
  }
}

graph_id vmm_region::do_register_graph(capture_fn fn, stream_ref s) {
  return graphs_.add(std::move(fn), base_, s);
}

void vmm_region::do_replay(graph_id g, stream_ref s) { graphs_.replay(g, s); }

void vmm_region::do_unregister_graph(graph_id g) noexcept { graphs_.remove(g); }

}  // namespace offloadkit::region
