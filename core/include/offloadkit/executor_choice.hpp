// Choosing a back end by name: what every command and test that takes `--executor` does.
// The names are "auto" (cuda where a GPU is usable, host otherwise), "host" and "cuda". Each
// command's default is its own and says why in its --help: `check` auto (a verdict on the
// machine it runs on), `replay` host (the data check runs anywhere and means the same on both),
// the benchmarks cuda (a host figure is no GPU figure: they report "skipped" without a GPU).
#pragma once

#include <memory>
#include <string>

#include "offloadkit/executor.hpp"

namespace offloadkit {

/// The back end a name resolves to here, and why (for the command's header line).
struct executor_choice {
  std::string name;  ///< "host" or "cuda"
  std::string why;   ///< "a GPU is usable", "asked for with --executor host", ...
};

/// Resolves "auto", "host" or "cuda". Throws out_of_range for any other name (naming the valid
/// ones) and unavailable_error for "cuda" where no GPU is usable, saying what is missing.
executor_choice choose_executor(const std::string& asked);

/// A new executor of the back end that choose_executor(name) resolves to; throws as it does, and
/// what the cuda executor throws where a GPU is there but fails.
std::unique_ptr<executor> make_executor(const std::string& name);

}  // namespace offloadkit
