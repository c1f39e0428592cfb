// Names of the declared region policies, as reports and messages show them.
#include "offloadkit/testing/implementation.hpp"

namespace offloadkit::testing {

const char* to_string(region_pause_modes m) noexcept {
  switch (m) {
    case region_pause_modes::both:
      return "both";
    case region_pause_modes::fixed_per_allocation:
      return "fixed per allocation";
  }
  return "unknown";
}

const char* to_string(region_streams s) noexcept {
  switch (s) {
    case region_streams::stream_ordered:
      return "stream-ordered";
    case region_streams::synchronous:
      return "synchronous";
  }
  return "unknown";
}

const char* to_string(region_graphs g) noexcept {
  switch (g) {
    case region_graphs::own:
      return "own";
    case region_graphs::none:
      return "none (offloadkit captures through the executor)";
  }
  return "unknown";
}

}  // namespace offloadkit::testing
