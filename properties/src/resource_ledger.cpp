// The resource ledger (see the header).
#include "offloadkit/testing/resource_ledger.hpp"

#include <array>
#include <sstream>

#include "offloadkit/error.hpp"

namespace offloadkit::testing {
namespace {

constexpr std::array<const char*, 9> resource_names = {"device allocation",
                                                       "pinned allocation",
                                                       "pageable allocation",
                                                       "managed allocation",
                                                       "stream",
                                                       "event",
                                                       "reservation",
                                                       "physical allocation",
                                                       "mapping"};

const char* name_of(unsigned kind) noexcept {
  return kind < resource_names.size() ? resource_names[kind] : "resource";
}

}  // namespace

void resource_ledger::add(resource kind, const void* key, std::size_t bytes) {
  const std::lock_guard<std::mutex> lock(mutex_);
  held_[{static_cast<unsigned>(kind), reinterpret_cast<std::uintptr_t>(key)}] = {kind, bytes};
}

bool resource_ledger::remove(resource kind, const void* key, const char* call) noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = held_.find({static_cast<unsigned>(kind), reinterpret_cast<std::uintptr_t>(key)});
  if (it != held_.end()) {
    held_.erase(it);
    return true;
  }
  // Reporting must not throw from a noexcept release: a message that cannot be built is lost,
  // and the misuse is still counted by the line below.
  try {
    misuse_.push_back(detail::concat(call, "(", key, "): no ", name_of(static_cast<unsigned>(kind)),
                                     " there is held (released twice, or never made through "
                                     "this executor)"));
  } catch (...) {  // NOLINT(bugprone-empty-catch): see above
    misuse_.emplace_back();
  }
  return false;
}

std::string resource_ledger::held() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::array<std::size_t, static_cast<std::size_t>(resource::count_)> count{};
  std::array<std::size_t, static_cast<std::size_t>(resource::count_)> bytes{};
  for (const auto& [key, e] : held_) {
    count[static_cast<std::size_t>(e.kind)] += 1;
    bytes[static_cast<std::size_t>(e.kind)] += e.bytes;
  }
  std::ostringstream os;
  for (std::size_t k = 0; k < count.size(); ++k) {
    if (count[k] == 0) continue;
    if (os.tellp() > 0) os << ", ";
    os << count[k] << " " << resource_names[k] << (count[k] == 1 ? "" : "s");
    if (bytes[k] != 0) os << " (" << bytes[k] << " bytes)";
  }
  return os.str();
}

std::string resource_ledger::misuse() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream os;
  for (const std::string& m : misuse_) os << (os.tellp() > 0 ? "; " : "") << m;
  return os.str();
}

std::string resource_ledger::problems() const {
  const std::string h = held();
  const std::string m = misuse();
  std::string out;
  if (!h.empty()) out = "still held: " + h;
  if (!m.empty()) out += (out.empty() ? "" : "; ") + std::string("released but not held: ") + m;
  return out;
}

void* resource_ledger::do_allocate(memory_kind kind, std::size_t bytes, int device) {
  void* p = executor_adaptor::do_allocate(kind, bytes, device);
  add(static_cast<resource>(static_cast<unsigned>(kind)), p, bytes);
  return p;
}
void resource_ledger::do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (remove(static_cast<resource>(static_cast<unsigned>(kind)), p, "deallocate")) {
    executor_adaptor::do_deallocate(kind, p, bytes);
  }
}
void* resource_ledger::do_allocate_managed(std::size_t bytes, int device) {
  void* p = executor_adaptor::do_allocate_managed(bytes, device);
  add(resource::managed, p, bytes);
  return p;
}
void resource_ledger::do_deallocate_managed(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (remove(resource::managed, p, "deallocate_managed")) {
    executor_adaptor::do_deallocate_managed(p, bytes);
  }
}
stream_ref resource_ledger::do_create_stream(int device) {
  const stream_ref s = executor_adaptor::do_create_stream(device);
  add(resource::stream, s.native, 0);
  return s;
}
void resource_ledger::do_destroy_stream(stream_ref s) noexcept {
  if (remove(resource::stream, s.native, "destroy_stream")) executor_adaptor::do_destroy_stream(s);
}
event_ref resource_ledger::do_create_event(int device) {
  const event_ref e = executor_adaptor::do_create_event(device);
  add(resource::event, e.native, 0);
  return e;
}
void resource_ledger::do_destroy_event(event_ref e) noexcept {
  if (remove(resource::event, e.native, "destroy_event")) executor_adaptor::do_destroy_event(e);
}
void* resource_ledger::do_reserve(std::size_t bytes, int device) {
  void* va = executor_adaptor::do_reserve(bytes, device);
  add(resource::reservation, va, bytes);
  return va;
}
void resource_ledger::do_unreserve(void* va, std::size_t bytes) noexcept {
  if (remove(resource::reservation, va, "unreserve")) executor_adaptor::do_unreserve(va, bytes);
}
physical_handle resource_ledger::do_create_physical(std::size_t bytes, int device) {
  const physical_handle h = executor_adaptor::do_create_physical(bytes, device);
  add(resource::physical, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(h.value)),
      bytes);
  return h;
}
void resource_ledger::do_release_physical(physical_handle h) noexcept {
  if (remove(resource::physical,
             reinterpret_cast<const void*>(static_cast<std::uintptr_t>(h.value)),
             "release_physical")) {
    executor_adaptor::do_release_physical(h);
  }
}
void resource_ledger::do_map(void* va, std::size_t bytes, physical_handle h) {
  executor_adaptor::do_map(va, bytes, h);
  add(resource::mapping, va, bytes);
}
void resource_ledger::do_unmap(void* va, std::size_t bytes) {
  // Unmapping what is not mapped is reported and not forwarded, like a second free.
  if (remove(resource::mapping, va, "unmap")) executor_adaptor::do_unmap(va, bytes);
}

}  // namespace offloadkit::testing
