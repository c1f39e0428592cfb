// libFuzzer target: the command line as a whole, arguments and file contents together. The input
// is one argument per line (each ending at a NUL, if it has one) up to the first empty line, then
// the contents of the file the command reads. `check ...` goes through check's option parsing
// (nothing runs), `analyze ...` through analyze with the file contents as its timeline (report and
// picture in memory). A command line must be accepted, or refused with a usage_error or input_error
// whose message is one line; anything else (another exception, a crash, a hang) is a bug.
#include "cli_fuzz.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "cli_common.hpp"

namespace {

constexpr std::size_t max_words = 64;

/// "" for an error the command reports as promised (one line naming what is wrong), otherwise why
/// not.
std::string one_line_message(const char* kind, const std::exception& e) {
  const std::string what = e.what();
  if (what.empty()) return std::string(kind) + " with an empty message";
  if (what.find('\n') != std::string::npos) {
    return std::string(kind) + " whose message spans lines: " + what;
  }
  return "";
}

}  // namespace

std::string offloadkit_cli_fuzz_run(const std::uint8_t* data, std::size_t size,
                                    const offloadkit_cli_fuzz_entries& entries) {
  namespace tools = offloadkit::tools;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t blank = input.find("\n\n");
  const std::string words = input.substr(0, blank);
  const std::string file = blank == std::string::npos ? std::string() : input.substr(blank + 2);
  std::vector<std::string> args;
  std::istringstream lines(words);
  for (std::string w; args.size() < max_words && std::getline(lines, w);) {
    // An argument is a C string: it ends at its first NUL, as the kernel hands argv over.
    args.push_back(w.substr(0, w.find('\0')));
  }
  if (args.empty()) return "";
  const std::string command = args.front();
  args.erase(args.begin());
  try {
    if (command == "check") {
      std::ostringstream help;
      if (!entries.check(args, help) && help.str().empty()) return "check --help printed nothing";
    } else if (command == "analyze") {
      std::string report;
      (void)entries.analyze(args, file, report);
      if (report.empty()) return "analyze accepted the input but reported nothing";
    }
  } catch (const tools::usage_error& e) {
    return one_line_message("usage_error", e);
  } catch (const tools::input_error& e) {
    return one_line_message("input_error", e);
  } catch (const std::exception& e) {
    return std::string("unexpected exception: ") + e.what();
  }
  return "";
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bug = offloadkit_cli_fuzz_run(data, size, offloadkit_cli_fuzz_entries{});
  if (!bug.empty()) {
    std::fprintf(stderr, "cli_fuzz: %s\n", bug.c_str());
    std::abort();
  }
  return 0;
}
