// The driver-call interposer's instruments as a property sees them (offloadkit/interpose/control.h
// is the interface): the counts of what the process created through the CUDA driver and runtime,
// for the steady-state rules, and the delays on the code's own asynchronous work, for the race
// properties. Both reach code that calls CUDA itself (a plugin, a Python implementation), which the
// executor's adaptors never see. Where the process does not run under the interposer the counts
// are absent and nothing is armed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace offloadkit::testing {

/// What the process created through the driver and runtime calls the interposer counts, and what
/// it holds now.
struct driver_counts {
  std::uint64_t device_allocations = 0;
  std::uint64_t pinned_allocations = 0;
  std::uint64_t physical_handles = 0;
  std::uint64_t reservations = 0;
  std::uint64_t mappings = 0;
  std::int64_t outstanding_device_allocations = 0;
  std::int64_t outstanding_pinned_allocations = 0;
  std::int64_t outstanding_physical_handles = 0;
  std::int64_t outstanding_reservations = 0;
  std::uint64_t delays = 0;  ///< delays enqueued so far
};

/// The counts so far; nullopt where the process does not run under the interposer (or another
/// process of its group holds the count).
[[nodiscard]] std::optional<driver_counts> read_driver_counts();

/// The kinds of resource a steady state may be required not to create, as a bit set.
enum driver_resource : unsigned {
  driver_device_allocations = 1U << 0,
  driver_pinned_allocations = 1U << 1,
  driver_physical_handles = 1U << 2,
  driver_reservations = 1U << 3,
  driver_all_resources = (1U << 4) - 1,
};

/// Empty when `now` created nothing of the kinds in `which` beyond `before`; otherwise a sentence
/// naming what grew and by how much, saying that the driver's count (the interposer's) found it.
[[nodiscard]] std::string driver_growth(const driver_counts& before, const driver_counts& now,
                                        unsigned which = driver_all_resources);

/// Arms the interposer's delays for its scope, with a seed and a maximum drawn by rapidcheck (so
/// a counterexample names them and shrinking lowers the maximum toward 0), and turns them off at
/// its end. Draws nothing and arms nothing where the interposer is not loaded. Construct it inside
/// a property only.
class driver_delays {
 public:
  driver_delays();
  ~driver_delays();
  driver_delays(const driver_delays&) = delete;
  driver_delays& operator=(const driver_delays&) = delete;

  /// Whether delays are armed (the interposer is loaded and the drawn maximum is not 0).
  [[nodiscard]] bool armed() const noexcept { return max_us_ != 0; }
  [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
  [[nodiscard]] std::uint32_t max_us() const noexcept { return max_us_; }

  /// Turns the drawn delays off, or on again (each time with the next seed of a sequence that the
  /// drawn seed starts, so that calls are not all delayed alike).
  void set_active(bool on) noexcept;

  /// Runs `f` with the delays on and turns them off when it returns or throws: the work `f`
  /// issues (a call into the implementation) is held back, and the property's own reads and
  /// writes outside it are not, so that they cannot mask a race by being late themselves.
  template <class F>
  decltype(auto) during(F&& f) {
    struct off {
      driver_delays* d;
      ~off() { d->set_active(false); }
    } guard{this};
    set_active(true);
    return std::forward<F>(f)();
  }

 private:
  void* set_ = nullptr;  ///< okit_interpose_set_delays, or null
  std::uint64_t seed_ = 0;
  std::uint32_t max_us_ = 0;
  std::uint64_t activations_ = 0;
};

}  // namespace offloadkit::testing
