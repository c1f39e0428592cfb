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
 *   OFFLOADKIT_FAULT_REPORT=PATH where the report goes (JSON, below); unset: no report
 *   OFFLOADKIT_FAULT_WINDOW=open|closed  whether counting starts at once (open, the default) or
 *                                waits for okit_interpose_set_window(1)
 * Every process started under these variables loads the library (a shell or `timeout` in front of
 * the program, the program, the workers it starts), but one counts: the first to make a counted
 * call (or to ask for the report), which claims the count by creating PATH.owner (PATH: the
 * report's) with its pid. The others pass every call through untouched and write no report; a
 * claim naming a process that has ended is taken over. Without OFFLOADKIT_FAULT_REPORT every
 * process counts for itself.
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
 * A program run under the interposer may steer it: these functions exist only while the library
 * is loaded, so look them up with dlsym(RTLD_DEFAULT, OKIT_INTERPOSE_SET_WINDOW_SYMBOL) and treat
 * NULL as "not interposed".
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OFFLOADKIT_INTERPOSE_CONTROL_H */
