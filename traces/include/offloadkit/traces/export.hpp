// Timeline files and pictures. The timeline file IS a Chrome-trace JSON document (opens in
// Perfetto and chrome://tracing): each record is a complete ("X") event whose args carry every
// field of the record, so read_chrome_trace() restores the timeline exactly. write_svg() draws
// the lanes (one per device stream, one per host thread) with copies and kernels coloured by
// kind, a legend and a time axis.
#pragma once

#include <iosfwd>
#include <string>

#include "offloadkit/traces/timeline.hpp"

namespace offloadkit::traces {

/// Bumped when the args layout changes incompatibly.
inline constexpr int timeline_format_version = 1;

std::string to_chrome_trace(const timeline& t);
void write_chrome_trace(const timeline& t, const std::string& path);

/// Parses a document written by to_chrome_trace(). Throws offloadkit::logic_error naming the
/// event index and field for malformed input; never crashes on arbitrary bytes.
timeline parse_chrome_trace(const std::string& text);
timeline read_chrome_trace(const std::string& path);

struct svg_options {
  int width = 1600;  ///< pixels of the drawing area (lanes are labelled to its left)
  int lane_height = 22;
  std::string title;
};
std::string to_svg(const timeline& t, const svg_options& o = {});
void write_svg(const timeline& t, const std::string& path, const svg_options& o = {});

}  // namespace offloadkit::traces
