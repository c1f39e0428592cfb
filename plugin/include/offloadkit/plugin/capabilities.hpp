// The one table of declared capabilities and profile policies: for each feature, every bit of
// plugin.h's capabilities word, its name (the one offloadkit.protocol uses and reports show) and
// what it means. The Python bridge encodes a Python implementation's names with it, the host
// wrappers decode a word into battery descriptors (host.hpp's *_of functions, each bit once), and
// tests hold offloadkit.protocol's names and those decoders to it, so that a capability added in
// one place and not the others fails a test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace offloadkit::plugin {

/// One declared capability of one feature ("common": the bits every feature shares).
struct capability {
  const char* feature;
  const char* name;
  std::uint64_t bit;
  const char* meaning;  ///< one line, for listings and reports
};

/// Every capability of every feature, common ones first, then stash, region, arena, activation.
const std::vector<capability>& capability_table();

/// The bit of `name` for `feature` (a common name is valid for every feature). Throws
/// out_of_range naming the feature and its valid names otherwise.
std::uint64_t capability_bit(const std::string& feature, const std::string& name);

/// The names set in `bits` for `feature`, common ones included, in table order.
std::vector<std::string> capability_names(const std::string& feature, std::uint64_t bits);

}  // namespace offloadkit::plugin
