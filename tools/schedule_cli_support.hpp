// What replay_cli.cpp and schedule_gen_cli.cpp share beyond cli_common.hpp: their exit statuses
// in --help, and running a command with every error on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli_common.hpp"

namespace offloadkit::tools::schedule_cli {

namespace exit_code = ::offloadkit::tools::exit_status;

/// The exit statuses as the commands' --help prints them.
inline const char* exit_codes_text() {
  return "exit status: 0 ok, 1 restored bytes differ, 2 bad usage, 3 the executor cannot run "
         "here,\n4 the plugin cannot be loaded or has no stash for the executor, 5 an input file "
         "cannot be\nread or is invalid, 6 a pool overflows\n";
}

/// Parses argv with `app`: --help prints the help (and `footer`) on stdout and returns
/// exit_code::ok; an error prints `offloadkit <command>: <message>` and where the usage is shown
/// on stderr and returns exit_code::usage. Otherwise runs `body` and returns its status.
inline int run_command(CLI::App& app, const std::string& command, int argc, char** argv,
                       const std::function<int()>& body) {
  // CLI11 takes "-5" after an option for an option of its own; joined as "--opt=-5" the value
  // reaches the option's validator, which names the option, the value and the range.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {
    const std::string a = argv[i];
    if (!args.empty() && a.rfind("--", 0) == 0 && a.find('=') == std::string::npos &&
        args.back().size() > 1 && args.back()[0] == '-' &&
        (std::isdigit(static_cast<unsigned char>(args.back()[1])) != 0 || args.back()[1] == '.')) {
      args.back() = a + "=" + args.back();
    } else {
      args.push_back(a);
    }
  }
  try {
    app.parse(std::move(args));
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::fputs(exit_codes_text(), stdout);
    return exit_code::ok;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "offloadkit %s: %s\n(offloadkit %s --help shows the usage)\n",
                 command.c_str(), e.what(), command.c_str());
    return exit_code::usage;
  }
  return body();
}

using ::offloadkit::tools::without_location;

}  // namespace offloadkit::tools::schedule_cli
