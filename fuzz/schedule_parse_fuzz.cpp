// libFuzzer target: arbitrary bytes as a schedule file. The parser must accept (and then the
// result must serialize and parse back to the same steps) or reject with a schedule_error; any
// other exception, a crash or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "offloadkit/traces/replay.hpp"
#include "offloadkit/traces/schedule_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ot = offloadkit::traces;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ot::schedule s;
  try {
    s = ot::parse_schedule(text);
  } catch (const ot::schedule_error&) {
    return 0;
  }
  const ot::schedule back = ot::parse_schedule(ot::to_json(s));
  if (back.steps.size() != s.steps.size() || back.rows != s.rows) std::abort();
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    if (back.steps[i].op != s.steps[i].op || !(back.steps[i].key == s.steps[i].key)) std::abort();
  }
  // The planner runs on anything the parser accepts.
  const auto p = ot::plan(s, s.pools);
  if (p.peak_pages < p.peak_device_pages) std::abort();
  return 0;
}
