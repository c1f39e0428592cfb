// libFuzzer target: arbitrary bytes as a timeline file (Chrome-trace JSON with offloadkit args).
// Accept and analyse, or reject with offloadkit::logic_error; nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "offloadkit/error.hpp"
#include "offloadkit/traces/analysis.hpp"
#include "offloadkit/traces/export.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ot = offloadkit::traces;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ot::timeline t;
  try {
    t = ot::parse_chrome_trace(text);
  } catch (const offloadkit::logic_error&) {
    return 0;
  }
  (void)ot::summary(t);
  (void)ot::to_svg(t);
  (void)ot::parse_chrome_trace(ot::to_chrome_trace(t));
  return 0;
}
