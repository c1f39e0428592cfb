// libFuzzer target: arbitrary bytes as a schedule file. The parser must accept (and then the
// result must serialize and parse back to the same steps) or reject with a schedule_error; any
// other exception, a crash or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "offloadkit/stash/planner.hpp"
#include "offloadkit/traces/schedule_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ot = offloadkit::traces;
  namespace os = offloadkit::stash;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ot::schedule_file f;
  try {
    f = ot::parse_schedule(text);
  } catch (const ot::schedule_error&) {
    return 0;
  }
  const ot::schedule_file back = ot::parse_schedule(ot::to_json(f));
  if (back.work.sched.steps != f.work.sched.steps) std::abort();
  if (os::dense_rows(back.work) != os::dense_rows(f.work)) std::abort();
  // The planner runs on anything the parser accepts.
  const auto p = os::plan(f.work, f.page_rows, f.pools);
  if (p.peak_pages < p.peak_device_pages) std::abort();
  return 0;
}
