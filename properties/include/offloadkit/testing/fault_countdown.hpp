// The fault countdown, written once (abseil's exception-safety tester is the model): run an
// operation sequence with the Nth instrumented executor call failing, for N = 0, 1, 2, ... until
// a run in which no call failed, each run on a fresh implementation behind a fault adaptor over a
// resource ledger, and after each run check that nothing it held leaked and nothing was released
// twice (run_fault_countdown). The sequence itself checks what its feature promises after a
// failure (a retry works, nothing is lost); the countdown adds the part every feature shares.
// A property that keeps one implementation and one adaptor across its runs arms each run through
// run_armed, which catches the injected failure and says whether it fired.
#pragma once

#include <rapidcheck.h>

#include <cstddef>
#include <exception>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "offloadkit/adaptors.hpp"
#include "offloadkit/error.hpp"
#include "offloadkit/testing/resource_ledger.hpp"

namespace offloadkit::testing {

/// Every kind of call an offload implementation makes on the stream side, and its allocations:
/// what a countdown fails one at a time.
inline std::vector<op_kind> offload_fault_kinds() {
  return {op_kind::allocate_device,
          op_kind::allocate_pinned,
          op_kind::allocate_pageable,
          op_kind::copy,
          op_kind::fill,
          op_kind::launch,
          op_kind::host_function,
          op_kind::record,
          op_kind::wait};
}

/// One run of a countdown: the executor to build the implementation on (faults armed), the
/// adaptor (to disarm before a retry) and the call number that fails in this run.
struct countdown_run {
  executor& ex;
  fault_injection_adaptor& faults;
  std::size_t n;
};

/// An injected failure must reach the caller as one of offloadkit's typed errors for a failed
/// call (injected_fault, out_of_memory, or a runtime error that wraps them with context), never
/// as a logic error, a bare std::exception or nothing. Returns the message.
inline std::string expect_injected(const std::exception& e, const std::string& call) {
  if (dynamic_cast<const offloadkit::runtime_error*>(&e) == nullptr &&
      dynamic_cast<const offloadkit::bad_alloc*>(&e) == nullptr) {
    RC_FAIL(call +
            " failed on an injected fault with an error that is not offloadkit's "
            "runtime_error or bad_alloc: " +
            e.what());
  }
  return e.what();
}

/// What one armed run of a countdown saw.
struct armed_outcome {
  /// The operation threw an injected failure: injected_fault, or out_of_memory (any
  /// std::bad_alloc) for an allocation.
  bool threw = false;
  /// The adaptor failed a call.
  bool fired = false;
  /// Calls of the armed kinds the operation made (counted on after the fault fired).
  std::size_t calls = 0;
  /// The failure's message, where one was thrown.
  std::string what;
};

/// One run of a countdown on an adaptor that the property keeps across runs: arms `kinds` so that
/// call `n` fails, runs `op`, catches the injected failure it lets through, and disarms. Whether
/// the operation threw exactly when the fault fired is the caller's to check (with its own words).
template <class Op>
armed_outcome run_armed(fault_injection_adaptor& faults, const std::vector<op_kind>& kinds,
                        std::size_t n, Op&& op) {
  armed_outcome o;
  faults.arm(kinds, n);
  try {
    std::forward<Op>(op)();
  } catch (const injected_fault& e) {
    o.threw = true;
    o.what = e.what();
  } catch (const std::bad_alloc& e) {
    o.threw = true;
    o.what = e.what();
  }
  o.fired = faults.fired();
  o.calls = faults.armed_calls();
  faults.disarm();
  return o;
}

/// Runs `sequence(run)` for N = 0, 1, 2, ... (at most `limit` runs) with the Nth call of `kinds`
/// failing; stops after the first run in which nothing failed (every call has been failed once).
/// After each run, once the sequence has destroyed its implementation, the ledger must be empty:
/// no allocation, stream, event, reservation or mapping held, nothing released that was not held.
/// Returns the number of runs in which a call failed.
template <class Sequence>
std::size_t run_fault_countdown(executor& base, const std::vector<op_kind>& kinds,
                                Sequence&& sequence, std::size_t limit = 2048) {
  for (std::size_t n = 0; n < limit; ++n) {
    resource_ledger ledger(base);
    fault_injection_adaptor faults(ledger);
    faults.arm(kinds, n);
    sequence(countdown_run{faults, faults, n});
    const bool fired = faults.fired();
    faults.disarm();
    const std::string problems = ledger.problems();
    if (!problems.empty()) {
      RC_FAIL(offloadkit::detail::concat("with call ", n, " of the run failing",
                                         fired ? "" : " (none failed)",
                                         ", once the implementation is destroyed: ", problems));
    }
    if (!fired) return n;
  }
  RC_FAIL(offloadkit::detail::concat("the countdown still failed a call after ", limit,
                                     " runs: the sequence makes more calls than it should"));
  return limit;
}

}  // namespace offloadkit::testing
