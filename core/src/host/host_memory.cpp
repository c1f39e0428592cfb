// The host executor's memory: device, pinned and pageable allocations in a registry, the
// simulated device capacity, and managed memory with its prefetches.
#include "host_executor_impl.hpp"

namespace offloadkit {

// ---- memory ------------------------------------------------------------------------------------

void* host_executor::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  impl& m = *impl_;
  OFFLOADKIT_EXPECTS(
      kind == memory_kind::device || kind == memory_kind::pinned || kind == memory_kind::pageable,
      out_of_range, "host_executor::allocate: memory kind ", static_cast<int>(kind),
      " is not one of device, pinned, pageable");
  const bool on_device = kind == memory_kind::device;
  if (on_device) m.check_device(device, "allocate");
  if (bytes > SIZE_MAX - allocation_alignment) {
    OFFLOADKIT_FAIL(out_of_memory, "host_executor::allocate: ", bytes, " bytes of ",
                    to_string(kind), " memory cannot be provided");
  }
  const std::size_t padded = padded_size(bytes);
  if (on_device) {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    m.charge(device, bytes, "allocate");
  }
  if (carving_arena* arena = m.arena_for(kind, device)) {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    char* p = arena->ready(m.options.device_capacity) ? arena->carve(padded) : nullptr;
    if (p == nullptr) {
      if (on_device) m.device_used[device] -= bytes;
      OFFLOADKIT_FAIL(out_of_memory, "host_executor::allocate: no free range of ", padded,
                      " bytes is left in the ", m.options.device_capacity, "-byte reservation for ",
                      to_string(kind), " memory (adjacent_allocations)");
    }
    m.allocations[p] = allocation{kind, bytes, on_device ? device : -1, true};
    return p;
  }
  void* p = impl::host_block(bytes);
  if (p == nullptr) {
    if (on_device) {
      std::lock_guard<std::mutex> lk(m.mem_mu);
      m.device_used[device] -= bytes;
    }
    OFFLOADKIT_FAIL(out_of_memory, "host_executor::allocate: the host could not provide ", bytes,
                    " bytes of ", to_string(kind), " memory");
  }
  std::lock_guard<std::mutex> lk(m.mem_mu);
  m.allocations[key(p)] = allocation{kind, bytes, on_device ? device : -1, false};
  return p;
}

void host_executor::do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  impl& m = *impl_;
  memory_kind registered = kind;
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    auto it = m.allocations.find(key(p));
    const bool deallocate_of_a_live_allocation = it != m.allocations.end();
    OFFLOADKIT_ASSERT_NOEXCEPT(deallocate_of_a_live_allocation);
    if (!deallocate_of_a_live_allocation) return;
    registered = it->second.kind;
    const bool deallocate_of_managed_memory_with_deallocate_managed = !it->second.managed;
    OFFLOADKIT_ASSERT_NOEXCEPT(deallocate_of_managed_memory_with_deallocate_managed);
    if (!deallocate_of_managed_memory_with_deallocate_managed) return;
  }
  const bool deallocate_with_the_allocation_kind = registered == kind;
  OFFLOADKIT_ASSERT_NOEXCEPT(deallocate_with_the_allocation_kind);
  if (registered != memory_kind::pageable && !tls_executor_thread) m.drain_all_streams();
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    auto it = m.allocations.find(key(p));
    // Another thread may have freed it while the streams drained.
    if (it == m.allocations.end()) return;
    if (it->second.kind == memory_kind::device) {
      m.device_used[it->second.device] -=
          std::min(m.device_used[it->second.device], it->second.bytes);
    }
    if (it->second.carved) {
      m.arena_for(it->second.kind, it->second.device)
          ->give_back(it->first, padded_size(it->second.bytes));
      m.allocations.erase(it);
      return;
    }
    m.allocations.erase(it);
  }
  std::free(p);
}

pointer_info host_executor::do_classify(const void* p) const { return impl_->look_up(p).info; }

allocation_extent host_executor::do_extent_of(const void* p) const {
  return impl_->look_up(p).extent;
}

memory_info host_executor::do_device_memory(int device) {
  impl& m = *impl_;
  m.check_device(device, "device_memory");
  std::lock_guard<std::mutex> lk(m.mem_mu);
  return memory_info{m.free_bytes(device), m.options.device_capacity};
}

// ---- managed memory ----------------------------------------------------------------------------
// Managed memory is host memory, which every simulated device reaches at the same address as it
// reaches all host-backend memory. It is not charged to a device's capacity: on a GPU, pages
// count against a device only once they migrate there, and here they never do.

void* host_executor::do_allocate_managed(std::size_t bytes, int device) {
  impl& m = *impl_;
  m.check_device(device, "allocate_managed");
  void* p = impl::host_block(bytes);
  if (p == nullptr) {
    OFFLOADKIT_FAIL(out_of_memory, "host_executor::allocate_managed: the host could not provide ",
                    bytes, " bytes of managed memory");
  }
  allocation a{memory_kind::pageable, bytes, device};
  a.managed = true;
  std::lock_guard<std::mutex> lk(m.mem_mu);
  m.allocations[key(p)] = a;
  return p;
}

void host_executor::do_deallocate_managed(void* p, std::size_t /*bytes*/) noexcept {
  if (p == nullptr) return;
  impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    auto it = m.allocations.find(key(p));
    const bool deallocate_managed_of_a_live_managed_allocation =
        it != m.allocations.end() && it->second.managed;
    OFFLOADKIT_ASSERT_NOEXCEPT(deallocate_managed_of_a_live_managed_allocation);
    if (!deallocate_managed_of_a_live_managed_allocation) return;
  }
  // cudaFree synchronizes the device before the memory goes, and so does the host back end.
  if (!tls_executor_thread) m.drain_all_streams();
  {
    std::lock_guard<std::mutex> lk(m.mem_mu);
    // Another thread may have freed it while the streams drained.
    if (m.allocations.erase(key(p)) == 0) return;
  }
  std::free(p);
}

void host_executor::do_prefetch(const void* p, std::size_t bytes, int device, stream_ref s) {
  impl& m = *impl_;
  impl::check_not_on_executor_thread("prefetch");
  OFFLOADKIT_EXPECTS(device == host_location || (device >= 0 && device < m.options.devices),
                     out_of_range, "host_executor::prefetch: device = ", device, " is outside [0, ",
                     m.options.devices, ") and is not host_location (", host_location, ")");
  if (bytes == 0) {
    (void)m.find_stream(s, "prefetch");  // still reject a bad stream
    return;
  }
  // As cudaMemPrefetchAsync, only managed memory can be prefetched.
  const pointer_info info = m.look_up(p).info;
  OFFLOADKIT_EXPECTS(info.kind == pointer_kind::managed, logic_error, "host_executor::prefetch: [",
                     p, ", +", bytes, ") is ", to_string(info.kind),
                     " memory; only managed memory (allocate_managed) can be prefetched");
  m.check_extent(p, bytes, "prefetch");
  // The pages are host memory wherever they are prefetched to, so the operation moves nothing,
  // but it is a stream operation like any other: it runs after the work issued before it, later
  // work waits for it, and a capture records it.
  op o;
  o.t = op::type::prefetch;
  o.src = p;
  o.bytes = bytes;
  o.value = device;
  m.issue(s, std::move(o), "prefetch");
}

}  // namespace offloadkit
