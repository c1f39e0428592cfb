// The host executor's virtual memory: PROT_NONE reservations into which memfd-backed physical
// memory is mapped MAP_FIXED, so that a stale address faults.
#include "host_executor_impl.hpp"

namespace offloadkit {

// ---- virtual memory
// ------------------------------------------------------------------------------

std::size_t host_executor::do_granularity(int device) {
  impl_->check_device(device, "granularity");
  return impl_->options.granularity;
}

void* host_executor::do_reserve(std::size_t bytes, int device) {
  impl& m = *impl_;
  m.check_device(device, "reserve");
  m.check_granular(bytes, "reserve");
  const std::size_t g = m.options.granularity;
  OFFLOADKIT_EXPECTS(bytes <= SIZE_MAX - g, out_of_range, "host_executor::reserve: bytes = ", bytes,
                     " is too large to reserve");
  // Over-reserve by one granule and trim both ends, so the range starts on a granule boundary.
  void* raw =
      mmap(nullptr, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    const int e = errno;
    OFFLOADKIT_FAIL(out_of_memory, "host_executor::reserve: no address range of ", bytes,
                    " bytes is available: ", errno_text(e));
  }
  const std::size_t head = (g - address(raw) % g) % g;
  char* base = static_cast<char*>(raw) + head;
  if (head > 0) munmap(raw, head);
  if (g - head > 0) munmap(base + bytes, g - head);
  std::lock_guard<std::mutex> lk(m.mem_mu);
  reservation r;
  r.bytes = bytes;
  r.device = device;
  m.reservations[base] = std::move(r);
  return base;
}

void host_executor::do_unreserve(void* va, std::size_t bytes) noexcept {
  impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.mem_mu);
  auto it = m.reservations.find(key(va));
  const bool unreserve_of_a_reserved_base = it != m.reservations.end();
  OFFLOADKIT_ASSERT_NOEXCEPT(unreserve_of_a_reserved_base);
  if (!unreserve_of_a_reserved_base) return;
  const bool unreserve_with_the_reserved_size = it->second.bytes == bytes;
  OFFLOADKIT_ASSERT_NOEXCEPT(unreserve_with_the_reserved_size);
  // Whatever is still mapped goes with the range (its physical memory stays while not released).
  for (auto& kv : it->second.mappings) m.drop_mapping(kv.second.handle);
  munmap(va, it->second.bytes);
  m.reservations.erase(it);
}

physical_handle host_executor::do_create_physical(std::size_t bytes, int device) {
  impl& m = *impl_;
  m.check_device(device, "create_physical");
  m.check_granular(bytes, "create_physical");
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    m.charge(device, bytes, "create_physical");
    id = m.next_physical++;
  }
  auto uncharge = [&] {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    m.device_used[device] -= std::min(m.device_used[device], bytes);
  };
  const int fd = memfd_create("offloadkit-physical", MFD_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    uncharge();
    OFFLOADKIT_FAIL(runtime_error,
                    "host_executor::create_physical: memfd_create failed: ", errno_text(e));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    close(fd);
    uncharge();
    if (e == ENOMEM || e == ENOSPC || e == EFBIG) {
      OFFLOADKIT_FAIL(out_of_memory, "host_executor::create_physical: ", bytes, " bytes on device ",
                      device, " are not available: ", errno_text(e));
    }
    OFFLOADKIT_FAIL(runtime_error, "host_executor::create_physical: ftruncate to ", bytes,
                    " bytes failed: ", errno_text(e));
  }
  std::lock_guard<std::mutex> lk(m.mem_mu);
  m.physicals[id] = physical{fd, bytes, device, false, 0};
  return physical_handle{id, device, bytes};
}

void host_executor::do_release_physical(physical_handle h) noexcept {
  impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.mem_mu);
  auto it = m.physicals.find(h.value);
  const bool release_of_a_live_physical_handle = it != m.physicals.end() && !it->second.released;
  OFFLOADKIT_ASSERT_NOEXCEPT(release_of_a_live_physical_handle);
  if (!release_of_a_live_physical_handle) return;
  physical& ph = it->second;
  // The mappings keep the memfd's pages alive; the memory goes with the last of them.
  close(ph.fd);
  ph.fd = -1;
  ph.released = true;
  if (ph.maps == 0) {
    m.device_used[ph.device] -= std::min(m.device_used[ph.device], ph.bytes);
    m.physicals.erase(it);
  }
}

void host_executor::do_map(void* va, std::size_t bytes, physical_handle h) {
  impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.mem_mu);
  auto pt = m.physicals.find(h.value);
  OFFLOADKIT_EXPECTS(pt != m.physicals.end() && !pt->second.released, logic_error,
                     "host_executor::map: physical handle ", h.value,
                     " is unknown or already released");
  physical& ph = pt->second;
  OFFLOADKIT_EXPECTS(bytes == ph.bytes, logic_error, "host_executor::map: bytes = ", bytes,
                     " differs from the size of physical handle ", h.value, " (", ph.bytes,
                     "); map whole physical allocations");
  std::size_t offset = 0;
  reservation& r = m.find_reservation(va, bytes, "map", offset);
  // An existing mapping overlaps [offset, offset + bytes) if it starts before the end and ends
  // after the start; only the one just before `offset + bytes` can.
  auto next = r.mappings.lower_bound(offset + bytes);
  if (next != r.mappings.begin()) {
    auto prev = std::prev(next);
    OFFLOADKIT_EXPECTS(prev->first + prev->second.bytes <= offset, logic_error,
                       "host_executor::map: [", va, ", +", bytes,
                       ") overlaps the mapping already at offset ", prev->first, " (+",
                       prev->second.bytes, ") of its reservation; unmap it first");
  }
  void* got = mmap(va, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, ph.fd, 0);
  if (got == MAP_FAILED) {
    const int e = errno;
    // A failed MAP_FIXED may have removed the old mapping: put the reservation's back.
    (void)mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
               0);
    OFFLOADKIT_FAIL(runtime_error, "host_executor::map: mmap of ", bytes, " bytes at ", va,
                    " failed: ", errno_text(e));
  }
  r.mappings[offset] = mapping{h.value, bytes};
  ++ph.maps;
}

void host_executor::do_unmap(void* va, std::size_t bytes) {
  impl& m = *impl_;
  m.check_granular(bytes, "unmap");
  std::lock_guard<std::mutex> lk(m.mem_mu);
  std::size_t offset = 0;
  reservation& r = m.find_reservation(va, bytes, "unmap", offset);
  // As cuMemUnmap: the range must consist of whole mappings, with no gap.
  std::vector<std::map<std::size_t, mapping>::iterator> covered;
  std::size_t at = offset;
  while (at < offset + bytes) {
    auto it = r.mappings.find(at);
    OFFLOADKIT_EXPECTS(it != r.mappings.end() && at + it->second.bytes <= offset + bytes,
                       logic_error, "host_executor::unmap: [", va, ", +", bytes,
                       ") is not a sequence of whole mappings (nothing maps offset ", at,
                       " of the reservation as a mapping's start within the range)");
    covered.push_back(it);
    at += it->second.bytes;
  }
  void* got =
      mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (got == MAP_FAILED) {
    const int e = errno;
    OFFLOADKIT_FAIL(runtime_error, "host_executor::unmap: replacing ", bytes, " bytes at ", va,
                    " failed: ", errno_text(e));
  }
  for (auto& it : covered) {
    const std::uint64_t handle = it->second.handle;
    r.mappings.erase(it);
    m.drop_mapping(handle);
  }
}

void host_executor::do_set_access(void* va, std::size_t bytes, int device) {
  impl& m = *impl_;
  m.check_device(device, "set_access");
  m.check_granular(bytes, "set_access");
  std::lock_guard<std::mutex> lk(m.mem_mu);
  std::size_t offset = 0;
  reservation& r = m.find_reservation(va, bytes, "set_access", offset);
  // Every byte of the range must be mapped, as for cuMemSetAccess.
  std::size_t at = offset;
  while (at < offset + bytes) {
    auto next = r.mappings.upper_bound(at);
    bool mapped = next != r.mappings.begin();
    if (mapped) {
      auto it = std::prev(next);
      mapped = at < it->first + it->second.bytes;
      if (mapped) at = it->first + it->second.bytes;
    }
    OFFLOADKIT_EXPECTS(mapped, logic_error, "host_executor::set_access: offset ", at,
                       " of the range [", va, ", +", bytes, ") is not mapped");
  }
  if (mprotect(va, bytes, PROT_READ | PROT_WRITE) != 0) {
    const int e = errno;
    OFFLOADKIT_FAIL(runtime_error, "host_executor::set_access: mprotect of ", bytes, " bytes at ",
                    va, " failed: ", errno_text(e));
  }
}

}  // namespace offloadkit
