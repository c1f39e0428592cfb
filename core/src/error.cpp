// Out-of-line parts of error.hpp.
#include "offloadkit/error.hpp"

#include <cstdio>

namespace offloadkit::detail {

void assert_noexcept(bool ok, const char* call, const char* file, int line) noexcept {
  if (!ok)
    std::fprintf(stderr, "offloadkit: %s failed in a noexcept path (%s:%d)\n", call, file, line);
}

}  // namespace offloadkit::detail
