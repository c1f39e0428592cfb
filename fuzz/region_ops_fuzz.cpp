// Fuzz target: arbitrary bytes are a region shape followed by write / pause / pause-discard /
// resume / replay / read / armed-fault ops on the reference or the optimized region (host
// executor), checked after every op against a plain model (region_ops.hpp). The same interpreter
// runs as a ctest over random inputs (properties/region/tests/region_ops_test.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "offloadkit/testing/region_ops.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string failure = offloadkit::region::region_ops_run(data, size);
  if (!failure.empty()) {
    std::fprintf(stderr, "region_ops_fuzz: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
