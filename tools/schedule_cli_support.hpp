// What replay_cli.cpp and schedule_gen_cli.cpp share: exit statuses, CLI11 validators that check
// numbers strictly against their range (CLI11 alone wraps "-5" into an unsigned option and reads
// "1e3" inconsistently), and running a command with every error on stderr.
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

namespace offloadkit::tools::schedule_cli {

namespace exit_code {
constexpr int ok = 0;
constexpr int check_failed = 1;  ///< restored bytes differ
constexpr int usage = 2;         ///< unknown option, bad or out-of-range value
constexpr int unavailable = 3;   ///< the executor cannot run here
constexpr int plugin = 4;        ///< the plugin cannot be loaded or has nothing to run here
constexpr int input = 5;         ///< an input file cannot be read or is invalid
constexpr int overflow = 6;      ///< replay: a pool overflows
}  // namespace exit_code

/// The exit statuses as the commands' --help prints them.
inline const char* exit_codes_text() {
  return "exit status: 0 ok, 1 restored bytes differ, 2 bad usage, 3 the executor cannot run "
         "here,\n4 the plugin cannot be loaded or has no stash for the executor, 5 an input file "
         "cannot be\nread or is invalid, 6 a pool overflows\n";
}

/// Parses a decimal unsigned integer (digits only; no sign, exponent or spaces) in [lo, hi].
/// Returns an empty string and sets `out`, or the reason it is not valid.
inline std::string parse_unsigned(const std::string& text, std::uint64_t lo, std::uint64_t hi,
                                  std::uint64_t& out) {
  const std::string range = "valid range " + std::to_string(lo) + ".." + std::to_string(hi);
  bool digits = !text.empty() && text.size() <= 20;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits) return "'" + text + "' is not an integer: " + range;
  std::uint64_t v = 0;
  for (char c : text) {
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return text + " is out of range: " + range;
    v = v * 10 + d;
  }
  if (v < lo || v > hi) return text + " is out of range: " + range;
  out = v;
  return {};
}

/// A CLI11 validator for parse_unsigned().
inline CLI::Validator unsigned_range(std::uint64_t lo, std::uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) {
        std::uint64_t parsed = 0;
        return parse_unsigned(v, lo, hi, parsed);
      },
      "");
}

/// A finite decimal number in [lo, hi].
inline CLI::Validator real_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        const std::string range =
            "valid range " + CLI::detail::to_string(lo) + ".." + CLI::detail::to_string(hi);
        if (v.empty() || end != v.c_str() + v.size() || !(d == d)) {
          return "'" + v + "' is not a number: " + range;
        }
        if (d < lo || d > hi) return v + " is out of range: " + range;
        return {};
      },
      "");
}

/// One of `values`.
inline CLI::Validator one_of(const std::vector<std::string>& values) {
  std::string list;
  for (const auto& s : values) list += (list.empty() ? "" : ", ") + s;
  return CLI::Validator(
      [values, list](std::string& v) -> std::string {
        for (const auto& s : values) {
          if (v == s) return {};
        }
        return "'" + v + "' is not one of the valid values " + list;
      },
      "");
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

/// An error message without a source location: library errors end in " (FILE:LINE)" for
/// developers; users of the command get the message alone.
inline std::string without_location(std::string what) {
  if (!what.empty() && what.back() == ')') {
    const auto open = what.rfind(" (");
    const auto colon = what.rfind(':');
    if (open != std::string::npos && colon != std::string::npos && colon > open &&
        what.find('/', open) < colon) {
      bool line = colon + 2 < what.size();
      for (std::size_t i = colon + 1; i + 1 < what.size(); ++i) {
        line = line && what[i] >= '0' && what[i] <= '9';
      }
      if (line) what.erase(open);
    }
  }
  return what;
}

}  // namespace offloadkit::tools::schedule_cli
