// Reads an input (a fuzzer's, or a stored corpus entry) one byte at a time. Past the end it reads
// zeros, so that every input, however short, drives a complete run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace offloadkit::detail {

struct byte_reader {
  const std::uint8_t* p = nullptr;
  std::size_t n = 0;  ///< bytes left

  std::uint8_t next() noexcept {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

}  // namespace offloadkit::detail
