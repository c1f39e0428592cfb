// Stash keys and status words between offloadkit's C++ types and plugin.h's, for both sides.
#pragma once

#include "offloadkit/plugin.h"
#include "offloadkit/stash/stash.hpp"

namespace offloadkit::plugin::detail {

inline okit_stash_key key_to_c(const stash::stash_key& k) {
  return okit_stash_key{k.vp, k.layer, k.microbatch};
}
inline stash::stash_key key_of(const okit_stash_key& k) {
  return stash::stash_key{k.vp, k.layer, k.microbatch};
}

inline okit_stash_status status_to_c(const stash::stash_status& s) {
  okit_stash_status c{};
  c.code = static_cast<std::uint32_t>(s.code);
  c.key = key_to_c(s.key);
  c.rows = s.rows;
  c.needed = s.needed;
  c.free_device = s.free_device;
  c.free_pinned = s.free_pinned;
  return c;
}
inline stash::stash_status status_of(const okit_stash_status& c) {
  stash::stash_status s;
  s.code = static_cast<stash::status_code>(c.code);
  s.key = key_of(c.key);
  s.rows = c.rows;
  s.needed = c.needed;
  s.free_device = c.free_device;
  s.free_pinned = c.free_pinned;
  return s;
}

}  // namespace offloadkit::plugin::detail
