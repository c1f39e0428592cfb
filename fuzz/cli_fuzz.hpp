// The cli_fuzz target's runner (cli_fuzz.cpp), shared with its corpus test, which also runs it with
// planted entries to show that it reports them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "check_cli.hpp"
#include "timeline_cli.hpp"

/// What the fuzz target runs for each command: check's option parsing and analyze in memory.
struct offloadkit_cli_fuzz_entries {
  bool (*check)(const std::vector<std::string>& args,
                std::ostream& help_out) = offloadkit::tools::parse_check_arguments;
  int (*analyze)(const std::vector<std::string>& args, const std::string& timeline_text,
                 std::string& report) = offloadkit::tools::analyze_in_memory;
};

/// Runs one input (one argument per line up to the first empty line, then the file's contents).
/// Returns "" when the command line is handled as promised, otherwise what went wrong.
std::string offloadkit_cli_fuzz_run(const std::uint8_t* data, std::size_t size,
                                    const offloadkit_cli_fuzz_entries& entries);
