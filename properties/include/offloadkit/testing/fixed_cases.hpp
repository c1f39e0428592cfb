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
/// The index of the draw at call site `tag` whose random source is `r`, in the run_check() run in
/// progress on this thread: 0, 1, 2, ... in the order first seen, and the same index each time the
/// same draw is made again (rapidcheck re-runs a case from its seed to describe it). Indices start
/// again at 0 with every run.
std::size_t fixed_case_index(const char* tag, const rc::Random& r);
}  // namespace detail

/// Yields fixed[0], fixed[1], ... for the first fixed.size() cases of a run (each as drawn, never
/// shrunk), then values of `random`. `tag` names the call site (one draw per case). A case keeps
/// the value it was given when it is shrunk (rapidcheck replays recorded draws) and when it is run
/// again from its random source to describe a failure (the index is keyed by that source).
template <class T>
rc::Gen<T> fixed_then_random(const char* tag, std::vector<T> fixed, rc::Gen<T> random) {
  return rc::Gen<T>([tag, fixed = std::move(fixed), random = std::move(random)](
                        const rc::Random& r, int size) -> rc::Shrinkable<T> {
    const std::size_t index = detail::fixed_case_index(tag, r);
    if (index < fixed.size()) return rc::shrinkable::just(fixed[index]);
    return random(r, size);
  });
}

}  // namespace offloadkit::testing
