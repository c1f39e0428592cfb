// The key codecs: the fixed-width codec is injective, the legacy codec round-trips below 1000
// and says truthfully where it does not.
#include "stash_properties.hpp"

namespace offloadkit::stash::testing {

key_codecs builtin_codecs() {
  key_codecs c;
  c.encode = &encode_key;
  c.decode = &decode_key;
  c.legacy_encode = &stash::legacy_encode;
  c.legacy_decode = &stash::legacy_decode;
  c.legacy_representable = &stash::legacy_representable;
  return c;
}

/// The fixed-width codec round-trips every key in range and distinct keys get distinct codes.
void prop_codec_injective(const key_codecs& codec) {
  const stash_key a{*rc::gen::inRange<std::uint32_t>(0, key_limits::vp),
                    *rc::gen::inRange<std::uint32_t>(0, key_limits::layer),
                    *rc::gen::inRange<std::uint32_t>(0, key_limits::microbatch)};
  const stash_key b{*rc::gen::inRange<std::uint32_t>(0, key_limits::vp),
                    *rc::gen::inRange<std::uint32_t>(0, key_limits::layer),
                    *rc::gen::inRange<std::uint32_t>(0, key_limits::microbatch)};
  RC_ASSERT(codec.decode(codec.encode(a)) == a);
  RC_ASSERT((codec.encode(a) == codec.encode(b)) == (a == b));
}

/// The legacy codec round-trips while layer and microbatch stay below 1000; this holds and is the
/// range third-party code using it must stay in.
void prop_legacy_in_range(const key_codecs& codec) {
  const stash_key a{*rc::gen::inRange<std::uint32_t>(0, key_limits::vp),
                    *rc::gen::inRange<std::uint32_t>(0, 1000),
                    *rc::gen::inRange<std::uint32_t>(0, 1000)};
  RC_ASSERT(codec.legacy_decode(codec.legacy_encode(a)) == a);
  RC_ASSERT(codec.legacy_representable(a));
}

/// What legacy_representable() claims agrees with the decode round trip over the whole key
/// range, layer or microbatch at 1000 and above included: a key it calls representable decodes
/// back to itself and one it does not call representable does not. The edges around 1000 and at
/// the key limits are the first cases of every run.
void prop_legacy_claim_agrees(const key_codecs& codec) {
  std::vector<key_fields> fixed;
  for (std::uint32_t vp : {0u, key_limits::vp - 1}) {
    for (std::uint32_t layer : {0u, 999u, 1000u, 1001u, key_limits::layer - 1}) {
      for (std::uint32_t mb : {0u, 999u, 1000u, key_limits::microbatch - 1})
        fixed.emplace_back(vp, layer, mb);
    }
  }
  auto field = [](std::uint32_t limit) {
    return rc::gen::weightedOneOf<std::uint32_t>({{1, rc::gen::inRange<std::uint32_t>(995, 1005)},
                                                  {2, rc::gen::inRange<std::uint32_t>(0, limit)}});
  };
  const key_fields f = *offloadkit::testing::fixed_then_random(
      "stash.legacy_claim.key", std::move(fixed),
      rc::gen::tuple(rc::gen::inRange<std::uint32_t>(0, key_limits::vp), field(key_limits::layer),
                     field(key_limits::microbatch)));
  const stash_key k{std::get<0>(f), std::get<1>(f), std::get<2>(f)};
  const bool round_trips = codec.legacy_decode(codec.legacy_encode(k)) == k;
  const bool claimed = codec.legacy_representable(k);
  if (claimed != round_trips) {
    RC_FAIL(detail::concat("legacy_representable", to_string(k), " says ", claimed,
                           " but the code ", codec.legacy_encode(k), " decodes to ",
                           to_string(codec.legacy_decode(codec.legacy_encode(k)))));
  }
}

/// "The legacy codec is collision-free over the key ranges" — false. Expected to FAIL; the
/// counterexample (a key whose code decodes to another key) is left in *found.
check_case legacy_collision_search(const std::shared_ptr<std::pair<stash_key, stash_key>>& found) {
  check_case c;
  c.feature = "stash";
  c.implementation = "legacy_codec";
  c.name = "legacy_codec_is_injective (expected to fail)";
  c.default_cases = 1000;
  c.property = [found](executor&) {
    const stash_key a{*rc::gen::inRange<std::uint32_t>(0, 4),
                      *rc::gen::inRange<std::uint32_t>(0, key_limits::layer),
                      *rc::gen::inRange<std::uint32_t>(0, key_limits::microbatch)};
    const stash_key b = legacy_decode(legacy_encode(a));
    if (b != a) *found = {a, b};
    RC_ASSERT(b == a);
  };
  return c;
}

}  // namespace offloadkit::stash::testing
