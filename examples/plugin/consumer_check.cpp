// A C++ program built against an installed offloadkit: runs one property through the check
// runner on the host executor, so that the installed headers, libraries and their dependencies
// (rapidcheck, the static CUDA runtime) are shown to compile, link and run outside the build tree.
#include <rapidcheck.h>

#include <cstdio>
#include <offloadkit/host_executor.hpp>
#include <offloadkit/resources.hpp>
#include <offloadkit/testing/check.hpp>
#include <vector>

namespace {

/// Bytes copied to device memory and back are unchanged.
void copy_round_trip(offloadkit::executor& ex) {
  const auto bytes = *rc::gen::inRange<std::size_t>(1, 4096);
  const auto value = *rc::gen::arbitrary<unsigned char>();
  const std::vector<unsigned char> in(bytes, value);
  std::vector<unsigned char> out(bytes, static_cast<unsigned char>(~value));
  offloadkit::stream s(ex);
  offloadkit::buffer d(ex, offloadkit::memory_kind::device, bytes);
  ex.copy(d.data(), in.data(), bytes, s);
  ex.copy(out.data(), d.data(), bytes, s);
  ex.synchronize(s);
  RC_ASSERT(out == in);
}

}  // namespace

int main() {
  offloadkit::host_executor ex;
  offloadkit::check_case c;
  c.feature = "consumer";
  c.implementation = "host";
  c.name = "copy_round_trip";
  c.property = &copy_round_trip;
  offloadkit::check_config cfg;
  cfg.cases = 20;
  const auto o = offloadkit::run_check(c, ex, cfg);
  std::printf("%s/%s/%s on %s: %s after %d cases (seed %llu)\n", o.feature.c_str(),
              o.implementation.c_str(), o.name.c_str(), o.executor_name.c_str(),
              o.passed ? "passed" : "FAILED", o.cases_run, static_cast<unsigned long long>(o.seed));
  if (!o.passed) std::printf("%s\n", o.message.c_str());
  return o.passed ? 0 : 1;
}
