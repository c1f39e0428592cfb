// `offloadkit capture` (run a CUDA program under the CUPTI recorder, then analyse its timeline) and
// `offloadkit analyze` (analyse a timeline captured before): their options and reports. The
// recording, the timeline format and the analyses are offloadkit_traces'.
#pragma once

#include <string>
#include <vector>

namespace offloadkit::tools {

/// `offloadkit capture` with `args` (the arguments after the command's name). Returns the exit
/// status (exit_status; the captured command's own status when that is not 0); every error is
/// reported on stderr.
int capture_main(const std::vector<std::string>& args);

/// `offloadkit analyze` with `args` (the arguments after the command's name). Returns the exit
/// status (exit_status); every error is reported on stderr.
int analyze_main(const std::vector<std::string>& args);

/// What analyze does with `args` when its timeline file holds `timeline_text`, without touching a
/// file: the report goes into `report` and the picture is drawn but not written. Returns the exit
/// status analyze would give; throws usage_error or input_error where analyze_main reports them.
/// For the fuzz target.
int analyze_in_memory(const std::vector<std::string>& args, const std::string& timeline_text,
                      std::string& report);

}  // namespace offloadkit::tools
