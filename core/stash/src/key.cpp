// Key codecs: the checked fixed-width codec and the seed's legacy decimal one.
#include "offloadkit/stash/key.hpp"

#include <cstdint>

#include "offloadkit/error.hpp"

namespace offloadkit::stash {

stash_key make_key(std::uint64_t vp, std::uint64_t layer, std::uint64_t microbatch) {
  OFFLOADKIT_EXPECTS(vp < key_limits::vp, out_of_range, "stash key field vp = ", vp,
                     " is outside [0, ", key_limits::vp, ")");
  OFFLOADKIT_EXPECTS(layer < key_limits::layer, out_of_range, "stash key field layer = ", layer,
                     " is outside [0, ", key_limits::layer, ")");
  OFFLOADKIT_EXPECTS(microbatch < key_limits::microbatch, out_of_range,
                     "stash key field microbatch = ", microbatch, " is outside [0, ",
                     key_limits::microbatch, ")");
  return stash_key{static_cast<std::uint32_t>(vp), static_cast<std::uint32_t>(layer),
                   static_cast<std::uint32_t>(microbatch)};
}

void check_key(const stash_key& k) { (void)make_key(k.vp, k.layer, k.microbatch); }

std::uint32_t encode_key(const stash_key& k) {
  check_key(k);
  return pack_key(k.vp, k.layer, k.microbatch);
}

stash_key decode_key(std::uint32_t code) noexcept {
  stash_key k;
  k.microbatch = code & (key_limits::microbatch - 1);
  k.layer = (code >> key_limits::microbatch_bits) & (key_limits::layer - 1);
  k.vp = code >> (key_limits::microbatch_bits + key_limits::layer_bits);
  return k;
}

std::uint64_t legacy_encode(const stash_key& k) noexcept {
  return std::uint64_t{k.vp} * 1000000u + std::uint64_t{k.layer} * 1000u + k.microbatch;
}

stash_key legacy_decode(std::uint64_t code) noexcept {
  stash_key k;
  k.microbatch = static_cast<std::uint32_t>(code % 1000);
  k.layer = static_cast<std::uint32_t>(code / 1000 % 1000);
  k.vp = static_cast<std::uint32_t>(code / 1000000);
  return k;
}

bool legacy_representable(const stash_key& k) noexcept {
  return legacy_decode(legacy_encode(k)) == k;
}

std::string to_string(const stash_key& k) {
  return detail::concat("(vp ", k.vp, ", layer ", k.layer, ", microbatch ", k.microbatch, ")");
}

}  // namespace offloadkit::stash
