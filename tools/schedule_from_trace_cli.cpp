// `offloadkit schedule-from-trace`: turns the schedule events of a captured timeline (NVTX marks
// of the convention in traces/SCHEDULE_FORMAT.md) into a schedule file for `offloadkit replay`.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>

#include "offloadkit/traces/export.hpp"
#include "offloadkit/traces/schedule_trace.hpp"
#include "schedule_cli_support.hpp"
#include "schedule_commands.hpp"

namespace offloadkit::tools {

int schedule_from_trace_command(int argc, char** argv) {
  namespace ot = offloadkit::traces;
  namespace sc = schedule_cli;
  CLI::App app(
      "Turns the stash and restore events a recorder wrote into a captured timeline (NVTX marks\n"
      "'offloadkit.schedule ...', 'offloadkit.stash ...', 'offloadkit.restore ...' in the domain\n"
      "'offloadkit' or the default domain) into a schedule file that `offloadkit replay` reads.\n"
      "A timeline may hold several recordings (one per step, say); --recording picks one.",
      "offloadkit schedule-from-trace");
  std::string timeline_path, out;
  std::uint64_t recording = 0;
  app.add_option("TIMELINE", timeline_path, "the timeline (offloadkit capture -o ...)")
      ->required()
      ->type_name("FILE");
  app.add_option("-o,--output", out, "the schedule file to write")->required()->type_name("FILE");
  app.add_option_function<std::string>(
         "--recording",
         [&recording](const std::string& v) { (void)parse_unsigned(v, 0, UINT32_MAX, recording); },
         "which recording, from 0 (default 0)")
      ->type_name("K")
      ->check(unsigned_range(0, UINT32_MAX));
  return sc::run_command(app, "schedule-from-trace", argc, argv, [&]() -> int {
    const char* me = "offloadkit schedule-from-trace";
    ot::timeline t;
    try {
      std::error_code ec;
      if (std::filesystem::is_directory(timeline_path, ec)) {
        std::fprintf(stderr, "%s: %s: is a directory, not a timeline file\n", me,
                     timeline_path.c_str());
        return sc::exit_code::input;
      }
      t = ot::read_chrome_trace(timeline_path);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s: %s\n", me, timeline_path.c_str(),
                   sc::without_location(e.what()).c_str());
      return sc::exit_code::input;
    }
    const std::size_t recordings = ot::schedule_recordings(t);
    if (recordings != 0 && recording >= recordings) {
      std::fprintf(stderr, "%s: --recording: %llu is outside [0, %zu): %s holds %zu\n", me,
                   static_cast<unsigned long long>(recording), recordings, timeline_path.c_str(),
                   recordings);
      return sc::exit_code::usage;
    }
    ot::schedule_file f;
    try {
      f = ot::schedule_from_timeline(t, recording);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s: %s\n", me, timeline_path.c_str(),
                   sc::without_location(e.what()).c_str());
      return sc::exit_code::input;
    }
    try {
      ot::write_schedule(f, out);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", me, sc::without_location(e.what()).c_str());
      return sc::exit_code::input;
    }
    std::printf("wrote %s: recording %llu of %zu, %zu steps, %zu keys%s%s\n", out.c_str(),
                static_cast<unsigned long long>(recording), recordings, f.work.sched.steps.size(),
                stash::key_count(f.work.sched), f.name.empty() ? "" : ", ", f.name.c_str());
    return sc::exit_code::ok;
  });
}

}  // namespace offloadkit::tools
