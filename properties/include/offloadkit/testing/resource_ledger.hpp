// A ledger of what an implementation holds through the executor it is given: every allocation,
// stream, event, reservation, physical allocation and mapping made and not yet given back, and
// every release of something that is not held (a double free, or memory it never allocated
// through this executor). The fault countdowns read it after each failed call: nothing leaks,
// nothing is released twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/adaptors.hpp"

namespace offloadkit::testing {

class resource_ledger final : public executor_adaptor {
 public:
  using executor_adaptor::executor_adaptor;

  /// What is held now, one line per kind ("2 pinned allocations (4096 bytes), 1 event"); empty
  /// when nothing is.
  [[nodiscard]] std::string held() const;
  /// Every release of something not held, in the order they happened; empty when none. Such a
  /// release is not forwarded (the upstream would free memory twice).
  [[nodiscard]] std::string misuse() const;
  /// held() and misuse() together, for a failure message; empty when both are.
  [[nodiscard]] std::string problems() const;

 private:
  void* do_allocate(memory_kind kind, std::size_t bytes, int device) override;
  void do_deallocate(memory_kind kind, void* p, std::size_t bytes) noexcept override;
  void* do_allocate_managed(std::size_t bytes, int device) override;
  void do_deallocate_managed(void* p, std::size_t bytes) noexcept override;
  stream_ref do_create_stream(int device) override;
  void do_destroy_stream(stream_ref s) noexcept override;
  event_ref do_create_event(int device) override;
  void do_destroy_event(event_ref e) noexcept override;
  void* do_reserve(std::size_t bytes, int device) override;
  void do_unreserve(void* va, std::size_t bytes) noexcept override;
  physical_handle do_create_physical(std::size_t bytes, int device) override;
  void do_release_physical(physical_handle h) noexcept override;
  void do_map(void* va, std::size_t bytes, physical_handle h) override;
  void do_unmap(void* va, std::size_t bytes) override;

  /// What kind of resource an entry is; the index into held()'s table.
  enum class resource : unsigned {
    device,
    pinned,
    pageable,
    managed,
    stream,
    event,
    reservation,
    physical,
    mapping,
    count_
  };
  struct entry {
    resource kind;
    std::size_t bytes;
  };
  void add(resource kind, const void* key, std::size_t bytes);
  /// Removes the entry; false (and a misuse line) when it is not held as `kind`.
  bool remove(resource kind, const void* key, const char* call) noexcept;

  mutable std::mutex mutex_;
  std::map<std::pair<unsigned, std::uintptr_t>, entry> held_;
  std::vector<std::string> misuse_;
};

}  // namespace offloadkit::testing
