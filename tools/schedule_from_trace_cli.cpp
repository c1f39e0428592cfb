// `offloadkit schedule-from-trace`: turns the schedule events of a captured timeline (NVTX marks
// of the convention in traces/SCHEDULE_FORMAT.md) into a schedule file for `offloadkit replay`.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

#include "cli_common.hpp"
#include "offloadkit/traces/export.hpp"
#include "offloadkit/traces/schedule_trace.hpp"
#include "schedule_commands.hpp"

namespace offloadkit::tools {

int schedule_from_trace_main(const std::vector<std::string>& args) {
  return run_guarded("schedule-from-trace", [&args] {
    namespace ot = offloadkit::traces;
    auto app = make_app(
        "schedule-from-trace",
        "Turns the stash and restore events a recorder wrote into a captured timeline (NVTX marks\n"
        "'offloadkit.schedule ...', 'offloadkit.stash ...', 'offloadkit.restore ...' in the "
        "domain\n"
        "'offloadkit' or the default domain) into a schedule file that `offloadkit replay` reads.\n"
        "A timeline may hold several recordings (one per step, say); --recording picks one.",
        exit_status_text());
    std::string timeline_path, out;
    std::uint64_t recording = 0;
    app->add_option("TIMELINE", timeline_path, "the timeline (offloadkit capture -o ...)")
        ->required()
        ->type_name("FILE");
    app->add_option("-o,--output", out, "the schedule file to write")
        ->required()
        ->type_name("FILE");
    app->add_option_function<std::string>(
           "--recording",
           [&recording](const std::string& v) {
             (void)parse_unsigned(v, 0, UINT32_MAX, recording);
           },
           "which recording, from 0 (default 0)")
        ->type_name("K")
        ->check(unsigned_range(0, UINT32_MAX));
    if (!parse_arguments(*app, args, std::cout)) return exit_status::ok;

    ot::timeline t;
    std::error_code ec;
    if (std::filesystem::is_directory(timeline_path, ec)) {
      throw input_error(timeline_path + ": is a directory, not a timeline file");
    }
    try {
      t = ot::read_chrome_trace(timeline_path);
    } catch (const std::exception& e) {
      throw input_error(timeline_path + ": " + e.what());
    }
    const std::size_t recordings = ot::schedule_recordings(t);
    if (recordings != 0 && recording >= recordings) {
      throw usage_error("--recording: " + std::to_string(recording) + " is outside [0, " +
                        std::to_string(recordings) + "): " + timeline_path + " holds " +
                        std::to_string(recordings));
    }
    ot::schedule_file f;
    try {
      f = ot::schedule_from_timeline(t, recording);
    } catch (const std::exception& e) {
      throw input_error(timeline_path + ": " + e.what());
    }
    try {
      ot::write_schedule(f, out);
    } catch (const std::exception& e) {
      throw input_error(e.what());
    }
    std::printf("wrote %s: recording %llu of %zu, %zu steps, %zu keys%s%s\n", out.c_str(),
                static_cast<unsigned long long>(recording), recordings, f.work.sched.steps.size(),
                stash::key_count(f.work.sched), f.name.empty() ? "" : ", ", f.name.c_str());
    return exit_status::ok;
  });
}

}  // namespace offloadkit::tools
