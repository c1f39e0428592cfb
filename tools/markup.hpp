// Markdown and HTML pieces the command's documents share: the conformance report (report.cpp)
// and the conformance matrix (conformance.cpp).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace offloadkit::tools {

/// `s` in a Markdown table cell: pipes escaped, lines joined with <br>.
std::string md_cell(const std::string& s);
/// `s` as Markdown inline code, delimited by more backticks than it holds.
std::string md_code(const std::string& s);
/// `s` as a fenced Markdown block, fenced by more backticks than it holds.
std::string md_block(const std::string& s);
/// A Markdown table: `header` (escaped here) and `rows` (cells written as given: already md_cell).
void md_table(std::ostream& os, const std::vector<std::string>& header,
              const std::vector<std::vector<std::string>>& rows);

/// `s` escaped for HTML text and attribute values.
std::string html(const std::string& s);
/// The start of a self-contained page (its style inline): doctype, head, the title as <h1> and
/// the summary line, marked as failing (`bad`) or holding.
void html_begin(std::ostream& os, const std::string& title, const std::string& summary, bool bad);

}  // namespace offloadkit::tools
