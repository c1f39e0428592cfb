// Timeline model: names of enumerators and the builders used by tests and synthetic timelines.
#include "offloadkit/traces/timeline.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace offloadkit::traces {

const char* to_string(record_kind k) noexcept {
  switch (k) {
    case record_kind::kernel:
      return "kernel";
    case record_kind::memcpy:
      return "memcpy";
    case record_kind::memset:
      return "memset";
    case record_kind::sync:
      return "sync";
    case record_kind::range:
      return "range";
    case record_kind::api:
      return "api";
  }
  return "?";
}

const char* to_string(copy_direction d) noexcept {
  switch (d) {
    case copy_direction::h2d:
      return "h2d";
    case copy_direction::d2h:
      return "d2h";
    case copy_direction::d2d:
      return "d2d";
    case copy_direction::h2h:
      return "h2h";
    case copy_direction::p2p:
      return "p2p";
    case copy_direction::unknown:
      return "unknown";
  }
  return "?";
}

const char* to_string(payload_type p) noexcept {
  switch (p) {
    case payload_type::none:
      return "none";
    case payload_type::u64:
      return "u64";
    case payload_type::i64:
      return "i64";
    case payload_type::f64:
      return "f64";
  }
  return "?";
}

const char* to_string(memory_location m) noexcept {
  switch (m) {
    case memory_location::device:
      return "device";
    case memory_location::pinned:
      return "pinned";
    case memory_location::pageable:
      return "pageable";
    case memory_location::managed:
      return "managed";
    case memory_location::unknown:
      return "unknown";
  }
  return "?";
}

const char* to_string(sync_kind s) noexcept {
  switch (s) {
    case sync_kind::context:
      return "context";
    case sync_kind::stream:
      return "stream";
    case sync_kind::event:
      return "event";
    case sync_kind::stream_wait_event:
      return "stream_wait_event";
    case sync_kind::event_query:
      return "event_query";
    case sync_kind::unknown:
      return "unknown";
  }
  return "?";
}

const char* to_string(api_kind a) noexcept {
  switch (a) {
    case api_kind::pinned_alloc:
      return "pinned_alloc";
    case api_kind::pinned_free:
      return "pinned_free";
    case api_kind::pinned_register:
      return "pinned_register";
    case api_kind::mem_map:
      return "mem_map";
    case api_kind::mem_unmap:
      return "mem_unmap";
    case api_kind::other:
      return "other";
  }
  return "?";
}

copy_direction direction_of(memory_location src, memory_location dst) noexcept {
  auto host = [](memory_location m) {
    return m == memory_location::pinned || m == memory_location::pageable;
  };
  auto dev = [](memory_location m) {
    return m == memory_location::device || m == memory_location::managed;
  };
  if (host(src) && dev(dst)) return copy_direction::h2d;
  if (dev(src) && host(dst)) return copy_direction::d2h;
  if (dev(src) && dev(dst)) return copy_direction::d2d;
  if (host(src) && host(dst)) return copy_direction::h2h;
  return copy_direction::unknown;
}

namespace {

/// Appends a record of `kind` named `name` over [start, end) and returns it for the rest.
record& append(std::vector<record>& records, record_kind kind, std::string name, std::int64_t start,
               std::int64_t end) {
  record r;
  r.kind = kind;
  r.name = std::move(name);
  r.start_ns = start;
  r.end_ns = end;
  records.push_back(std::move(r));
  return records.back();
}

/// The same for work on a device's stream.
record& append_on_stream(std::vector<record>& records, record_kind kind, std::string name,
                         std::int64_t start, std::int64_t end, std::int64_t stream, int device) {
  record& r = append(records, kind, std::move(name), start, end);
  r.stream = stream;
  r.device = device;
  return r;
}

}  // namespace

record& timeline::add_kernel(std::string name, std::int64_t start, std::int64_t end,
                             std::int64_t stream, int device) {
  return append_on_stream(records, record_kind::kernel, std::move(name), start, end, stream,
                          device);
}

record& timeline::add_copy(memory_location src, memory_location dst, std::uint64_t bytes,
                           std::int64_t start, std::int64_t end, std::int64_t stream, int device) {
  const copy_direction d = direction_of(src, dst);
  record& r = append_on_stream(records, record_kind::memcpy, std::string("memcpy ") + to_string(d),
                               start, end, stream, device);
  r.src = src;
  r.dst = dst;
  r.direction = d;
  r.bytes = bytes;
  return r;
}

record& timeline::add_memset(std::uint64_t bytes, std::int64_t start, std::int64_t end,
                             std::int64_t stream, int device) {
  record& r = append_on_stream(records, record_kind::memset, "memset", start, end, stream, device);
  r.dst = memory_location::device;
  r.bytes = bytes;
  return r;
}

record& timeline::add_sync(sync_kind kind, std::int64_t start, std::int64_t end,
                           std::uint64_t thread) {
  record& r =
      append(records, record_kind::sync, std::string("sync ") + to_string(kind), start, end);
  r.sync = kind;
  r.thread = thread;
  return r;
}

record& timeline::add_range(std::string name, std::int64_t start, std::int64_t end,
                            std::uint64_t thread) {
  record& r = append(records, record_kind::range, std::move(name), start, end);
  r.thread = thread;
  return r;
}

record& timeline::add_api(api_kind kind, std::string name, std::int64_t start, std::int64_t end,
                          std::uint64_t bytes, std::uint64_t thread) {
  record& r = append(records, record_kind::api, std::move(name), start, end);
  r.api = kind;
  r.bytes = bytes;
  r.thread = thread;
  return r;
}

void timeline::sort() {
  std::stable_sort(records.begin(), records.end(),
                   [](const record& a, const record& b) { return a.start_ns < b.start_ns; });
}

std::int64_t timeline::begin_ns() const noexcept {
  if (records.empty()) return 0;
  std::int64_t b = std::numeric_limits<std::int64_t>::max();
  for (const auto& r : records) b = std::min(b, r.start_ns);
  return b;
}

std::int64_t timeline::end_ns() const noexcept {
  if (records.empty()) return 0;
  std::int64_t e = std::numeric_limits<std::int64_t>::min();
  for (const auto& r : records) e = std::max(e, r.end_ns);
  return e;
}

}  // namespace offloadkit::traces
