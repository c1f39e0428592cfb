/* offloadkit driver-call interposer: its environment and its control functions.
 *
 * liboffloadkit_interpose.so is loaded into a process with LD_PRELOAD. It counts, and can fail,
 * the allocation and mapping calls that the code in that process makes itself:
 *
 *   runtime  cudaMalloc, cudaFree, cudaHostAlloc, cudaMallocHost, cudaFreeHost
 *   driver   cuMemAlloc, cuMemFree, cuMemAllocHost, cuMemHostAlloc, cuMemFreeHost,
 *            cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap,
 *            cuMemUnmap, cuMemSetAccess
 *
 * whether they are reached as exported symbols, through dlsym() on the driver library, or through
 * cuGetProcAddress / cudaGetDriverEntryPoint (which is how a statically linked CUDA runtime reaches
 * every driver function). A driver call made inside a counted runtime call (cudaMalloc calling
 * cuMemAlloc) is not counted again.
 *
 * Every call it sees while the window is open is tallied per function, and every successful one
 * updates a ledger of what the process holds: physical allocation handles, address reservations,
 * mapped bytes, device allocations and pinned host bytes. The calls of the kinds selected by
 * OFFLOADKIT_FAULT_KINDS are numbered 0, 1, 2, ... in the order they happen; the one numbered
 * OFFLOADKIT_FAULT_CALL is not passed on and fails instead: acquiring calls (allocations,
 * reservations, maps, set-access) with out-of-memory (CUDA_ERROR_OUT_OF_MEMORY /
 * cudaErrorMemoryAllocation), releasing calls with CUDA_ERROR_UNKNOWN / cudaErrorUnknown.
 *
 * Environment (read once, when the library initializes):
 *   OFFLOADKIT_FAULT_CALL=N      fail call number N (0-based); unset: count only
 *   OFFLOADKIT_FAULT_KINDS=LIST  which calls are numbered and may fail, comma-separated:
 *                                `acquire` (the default), `release`, `all`, or function names
 *                                (cuMemMap, cudaHostAlloc, ...)
 *   OFFLOADKIT_FAULT_REPORT=PATH where the report goes (JSON, below); unset or empty: no report
 *   OFFLOADKIT_FAULT_WINDOW=open|closed  whether counting starts at once (open, the default) or
 *                                waits for okit_interpose_set_window(1)
 *   OFFLOADKIT_DELAY_MAX_US=N    arm delays at load (below), each 0..N microseconds, N at most
 *                                1000000; unset or 0: off (the default)
 *   OFFLOADKIT_DELAY_SEED=S      the seed of those delays (default 0)
 * Every process started under these variables loads the library (a shell or `timeout` in front of
 * the program, the program, the workers it starts), but one counts: the first to make a counted
 * call (or to ask for the report), which claims the count by creating PATH.owner (PATH: the
 * report's) with its pid. The others pass every call through untouched and write no report; a
 * claim naming a process that has ended is taken over. Without OFFLOADKIT_FAULT_REPORT every
 * process counts for itself.
 *
 * The counts and the ledger are kept whether or not a report is asked for: okit_interpose_counts()
 * reads them in the process (below).
 *
 * The report is written when a fault is injected (so that a crash right after it still names
 * the call), when okit_interpose_write_report() is called, and at exit. It is one JSON object:
 *   {"format": "offloadkit-interpose-report", "version": 1, "pid": ..., "reason":
 *    "injected"|"requested"|"exit", "armed_call": N|null, "kinds": "...", "window_open": bool,
 *    "counted_calls": calls numbered so far,
 *    "injected": [{"call": N, "function": "cuMemMap", "error": 2}],
 *    "functions": {"cuMemMap": {"calls": 3, "failed": 1, "errors": 0}, ...},
 *    "created":  {"physical_handles": ..., "reservations": ..., "mappings": ...,
 *                 "device_allocations": ..., "pinned_allocations": ...},
 *    "released": {same keys},
 *    "outstanding": {"physical_handles": ..., "reservations": ..., "mapped_bytes": ...,
 *                    "device_allocations": ..., "device_bytes": ..., "pinned_allocations": ...,
 *                    "pinned_bytes": ...},
 *    "untracked": {"releases": releases of something not created in the window,
 *                  "table_full": creations the ledger had no room for}}
 * "errors" counts calls the driver itself failed; "failed" the injected failures.
 *
 * Delays. While delays are armed, every asynchronous copy, fill and launch the code makes itself
 *
 *   driver   cuMemcpyAsync, cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync,
 *            cuMemsetD8Async, cuMemsetD32Async, cuLaunchKernel, cuLaunchKernelEx (and the _ptsz
 *            variant of each, which cuGetProcAddress hands out to per-thread default-stream code)
 *   runtime  cudaMemcpyAsync, cudaLaunchKernel (where bound by name)
 *
 * gets, on the same stream and right before it, a host function (cuLaunchHostFunc) that sleeps a
 * pseudo-random 0..max microseconds: the n-th delay since arming lasts a hash of (seed, n), so a
 * seed gives the same durations in the same order. That holds back the code's own work on its own
 * streams, as the executor's delay adaptor holds back streams the executor made, and widens the
 * race window of code that does not order the caller's stream after its own. Not delayed: work on
 * the legacy or per-thread default stream (stream 0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: a
 * delay there holds back every blocking stream), work on a stream that is capturing
 * (cuStreamIsCapturing: a user's graph stays as captured, and a replayed graph's copies are not
 * delayed), synchronous calls (cuMemcpy, cudaMemcpy, ...), calls made inside another delayed call
 * on the same thread, and runtime calls a statically linked runtime makes without binding them by
 * name (it reaches the driver's entry points, which are delayed).
 *
 * A program run under the interposer may steer and read it: these functions exist only while the
 * library is loaded, so look them up with dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_SET_WINDOW_SYMBOL)
 * (OKIT_INTERPOSE_COUNTS_SYMBOL, ...) and treat NULL as "not interposed". offloadkit's
 * properties read the counts for their steady-state rules and arm the delays in their race
 * properties (offloadkit/testing/driver_instruments.hpp); `offloadkit check` runs its property
 * children under the library, counting only, when it finds it.
 */
#ifndef OFFLOADKIT_INTERPOSE_CONTROL_H
#define OFFLOADKIT_INTERPOSE_CONTROL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OKIT_INTERPOSE_ENV_CALL "OFFLOADKIT_FAULT_CALL"
#define OKIT_INTERPOSE_ENV_KINDS "OFFLOADKIT_FAULT_KINDS"
#define OKIT_INTERPOSE_ENV_REPORT "OFFLOADKIT_FAULT_REPORT"
#define OKIT_INTERPOSE_ENV_WINDOW "OFFLOADKIT_FAULT_WINDOW"

#define OKIT_INTERPOSE_LIBRARY_NAME "liboffloadkit_interpose.so"
/* Appended to the report's path: the file in which the counted process claims the count. */
#define OKIT_INTERPOSE_CLAIM_SUFFIX ".owner"
#define OKIT_INTERPOSE_REPORT_FORMAT "offloadkit-interpose-report"

/* Opens (open != 0) or closes the counting window; returns whether it was open. Calls made while
 * it is closed are neither counted, numbered, failed nor entered in the ledger. */
typedef int (*okit_interpose_set_window_fn)(int open);
#define OKIT_INTERPOSE_SET_WINDOW_SYMBOL "okit_interpose_set_window"

/* Writes the report to OFFLOADKIT_FAULT_REPORT now (reason "requested"); returns 0, or an errno
 * value when it cannot (ENOENT: no report path was given). */
typedef int (*okit_interpose_write_report_fn)(void);
#define OKIT_INTERPOSE_WRITE_REPORT_SYMBOL "okit_interpose_write_report"

/* Faults injected so far in this process. */
typedef uint64_t (*okit_interpose_failures_fn)(void);
#define OKIT_INTERPOSE_FAILURES_SYMBOL "okit_interpose_failures"

#define OKIT_INTERPOSE_ENV_DELAY_SEED "OFFLOADKIT_DELAY_SEED"
#define OKIT_INTERPOSE_ENV_DELAY_MAX_US "OFFLOADKIT_DELAY_MAX_US"

/* What the process has made through the counted calls so far (while the window was open and this
 * process counts): the "created" and "outstanding" of the report, and the delays enqueued. The
 * caller sets struct_size to the size of the struct it knows; fields past it are not written, and
 * struct_size comes back as the size written. Fields are only ever appended. */
typedef struct okit_interpose_counts {
  uint64_t struct_size;
  /* Created so far. */
  uint64_t device_allocations;
  uint64_t pinned_allocations;
  uint64_t physical_handles;
  uint64_t reservations;
  uint64_t mappings;
  /* Held now: the ledger's outstanding entries. */
  int64_t outstanding_device_allocations;
  int64_t outstanding_device_bytes;
  int64_t outstanding_pinned_allocations;
  int64_t outstanding_pinned_bytes;
  int64_t outstanding_physical_handles;
  int64_t outstanding_reservations;
  int64_t outstanding_mapped_bytes;
  /* Delays enqueued so far (host functions that sleep a nonzero time). */
  uint64_t delays;
  /* 1 when this process counts (the window is open and the count is this process's). */
  uint32_t counting;
  uint32_t reserved;
} okit_interpose_counts_t;

/* Fills `out` (its struct_size set by the caller); returns 0, or EINVAL for a null `out` or a
 * struct_size below 8. */
typedef int (*okit_interpose_counts_fn)(okit_interpose_counts_t* out);
#define OKIT_INTERPOSE_COUNTS_SYMBOL "okit_interpose_counts"

/* Arms delays with `seed`, each 0..max_us microseconds (above 1000000 taken as 1000000), or turns
 * them off with max_us = 0; the sequence of durations starts again. Returns the previous max_us. */
typedef uint32_t (*okit_interpose_set_delays_fn)(uint64_t seed, uint32_t max_us);
#define OKIT_INTERPOSE_SET_DELAYS_SYMBOL "okit_interpose_set_delays"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OFFLOADKIT_INTERPOSE_CONTROL_H */
