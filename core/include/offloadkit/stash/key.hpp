// Stash keys: which saved activation a stash entry holds, named by (virtual-pipeline stage, layer,
// microbatch). The fixed-width codec packs the three fields into 32 bits with checked ranges, so
// two different keys never share a code. The legacy decimal codec is the one in the seed
// (vp * 1000000 + layer * 1000 + microbatch); it is kept so that checks can show where it
// collides and can validate third-party code that still uses it.
#pragma once

#include <cstdint>
#include <string>

#include "offloadkit/host_device.hpp"

namespace offloadkit::stash {

/// One saved activation. Construct with make_key() to get range checks.
struct stash_key {
  std::uint32_t vp = 0;          ///< virtual-pipeline stage (model chunk)
  std::uint32_t layer = 0;       ///< layer within the stage
  std::uint32_t microbatch = 0;  ///< microbatch within the step

  friend bool operator==(const stash_key& a, const stash_key& b) {
    return a.vp == b.vp && a.layer == b.layer && a.microbatch == b.microbatch;
  }
  friend bool operator!=(const stash_key& a, const stash_key& b) { return !(a == b); }
  friend bool operator<(const stash_key& a, const stash_key& b) {
    if (a.vp != b.vp) return a.vp < b.vp;
    if (a.layer != b.layer) return a.layer < b.layer;
    return a.microbatch < b.microbatch;
  }
};

/// Field widths of the fixed-width codec: vp in the top 8 bits, then layer and microbatch in 12
/// bits each. Limits are exclusive upper bounds.
struct key_limits {
  static constexpr unsigned vp_bits = 8;
  static constexpr unsigned layer_bits = 12;
  static constexpr unsigned microbatch_bits = 12;
  static constexpr std::uint32_t vp = 1u << vp_bits;                  // 256
  static constexpr std::uint32_t layer = 1u << layer_bits;            // 4096
  static constexpr std::uint32_t microbatch = 1u << microbatch_bits;  // 4096
};

/// Builds a key; throws offloadkit::out_of_range naming the field, its value and its limit when a
/// field does not fit its width.
stash_key make_key(std::uint64_t vp, std::uint64_t layer, std::uint64_t microbatch);

/// Throws out_of_range as make_key() does when `k` has a field out of range.
void check_key(const stash_key& k);

/// Collision-free 32-bit code of a key whose fields are in range (checked).
std::uint32_t encode_key(const stash_key& k);

/// Unchecked packing, for device code and for keys already checked.
OFFLOADKIT_HD inline std::uint32_t pack_key(std::uint32_t vp, std::uint32_t layer,
                                            std::uint32_t microbatch) {
  return (vp << (key_limits::layer_bits + key_limits::microbatch_bits)) |
         (layer << key_limits::microbatch_bits) | microbatch;
}

/// Inverse of encode_key(); every 32-bit code decodes to exactly one key.
stash_key decode_key(std::uint32_t code) noexcept;

/// The seed's decimal encoding, vp * 1000000 + layer * 1000 + microbatch. It is injective only
/// while layer < 1000 and microbatch < 1000; beyond that distinct keys share a code.
std::uint64_t legacy_encode(const stash_key& k) noexcept;

/// The seed's decoding of a legacy code (microbatch = code % 1000, layer = code / 1000 % 1000,
/// vp = code / 1000000).
stash_key legacy_decode(std::uint64_t code) noexcept;

/// Whether legacy_encode() is injective for this key: decoding its code gives the key back.
bool legacy_representable(const stash_key& k) noexcept;

/// "(vp 1, layer 2, microbatch 3)"
std::string to_string(const stash_key& k);

}  // namespace offloadkit::stash
