// Deterministic cases before random ones: a generator that yields a fixed list of values (the
// boundaries a property must always reach) for the first cases of a run_check() run, then draws
// from a random generator. Boundaries are then hit on every run, not by chance.
#pragma once

#include <rapidcheck.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace offloadkit::testing {

namespace detail {
/// How many values the call site `tag` has drawn in the run_check() run in progress on this
/// thread; the count starts again at 0 with every run.
std::size_t& fixed_cases_drawn(const char* tag);
}  // namespace detail

/// Yields fixed[0], fixed[1], ... for the first fixed.size() cases of a run (each as drawn, never
/// shrunk), then values of `random`. `tag` names the call site (one draw per case); a replayed
/// or shrunk case keeps the value it was given, since rapidcheck replays recorded draws.
template <class T>
rc::Gen<T> fixed_then_random(const char* tag, std::vector<T> fixed, rc::Gen<T> random) {
  return rc::Gen<T>([tag, fixed = std::move(fixed), random = std::move(random)](
                        const rc::Random& r, int size) -> rc::Shrinkable<T> {
    std::size_t& drawn = detail::fixed_cases_drawn(tag);
    if (drawn < fixed.size()) return rc::shrinkable::just(fixed[drawn++]);
    return random(r, size);
  });
}

}  // namespace offloadkit::testing
