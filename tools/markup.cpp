#include "markup.hpp"

#include <algorithm>
#include <ostream>

#include "offloadkit/detail/text.hpp"

namespace offloadkit::tools {
namespace {

std::size_t longest_backtick_run(const std::string& s) {
  std::size_t longest = 0, run = 0;
  for (char ch : s) {
    run = ch == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

/// The page's style: inline, so that the file alone is the whole document.
constexpr const char* html_style = R"(body { font-family: sans-serif; margin: 2em; color: #1f2328; }
table { border-collapse: collapse; margin: 0.5em 0 1em 0; }
th, td { border: 1px solid #d0d7de; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; }
pre { background: #f6f8fa; border: 1px solid #d0d7de; padding: 0.6em; overflow-x: auto; }
code { background: #f6f8fa; padding: 0 0.2em; }
.holds, .clean, .yes { background: #d1f0d7; }
.fails, .bad { background: #ffd1d1; font-weight: bold; }
.not_applicable, .no { background: #eaeef2; }
.policy { background: #ddf4ff; }
.skipped, .unknown { background: #fff3bf; }
.summary { font-size: 1.1em; font-weight: bold; }
)";

}  // namespace

std::string md_cell(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') {
      out += "\\|";
    } else if (ch == '\n') {
      out += "<br>";
    } else {
      out += ch;
    }
  }
  return out;
}

std::string md_code(const std::string& s) {
  const std::string ticks(longest_backtick_run(s) + 1, '`');
  const bool pad = !s.empty() && (s.front() == '`' || s.back() == '`');
  return ticks + (pad ? " " : "") + s + (pad ? " " : "") + ticks;
}

std::string md_block(const std::string& s) {
  const std::string fence(std::max<std::size_t>(3, longest_backtick_run(s) + 1), '`');
  std::string body = s;
  while (!body.empty() && body.back() == '\n') body.pop_back();
  return fence + "\n" + body + "\n" + fence + "\n";
}

void md_table(std::ostream& os, const std::vector<std::string>& header,
              const std::vector<std::vector<std::string>>& rows) {
  os << "|";
  for (const auto& h : header) os << " " << md_cell(h) << " |";
  os << "\n|";
  for (std::size_t i = 0; i < header.size(); ++i) os << "---|";
  os << "\n";
  for (const auto& r : rows) {
    os << "|";
    for (const auto& cell : r) os << " " << cell << " |";
    os << "\n";
  }
}

std::string html(const std::string& s) { return offloadkit::detail::escape_markup(s); }

void html_begin(std::ostream& os, const std::string& title, const std::string& summary, bool bad) {
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
     << html(title) << "</title>\n<style>\n"
     << html_style << "</style>\n</head>\n<body>\n<h1>" << html(title)
     << "</h1>\n<p class=\"summary " << (bad ? "fails" : "holds") << "\">" << html(summary)
     << "</p>\n";
}

}  // namespace offloadkit::tools
