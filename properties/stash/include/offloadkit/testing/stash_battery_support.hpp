// What the paged-stash battery shares with the stash's unit tests and its fuzz target: each key's
// data pattern and the buffers that drive a stash from a test (device_io). No rapidcheck here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "offloadkit/detail/splitmix64.hpp"
#include "offloadkit/executor.hpp"
#include "offloadkit/resources.hpp"
#include "offloadkit/stash/key.hpp"

namespace offloadkit::stash::testing {

/// Non-zero byte `offset` of key `code`'s activation in generation `salt`.
inline unsigned char pattern_byte(std::uint32_t code, std::uint32_t salt, std::uint64_t offset) {
  const std::uint64_t x = offloadkit::detail::splitmix64_mix(
      (std::uint64_t{code} << 32 | salt) ^ (offset * offloadkit::detail::splitmix64_gamma));
  return static_cast<unsigned char>((x % 255) + 1);
}

/// A number naming a key's data pattern: any key a stash accepts has one, whatever key space it
/// declares (offloadkit's codec covers only its own).
inline std::uint32_t pattern_code(const stash_key& k) {
  return static_cast<std::uint32_t>(offloadkit::detail::splitmix64_mix(
      (std::uint64_t{k.vp} << 42) ^ (std::uint64_t{k.layer} << 21) ^ k.microbatch));
}

constexpr unsigned char sentinel = 0xA5;

/// Device buffers (on `device`) and a pinned staging area for driving a stash from a test.
struct device_io {
  executor* ex;
  stream_ref s;
  std::size_t bytes;
  buffer src, dst, rows, rows_out, staging;

  device_io(executor& e, stream_ref st, std::size_t buffer_bytes, int device = 0)
      : ex(&e),
        s(st),
        bytes(buffer_bytes),
        src(e, memory_kind::device, buffer_bytes, device),
        dst(e, memory_kind::device, buffer_bytes, device),
        rows(e, memory_kind::device, sizeof(std::uint64_t), device),
        rows_out(e, memory_kind::device, sizeof(std::uint64_t), device),
        staging(e, memory_kind::pinned, buffer_bytes + 16) {}

  void write_u64(void* device_ptr, std::uint64_t v) {
    std::memcpy(staging.data(), &v, sizeof v);
    ex->copy(device_ptr, staging.data(), sizeof v, s);
    ex->synchronize(s);
  }
  std::uint64_t read_u64(const void* device_ptr) {
    ex->copy(staging.data(), device_ptr, sizeof(std::uint64_t), s);
    ex->synchronize(s);
    std::uint64_t v;
    std::memcpy(&v, staging.data(), sizeof v);
    return v;
  }
  /// Fills the whole oversized source with the key's pattern (rows past the count included).
  void write_source(void* device_ptr, std::uint32_t code, std::uint32_t salt) {
    auto* h = staging.as<unsigned char>();
    for (std::size_t o = 0; o < bytes; ++o) h[o] = pattern_byte(code, salt, o);
    if (bytes > 0) ex->copy(device_ptr, h, bytes, s);
    ex->synchronize(s);
  }
  void clear(void* device_ptr) {
    if (bytes > 0) ex->fill(device_ptr, sentinel, bytes, s);
    ex->synchronize(s);
  }
  std::vector<unsigned char> read(const void* device_ptr) {
    if (bytes > 0) ex->copy(staging.data(), device_ptr, bytes, s);
    ex->synchronize(s);
    const auto* h = staging.as<unsigned char>();
    return std::vector<unsigned char>(h, h + bytes);
  }
};

/// The first byte where a restored buffer differs from "the key's first `rows` rows, sentinel
/// after"; -1 when it matches. rows = 0 with restored = false expects the sentinel everywhere.
inline long long first_mismatch(const std::vector<unsigned char>& got, std::uint32_t code,
                                std::uint32_t salt, std::uint64_t valid_bytes) {
  for (std::size_t o = 0; o < got.size(); ++o) {
    const unsigned char want = o < valid_bytes ? pattern_byte(code, salt, o) : sentinel;
    if (got[o] != want) return static_cast<long long>(o);
  }
  return -1;
}

}  // namespace offloadkit::stash::testing
