// Small text helpers for messages and reports, shared by the command line and its libraries.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace offloadkit::detail {

/// The items separated by `sep`: "a, b, c".
inline std::string join(const std::vector<std::string>& items, const std::string& sep = ", ") {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

/// Every non-empty line of `text` prefixed with `prefix` (empty lines stay empty).
inline std::string indent(const std::string& text, const std::string& prefix) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!out.empty()) out += '\n';
    if (!line.empty()) out += prefix + line;
  }
  return out;
}

/// `s` as HTML or XML text or attribute value: &, <, >, " and ' escaped, and the control
/// characters XML 1.0 does not allow (all below 0x20 but tab, newline and carriage return) as
/// spaces.
inline std::string escape_markup(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default: {
        const auto c = static_cast<unsigned char>(ch);
        out += c < 0x20 && c != '\t' && c != '\n' && c != '\r' ? ' ' : ch;
      }
    }
  }
  return out;
}

}  // namespace offloadkit::detail
