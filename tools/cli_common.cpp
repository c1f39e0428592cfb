#include "cli_common.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>
#include <sstream>
#include <system_error>

#include "offloadkit/cuda_executor.hpp"
#include "offloadkit/detail/text.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/executor_choice.hpp"

namespace offloadkit::tools {
namespace {

using ::offloadkit::detail::join;

/// The project's help layout on top of CLI11's: lower-case headings, and after an option's name
/// only the name of its value ("--cases N"); defaults and ranges are in the descriptions.
class help_formatter final : public CLI::Formatter {
 public:
  help_formatter() {
    label("Usage", "usage");
    label("OPTIONS", "options");
    label("Positionals", "arguments");
    column_width(30);
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0 || opt->get_type_name().empty()) return "";
    return " " + opt->get_type_name();
  }
};

/// `value` quoted for a message, unless it is plain enough to stand alone.
std::string shown(const std::string& value) {
  bool plain = !value.empty();
  for (char c : value) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '+')) {
      plain = false;
    }
  }
  return plain ? value : "'" + value + "'";
}

/// The magnitude and sign of a decimal integer (an optional '-' then digits only), or why not.
struct decimal {
  bool negative = false;
  std::uint64_t magnitude = 0;
  bool too_large = false;  ///< more than 64 bits
};

bool parse_decimal(const std::string& s, decimal& d) {
  std::size_t i = 0;
  if (i < s.size() && s[i] == '-') {
    d.negative = true;
    ++i;
  }
  if (i == s.size()) return false;
  for (std::size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return false;
  }
  const auto r = std::from_chars(s.data() + i, s.data() + s.size(), d.magnitude, 10);
  d.too_large = r.ec == std::errc::result_out_of_range;
  return true;
}

std::string range_text(const std::string& lo, const std::string& hi) {
  return "valid range " + lo + ".." + hi;
}

}  // namespace

std::string exit_status_text() {
  return "exit status:\n"
         "  0    success\n"
         "  1    a check failed: a property failed, restored bytes differ, an analysis is below\n"
         "       its limit\n"
         "  2    bad usage: unknown option, bad or out-of-range value\n"
         "  3    the executor, the GPU or CUPTI cannot run here (check --python: no Python\n"
         "       interpreter with this offloadkit package can be started)\n"
         "  4    a plugin or Python implementation cannot be loaded or has nothing to run\n"
         "  5    an input file cannot be read or is invalid (or an output file cannot be written)\n"
         "  6    replay: a pool overflows\n"
         "  128+N  interrupted by signal N (130 for Ctrl-C)\n";
}

std::unique_ptr<CLI::App> make_app(const std::string& command, const std::string& description,
                                   const std::string& footer, const std::string& program) {
  auto app =
      std::make_unique<CLI::App>(description, command.empty() ? program : program + " " + command);
  app->formatter(std::make_shared<help_formatter>());
  app->option_defaults()->group("options")->disable_flag_override();
  app->set_help_flag("-h,--help", "print this text");
  // Unknown arguments are reported by parse_arguments, with the options that are valid.
  app->allow_extras();
  if (!footer.empty()) app->footer(footer);
  return app;
}

std::string option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_positional() || o->get_group().empty()) continue;
    names.push_back(o->get_name(false, false));
  }
  return join(names);
}

bool parse_arguments(CLI::App& app, const std::vector<std::string>& args, std::ostream& help_out) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    help_out << app.help();
    return false;
  } catch (const CLI::CallForAllHelp&) {
    help_out << app.help();
    return false;
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 words these for its own types ("--cases: 1 required N missing").
    static const std::regex missing(R"(^(\S+): \d+ required (.*) missing$)");
    static const std::regex flag_value(R"(^-*(\S+) was given a disallowed flag override$)");
    static const std::regex repeated(R"(^(\S+): At Most 1 required but received \d+$)");
    const std::string what = e.what();
    std::smatch m;
    if (std::regex_match(what, m, missing)) {
      throw usage_error(m[1].str() + ": needs a value (" + m[2].str() + ")");
    }
    if (std::regex_match(what, m, flag_value))
      throw usage_error("--" + m[1].str() + ": takes no value");
    if (std::regex_match(what, m, repeated))
      throw usage_error(m[1].str() + ": given more than once");
    throw usage_error(what);
  } catch (const CLI::ParseError& e) {
    throw usage_error(e.what());
  }
  for (const std::string& extra : app.remaining()) {
    // CLI11 keeps the "--" that ends the options among the remaining arguments.
    if (extra == "--") continue;
    const bool looks_like_option = extra.size() > 1 && extra[0] == '-';
    if (looks_like_option) {
      const std::string name = extra.substr(0, extra.find('='));
      throw usage_error(name + ": unknown option: valid options are " + option_names(app));
    }
    throw usage_error(shown(extra) + ": unexpected argument");
  }
  return true;
}

int parse_program_arguments(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                            std::ostream& err) {
  const std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  try {
    return parse_arguments(app, args, out) ? -1 : exit_status::ok;
  } catch (const usage_error& e) {
    err << app.get_name() << ": " << e.what() << "\n(" << app.get_name()
        << " --help shows the usage)\n";
    return exit_status::usage;
  }
}

CLI::Option* add_executor_option(CLI::App& app, std::string& executor) {
  return app.add_option("--executor", executor, "cuda (default) or host")
      ->type_name("cuda|host")
      ->transform(one_of({"cuda", "host"}));
}

CLI::Option* add_json_option(CLI::App& app, std::string& path) {
  return app.add_option("--json", path, "also write the figures as JSON to this file")
      ->type_name("FILE");
}

std::unique_ptr<executor> benchmark_executor(const std::string& name, std::string& skipped) {
  skipped.clear();
  if (name != "cuda" && name != "host") {
    throw usage_error(::offloadkit::detail::concat("--executor: '", name,
                                                   "' is not one of the valid values cuda, host"));
  }
  try {
    return make_executor(name);
  } catch (const unavailable_error&) {
    // No GPU here: the benchmark says so and succeeds, as every binary starts without a driver.
    skipped = cuda_unavailable_reason();
    return nullptr;
  }
}

std::string json_string(const std::string& text) {
  // A command line or a file name need not be UTF-8: bytes that are not become U+FFFD rather than
  // an exception after the run whose figures are being written.
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

CLI::Validator integer_range(std::int64_t lo, std::int64_t hi) {
  const std::string range = range_text(std::to_string(lo), std::to_string(hi));
  return CLI::Validator(
      [lo, hi, range](std::string& value) -> std::string {
        decimal d;
        if (!parse_decimal(value, d)) return shown(value) + " is not an integer: " + range;
        const bool fits =
            !d.too_large && (d.negative ? d.magnitude <= std::uint64_t{1} << 63
                                        : d.magnitude <= static_cast<std::uint64_t>(INT64_MAX));
        if (!fits) return value + " is out of range: " + range;
        const std::int64_t n = d.negative ? static_cast<std::int64_t>(0 - d.magnitude)
                                          : static_cast<std::int64_t>(d.magnitude);
        if (n < lo || n > hi) return value + " is out of range: " + range;
        value = std::to_string(n);
        return "";
      },
      "");
}

std::string parse_unsigned(const std::string& text, std::uint64_t lo, std::uint64_t hi,
                           std::uint64_t& out) {
  const std::string range = range_text(std::to_string(lo), std::to_string(hi));
  decimal d;
  if (!parse_decimal(text, d)) return shown(text) + " is not an integer: " + range;
  const bool in_range =
      !d.too_large && (!d.negative || d.magnitude == 0) && d.magnitude >= lo && d.magnitude <= hi;
  if (!in_range) return text + " is out of range: " + range;
  out = d.magnitude;
  return "";
}

CLI::Validator unsigned_range(std::uint64_t lo, std::uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) -> std::string {
        std::uint64_t n = 0;
        std::string why = parse_unsigned(value, lo, hi, n);
        if (why.empty()) value = std::to_string(n);
        return why;
      },
      "");
}

std::string without_location(std::string what) {
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

CLI::Validator real_range(double lo, double hi, bool lo_open, const std::string& unit) {
  auto number = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  std::string range = lo_open
                          ? "valid range: more than " + number(lo) + " and at most " + number(hi)
                          : range_text(number(lo), number(hi));
  if (!unit.empty()) range += " " + unit;
  return CLI::Validator(
      [lo, hi, lo_open, range](std::string& value) -> std::string {
        // Decimal notation only: strtod alone would also take "nan", "inf" and hex floats.
        const bool chars_ok =
            !value.empty() && value.find_first_not_of("0123456789.eE+-") == std::string::npos;
        char* end = nullptr;
        const double v = chars_ok ? std::strtod(value.c_str(), &end) : 0;
        if (!chars_ok || end != value.c_str() + value.size()) {
          return shown(value) + " is not a number: " + range;
        }
        if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
          return value + " is out of range: " + range;
        }
        char canonical[40];
        std::snprintf(canonical, sizeof canonical, "%.17g", v);
        value = canonical;
        return "";
      },
      "");
}

CLI::Validator one_of(const std::vector<std::string>& values) {
  const std::string valid = join(values);
  return CLI::Validator(
      [values, valid](std::string& value) -> std::string {
        for (const auto& v : values) {
          if (v == value) return "";
        }
        return shown(value) + " is not one of the valid values " + valid;
      },
      "");
}

int run_guarded(const std::string& command, const std::function<int()>& body) {
  const std::string prefix = "offloadkit " + command + ": ";
  try {
    return body();
  } catch (const usage_error& e) {
    std::cerr << prefix << without_location(e.what()) << "\n(offloadkit " << command
              << " --help shows the usage)\n";
    return exit_status::usage;
  } catch (const unavailable_error& e) {
    std::cerr << prefix << without_location(e.what()) << "\n";
    return exit_status::unavailable;
  } catch (const plugin_unusable& e) {
    std::cerr << prefix << without_location(e.what()) << "\n";
    return exit_status::plugin;
  } catch (const input_error& e) {
    std::cerr << prefix << without_location(e.what()) << "\n";
    return exit_status::input;
  } catch (const std::bad_alloc& e) {
    // Host or device memory the command needs is not there: it cannot run here as asked.
    std::cerr << prefix << "out of memory: " << without_location(e.what()) << "\n";
    return exit_status::unavailable;
  } catch (const std::exception& e) {
    // Not one of the failures above: reported as the command failing.
    std::cerr << prefix << without_location(e.what()) << "\n";
    return exit_status::check_failed;
  }
}

}  // namespace offloadkit::tools
