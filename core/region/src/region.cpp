// The region state machine's checks and the helpers every implementation shares.
#include "offloadkit/region/region.hpp"

#include "offloadkit/error.hpp"

namespace offloadkit::region {

const char* to_string(region_state s) noexcept {
  switch (s) {
    case region_state::active:
      return "active";
    case region_state::paused:
      return "paused";
    case region_state::partial:
      return "partial";
  }
  return "unknown";
}

const char* to_string(pause_mode m) noexcept {
  switch (m) {
    case pause_mode::preserve:
      return "preserve";
    case pause_mode::discard:
      return "discard";
  }
  return "unknown";
}

void expect_valid_config(const region_config& c, const executor& ex, const char* who) {
  OFFLOADKIT_EXPECTS(c.bytes > 0, out_of_range, who, ": bytes = 0; a region holds at least 1 byte");
  const int devices = ex.device_count();
  OFFLOADKIT_EXPECTS(c.device >= 0 && c.device < devices, out_of_range, who,
                     ": device = ", c.device, " is outside [0, ", devices, ")");
}

void offload_region::expect_stream(stream_ref s, const char* call) const {
  OFFLOADKIT_EXPECTS(s.device == device(), out_of_range, "offload_region::", call,
                     ": stream of device ", s.device, " given to a region on device ", device(),
                     "; pass a stream of device ", device());
}

void offload_region::pause(pause_mode mode, stream_ref s) {
  OFFLOADKIT_EXPECTS(state() != region_state::paused, state_error, "offload_region::pause(",
                     to_string(mode), "): the region is already paused; resume() it first");
  expect_stream(s, "pause");
  do_pause(mode, s);
}

void offload_region::resume(stream_ref s) {
  OFFLOADKIT_EXPECTS(state() != region_state::active, state_error,
                     "offload_region::resume: the region is active; pause() it first");
  expect_stream(s, "resume");
  do_resume(s);
}

void offload_region::swap_with(offload_region& in, pause_mode mode, stream_ref s) {
  OFFLOADKIT_EXPECTS(&in != this, logic_error, "offload_region::swap_with(", to_string(mode),
                     "): the region to resume is this region; swap pauses one region and "
                     "resumes another");
  OFFLOADKIT_EXPECTS(in.device() == device(), out_of_range, "offload_region::swap_with(",
                     to_string(mode), "): the region to resume is on device ", in.device(),
                     ", this one on device ", device(), "; both must be on one device");
  OFFLOADKIT_EXPECTS(state() != region_state::paused || in.state() != region_state::active,
                     state_error, "offload_region::swap_with(", to_string(mode),
                     "): this region is already paused and the other already active; "
                     "nothing is left to swap");
  expect_stream(s, "swap_with");
  do_swap(in, mode, s);
}

void offload_region::do_swap(offload_region& in, pause_mode mode, stream_ref s) {
  // Pause first: the memory it gives back is what the resume may need.
  if (state() != region_state::paused) pause(mode, s);
  if (in.state() != region_state::active) in.resume(s);
}

graph_id offload_region::register_graph(capture_fn fn, stream_ref s) {
  OFFLOADKIT_EXPECTS(fn != nullptr, logic_error,
                     "offload_region::register_graph: empty capture function");
  OFFLOADKIT_EXPECTS(state() == region_state::active, state_error,
                     "offload_region::register_graph: the region is ", to_string(state()),
                     "; graphs are captured on an active region (resume() it first)");
  expect_stream(s, "register_graph");
  return do_register_graph(std::move(fn), s);
}

void offload_region::replay(graph_id g, stream_ref s) {
  OFFLOADKIT_EXPECTS(state() == region_state::active, state_error, "offload_region::replay(graph ",
                     g, "): the region is ", to_string(state()),
                     "; replaying would touch released memory (resume() it first)");
  expect_stream(s, "replay");
  do_replay(g, s);
}

namespace detail {

graph_ref capture_graph(executor& ex, const capture_fn& fn, void* base, stream_ref s) {
  ex.begin_capture(s);
  try {
    fn(base, s);
  } catch (...) {
    // End the capture so that the stream is usable again, and drop what was recorded; a failed
    // end may leave the stream capturing, so it is tried once more.
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        ex.destroy_graph(ex.end_capture(s));
        break;
      } catch (const std::exception&) {
        // The caller gets the capture function's error, which is why nothing was captured.
      }
    }
    throw;
  }
  try {
    return ex.end_capture(s);
  } catch (...) {
    // A failed end may leave the stream capturing; try once more so that it is usable again.
    try {
      ex.destroy_graph(ex.end_capture(s));
    } catch (const std::exception&) {
      // The caller gets the first end_capture's error; this second try only frees the stream.
    }
    throw;
  }
}

}  // namespace detail
}  // namespace offloadkit::region
