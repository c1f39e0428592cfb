// The arena battery's entry point for `offloadkit check`: every case for every shipped
// implementation (reference and optimized), without the battery's templates.
#pragma once

#include <vector>

#include "offloadkit/check.hpp"

namespace offloadkit::arena {

/// The arena battery for the reference and the optimized offloader ("arena" feature cases).
std::vector<check_case> arena_checks();

}  // namespace offloadkit::arena
