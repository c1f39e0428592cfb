// Generated schedule files for examples and replay tests: one pipeline rank's 1F1B or interleaved
// 1F1B order (offloadkit::stash's generators) with skewed (MoE-like, log-normal) row counts per
// key.
#pragma once

#include <cstdint>
#include <string>

#include "offloadkit/traces/schedule_format.hpp"

namespace offloadkit::traces {

struct generate_options {
  std::string kind = "1f1b";  ///< "1f1b" (virtual_stages must be 1) or "interleaved"
  std::uint32_t pipeline_size = 4;
  std::uint32_t pipeline_rank = 0;
  std::uint32_t virtual_stages = 1;
  std::uint32_t microbatches = 32;  ///< interleaved: a multiple of pipeline_size, as in Megatron-LM
  std::uint32_t layers = 2;         ///< layers per virtual stage
  std::uint64_t row_bytes = 8192;   ///< hidden 4096 in bf16
  std::uint64_t max_rows = 4096;
  std::uint64_t mean_rows = 1024;
  double skew = 0.8;  ///< sigma of the log-normal spread of row counts
  std::uint32_t page_rows = 64;
  std::uint64_t seed = 1;
};

/// Valid ranges of the options (the command line checks them too).
inline constexpr std::uint32_t max_generate_pipeline = 1024;
inline constexpr double max_skew = 4.0;

/// Throws schedule_error (where = the option's name) for options out of range.
schedule_file generate_schedule(const generate_options& o);

}  // namespace offloadkit::traces
