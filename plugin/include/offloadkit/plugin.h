/* offloadkit plugin C ABI, version 1 (1.1: optional batched stash and restore, region swap; 1.2:
 * optional close, a destroy that reports a failure, in every feature table; 1.3: a stash's key
 * limits and its overflow-exception policy, and the plugin's optional release_cached_memory, for
 * plugins that run on a framework with caching allocators; 1.4: an activation offloader's offload
 * decision and storage dedup policies, OKIT_ACTIVATION_CAP_OPAQUE_PREDICATE and
 * OKIT_ACTIVATION_CAP_DEDUP_BY_STORAGE; 1.5: a stash's single-tier placement and first-use config
 * validation, OKIT_STASH_CAP_DEVICE_TIER_ONLY, OKIT_STASH_CAP_PINNED_TIER_ONLY and
 * OKIT_STASH_CAP_CONFIG_AT_FIRST_USE).
 *
 * A plugin is a shared library that implements one or more offload features (paged stash,
 * graph-stable region, coalesced arena, activation offload) behind plain C function tables, so
 * that offloadkit's property batteries check it exactly as they check offloadkit's own
 * implementations: `offloadkit check --plugin lib.so`.
 *
 * The library exports one function, OKIT_PLUGIN_ENTRY_SYMBOL, that returns a static okit_plugin
 * describing which features it provides. offloadkit hands every object it creates an okit_executor:
 * the memory, stream, event, kernel-launch, virtual-memory and graph operations of the executor the
 * battery runs on. A plugin that does all its work through that table runs on both of offloadkit's
 * executors (the GPU and the CPU-only host executor) and its allocations can be counted and failed
 * by offloadkit's fault-injection adaptors; it says so with OKIT_CAP_HOST_EXECUTOR and
 * OKIT_CAP_EXECUTOR_ALLOCATIONS. A plugin that calls CUDA itself runs on the cuda executor only,
 * where okit_stream.native is a cudaStream_t and okit_event.native a cudaEvent_t.
 *
 * Conventions:
 *   - Plain C types only. Sizes are size_t, devices int32_t, flags uint64_t bit sets.
 *   - Every fallible call returns an okit_status and, on failure, writes a message into the
 *     caller's okit_error (use okit_set_error). No C++ exception may cross the boundary.
 *   - The error argument comes first after `self`; the stream comes last.
 *   - Callbacks (okit_callback, okit_capture) pass ownership of their context: the receiver calls
 *     `drop` exactly once (after its last `call`), unless a call documents otherwise.
 *   - Tables carry their own struct_size, so that a newer offloadkit can read an older plugin and
 *     the reverse; offloadkit refuses a table smaller than the version-1 size. Minor versions only
 *     append optional entries (OKIT_*_HAS tells whether a table has one), so OKIT_ABI_VERSION
 *     stays 1.
 *   - Since 1.2 every feature table has an optional close(self, err): it releases everything the
 *     object holds and frees it, like destroy, but returns a failure of that teardown (a double
 *     release, a failed cuMemUnmap) instead of keeping it silent. After close returns, OK or not,
 *     the object is gone and destroy is not called. offloadkit calls close where the table has it
 *     and destroy otherwise, and reports a failed close as a failure of the case that destroyed
 *     the object.
 *   - One thread drives one object at a time; distinct objects may be driven from distinct threads.
 */
#ifndef OFFLOADKIT_PLUGIN_H
#define OFFLOADKIT_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OKIT_ABI_VERSION 1u

#if defined(_WIN32)
#define OKIT_PLUGIN_EXPORT __declspec(dllexport)
#else
#define OKIT_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* The one symbol a plugin exports. */
#define OKIT_PLUGIN_ENTRY_SYMBOL "okit_plugin_entry"

/* ---- errors ------------------------------------------------------------------------------- */

typedef int32_t okit_status;

enum okit_status_code {
  OKIT_OK = 0,
  OKIT_ERR_OUT_OF_RANGE = 1, /* an argument outside its valid range (message names both) */
  OKIT_ERR_STATE = 2,        /* the call is not valid in the object's current state */
  OKIT_ERR_LOGIC = 3,        /* another precondition the caller broke */
  OKIT_ERR_OUT_OF_MEMORY = 4,
  OKIT_ERR_CUDA = 5,       /* a CUDA runtime or driver call failed */
  OKIT_ERR_RUNTIME = 6,    /* another platform failure */
  OKIT_ERR_INJECTED = 7,   /* a fault planted by offloadkit's fault injection, passed through */
  OKIT_ERR_UNSUPPORTED = 8 /* the implementation does not provide this operation */
};

#define OKIT_ERROR_MESSAGE_BYTES 1024

typedef struct okit_error {
  okit_status code;
  int32_t cuda_code; /* for OKIT_ERR_CUDA: the cudaError_t / CUresult, 0 otherwise */
  char message[OKIT_ERROR_MESSAGE_BYTES];
} okit_error;

/* Writes `code` and `message` (truncated to fit) into `err` when it is not NULL; returns code. */
static inline okit_status okit_set_error(okit_error* err, okit_status code, const char* message) {
  if (err != NULL) {
    size_t i = 0;
    err->code = code;
    err->cuda_code = 0;
    if (message != NULL) {
      for (; message[i] != '\0' && i + 1 < OKIT_ERROR_MESSAGE_BYTES; ++i)
        err->message[i] = message[i];
    }
    err->message[i] = '\0';
  }
  return code;
}

/* ---- handles ------------------------------------------------------------------------------ */

/* Non-owning handles; `native` is cudaStream_t / cudaEvent_t / cudaGraphExec_t on the cuda
 * executor and opaque on the host executor. */
typedef struct okit_stream {
  void* native;
  int32_t device;
} okit_stream;

typedef struct okit_event {
  void* native;
  int32_t device;
} okit_event;

typedef struct okit_graph {
  void* native;
} okit_graph;

typedef struct okit_physical {
  uint64_t value;
  int32_t device;
  size_t bytes;
} okit_physical;

/* A callable with an owned context: call(ctx) any number of times the contract allows, then
 * drop(ctx) exactly once. Either pointer may be NULL (nothing to call / nothing to free). */
typedef struct okit_callback {
  void (*call)(void* ctx);
  void (*drop)(void* ctx);
  void* ctx;
} okit_callback;

/* ---- the executor offloadkit lends to every object ---------------------------------------- */

enum okit_backend { OKIT_BACKEND_HOST = 0, OKIT_BACKEND_CUDA = 1 };
enum okit_memory_kind { OKIT_MEMORY_DEVICE = 0, OKIT_MEMORY_PINNED = 1, OKIT_MEMORY_PAGEABLE = 2 };
enum okit_pointer_kind {
  OKIT_POINTER_DEVICE = 0,
  OKIT_POINTER_PINNED = 1,
  OKIT_POINTER_PAGEABLE = 2,
  OKIT_POINTER_MANAGED = 3
};

/* A body run over the index space [0, n), as offloadkit's launch() builds it: the same functor as
 * a CUDA kernel (device_launch, cuda executor) or on host threads (host_run, host executor).
 * The executor takes ownership of `owner`: it calls drop_owner(owner) exactly once, when no queued
 * or captured work can run the body any more (also when the launch fails). */
typedef struct okit_launch {
  size_t n;
  uint32_t block;
  const void* body;
  void (*device_launch)(const void* body, size_t n, unsigned block, void* cuda_stream);
  void (*host_run)(const void* body, size_t begin, size_t end);
  void* owner;
  void (*drop_owner)(void* owner);
  const char* name;
} okit_launch;

typedef struct okit_executor {
  uint32_t struct_size;
  int32_t backend; /* okit_backend */
  int32_t device_count;
  const char* name; /* the executor's name, for messages */
  void* self;

  okit_status (*allocate)(void* self, okit_error* err, int32_t kind, size_t bytes, int32_t device,
                          void** out);
  void (*deallocate)(void* self, int32_t kind, void* p, size_t bytes);
  okit_status (*classify)(void* self, okit_error* err, const void* p, int32_t* kind,
                          int32_t* device);
  okit_status (*extent_of)(void* self, okit_error* err, const void* p, const void** base,
                           size_t* bytes);
  okit_status (*device_memory)(void* self, okit_error* err, int32_t device, size_t* free_bytes,
                               size_t* total_bytes);

  okit_status (*create_stream)(void* self, okit_error* err, int32_t device, okit_stream* out);
  void (*destroy_stream)(void* self, okit_stream s);
  okit_status (*create_event)(void* self, okit_error* err, int32_t device, okit_event* out);
  void (*destroy_event)(void* self, okit_event e);

  okit_status (*copy)(void* self, okit_error* err, void* dst, const void* src, size_t bytes,
                      okit_stream s);
  okit_status (*fill)(void* self, okit_error* err, void* dst, int32_t value, size_t bytes,
                      okit_stream s);
  /* Takes ownership of r->owner (see okit_launch). */
  okit_status (*launch)(void* self, okit_error* err, const okit_launch* r, okit_stream s);
  /* Runs fn.call(fn.ctx) once on a host thread in stream order, then fn.drop(fn.ctx). Takes
   * ownership of fn also when it fails. fn must not call back into stream operations. */
  okit_status (*host_function)(void* self, okit_error* err, okit_callback fn, okit_stream s);
  okit_status (*record)(void* self, okit_error* err, okit_event e, okit_stream s);
  okit_status (*wait)(void* self, okit_error* err, okit_event e, okit_stream s);
  okit_status (*synchronize_stream)(void* self, okit_error* err, okit_stream s);
  okit_status (*synchronize_event)(void* self, okit_error* err, okit_event e);
  okit_status (*ready)(void* self, okit_error* err, okit_event e, int32_t* is_ready);

  okit_status (*granularity)(void* self, okit_error* err, int32_t device, size_t* out);
  okit_status (*reserve)(void* self, okit_error* err, size_t bytes, int32_t device, void** out);
  void (*unreserve)(void* self, void* va, size_t bytes);
  okit_status (*create_physical)(void* self, okit_error* err, size_t bytes, int32_t device,
                                 okit_physical* out);
  void (*release_physical)(void* self, okit_physical h);
  okit_status (*map)(void* self, okit_error* err, void* va, size_t bytes, okit_physical h);
  okit_status (*unmap)(void* self, okit_error* err, void* va, size_t bytes);
  okit_status (*set_access)(void* self, okit_error* err, void* va, size_t bytes, int32_t device);

  okit_status (*begin_capture)(void* self, okit_error* err, okit_stream s);
  okit_status (*end_capture)(void* self, okit_error* err, okit_graph* out, okit_stream s);
  okit_status (*replay)(void* self, okit_error* err, okit_graph g, okit_stream s);
  void (*destroy_graph)(void* self, okit_graph g);

  /* ---- appended after the version-1 table: present when OKIT_EXECUTOR_HAS(table, entry) ---- */

  /* Managed memory: one address that the host and every device reach, its pages moved between
   * host and device memory on touch or by prefetch. Owned by `device` (classify reports it as
   * OKIT_POINTER_MANAGED). On the host executor it is ordinary host memory. */
  okit_status (*allocate_managed)(void* self, okit_error* err, size_t bytes, int32_t device,
                                  void** out);
  void (*deallocate_managed)(void* self, void* p, size_t bytes);
  /* Moves the pages of [p, p + bytes), inside one managed allocation, to `device`, or to host
   * memory for device = OKIT_HOST_LOCATION, in stream order; the contents never change. */
  okit_status (*prefetch)(void* self, okit_error* err, const void* p, size_t bytes, int32_t device,
                          okit_stream s);
} okit_executor;

/* The device id that names host memory as a prefetch destination. */
#define OKIT_HOST_LOCATION (-1)

/* The size of a version-1 executor table, the smallest one offloadkit lends or accepts. */
#define OKIT_EXECUTOR_V1_SIZE offsetof(okit_executor, allocate_managed)

/* Whether `table` (an okit_executor*) has `entry`, an entry appended after version 1: its
 * struct_size reaches past it and it is not NULL. An older offloadkit lends a shorter table. */
#define OKIT_EXECUTOR_HAS(table, entry)                                               \
  ((table)->struct_size >= offsetof(okit_executor, entry) + sizeof((table)->entry) && \
   (table)->entry != NULL)

/* ---- capabilities ------------------------------------------------------------------------- */

/* Common to every feature. */
#define OKIT_CAP_CUDA_EXECUTOR (1ull << 0) /* runs on the cuda executor */
/* runs on the host executor (uses only okit_executor) */
#define OKIT_CAP_HOST_EXECUTOR (1ull << 1)
#define OKIT_CAP_EXECUTOR_ALLOCATIONS \
  (1ull << 2) /* allocates through okit_executor: faults reach it */

/* Paged stash. */
#define OKIT_STASH_CAP_CAPTURABLE \
  (1ull << 8) /* stash/restore issue no host sync: graph-capturable */
#define OKIT_STASH_CAP_PAGE_IDS \
  (1ull << 9) /* snapshot reports page ids of free lists and entries */
/* The stash's profile, where it differs from the default (a per-key status word, keys split
 * across the tiers device first, restore of an empty key recorded as restore_empty). Read by
 * offloadkit 1.2 and later. */
/* One sticky flag: after the first failure every stash stores nothing and every restore gives
 * back nothing (0 rows) until reset or clear_status; the status carries only the code. */
#define OKIT_STASH_CAP_STICKY_FLAG (1ull << 10)
/* A key goes whole into one tier: the device if it has room, else the pinned tier. */
#define OKIT_STASH_CAP_WHOLE_KEY_PER_TIER (1ull << 11)
/* restore of a key that holds nothing returns OKIT_ERR_STATE and changes nothing. */
#define OKIT_STASH_CAP_UNKNOWN_RESTORE_ERROR (1ull << 12)
/* Read by offloadkit 1.3 and later. stash of a key that does not fit returns
 * OKIT_ERR_OUT_OF_MEMORY (the message names the key, the pages it needs and the free pages),
 * stores nothing and leaves the status word as it was; later calls go on. Other failures (a key
 * stashed twice, rows past max_rows) go to the status word. Not together with
 * OKIT_STASH_CAP_STICKY_FLAG (offloadkit refuses a table with both). */
#define OKIT_STASH_CAP_OVERFLOW_EXCEPTION (1ull << 13)
/* Read by offloadkit 1.5 and later. The placement of a stash with one tier: every key goes whole
 * into it, and the other tier does not exist. A config that gives the other tier pages is a bad
 * config: OKIT_ERR_OUT_OF_RANGE naming the field and its valid range [0, 0], from create or, with
 * OKIT_STASH_CAP_CONFIG_AT_FIRST_USE, from the first stash or restore. At most one of
 * OKIT_STASH_CAP_WHOLE_KEY_PER_TIER, OKIT_STASH_CAP_DEVICE_TIER_ONLY and
 * OKIT_STASH_CAP_PINNED_TIER_ONLY (offloadkit refuses a table with two). */
#define OKIT_STASH_CAP_DEVICE_TIER_ONLY (1ull << 14) /* device pages only (pinned_pages 0) */
#define OKIT_STASH_CAP_PINNED_TIER_ONLY (1ull << 15) /* pinned pages only (device_pages 0) */
/* Read by offloadkit 1.5 and later. create accepts any config; a bad one is reported by the first
 * stash or restore (batched or not) and every later one, as OKIT_ERR_OUT_OF_RANGE naming the field
 * and its valid range. Such a call writes nothing (not the destination, not the row count), and
 * destroy or close still tears the object down. Not set: create refuses a bad config. */
#define OKIT_STASH_CAP_CONFIG_AT_FIRST_USE (1ull << 16)

/* Region. */
#define OKIT_REGION_CAP_ADDRESS_STABLE (1ull << 8) /* data() never changes */
#define OKIT_REGION_CAP_RELEASES_MEMORY \
  (1ull << 9)                                     /* pause gives device memory back to the driver */
#define OKIT_REGION_CAP_MULTI_DEVICE (1ull << 10) /* a region may live on any device */
/* One managed (unified-memory) allocation: a paused region stays readable. */
#define OKIT_REGION_CAP_MANAGED_MEMORY (1ull << 11)
/* The region's profile, where it differs from the default (both pause modes, stream-ordered
 * pause and resume, graphs of its own). Read by offloadkit 1.2 and later. */
/* The pause mode is fixed when the region is created: okit_region_config.pause_mode says which,
 * and a pause in the other mode returns OKIT_ERR_UNSUPPORTED and changes nothing. */
#define OKIT_REGION_CAP_FIXED_PAUSE_MODE (1ull << 12)
/* pause and resume wait for the work queued on the stream given (or the whole device) and return
 * only once their own work is finished. */
#define OKIT_REGION_CAP_SYNCHRONOUS (1ull << 13)
/* No graphs of its own: register_graph, replay and unregister_graph may be NULL, and offloadkit
 * captures the graphs through the executor (re-capturing them after a resume that moved it). */
#define OKIT_REGION_CAP_NO_GRAPHS (1ull << 14)

/* Arena. */
#define OKIT_ARENA_CAP_ASYNCHRONOUS \
  (1ull << 8) /* offload/reload may return before the copies end */
#define OKIT_ARENA_CAP_PINNED_STEADY_STATE (1ull << 9) /* a repeated shape allocates nothing */
#define OKIT_ARENA_CAP_SINGLE_HOST_BUFFER (1ull << 10) /* never more than one host buffer */

/* Activation. */
/* Set: unpack returns a tensor on the device it was packed from (origin), whatever device the
 * unpack stream belongs to. Not set: on the device of the unpack stream (current). */
#define OKIT_ACTIVATION_CAP_ORIGIN_DEVICE (1ull << 8)  /* tensors of several devices return home */
#define OKIT_ACTIVATION_CAP_PREFETCH_BOUND (1ull << 9) /* honours prefetch_bytes */
#define OKIT_ACTIVATION_CAP_PENDING_BOUND (1ull << 10) /* honours max_pending_bytes */
#define OKIT_ACTIVATION_CAP_BACKWARD_PREFETCH \
  (1ull << 11) /* prefetches ahead of unpack, in backward order */
/* The offloader's profile, where it differs from the default (tensors of at least keep_threshold
 * bytes offloaded, smaller ones kept; every offloaded pack copied on its own). Read by offloadkit
 * 1.4 and later. */
/* The offloader decides per tensor by a rule of its own; keep_threshold means nothing. It reports
 * each decision in stats: a kept tensor adds one to `kept` and nothing to `offloaded_bytes`, an
 * offloaded one its bytes to `offloaded_bytes` and nothing to `kept`. A kept tensor is not copied:
 * its source stays with the offloader until unpack returns it in its own buffer. */
#define OKIT_ACTIVATION_CAP_OPAQUE_PREDICATE (1ull << 12)
/* A pack of a tensor with the data pointer, bytes and device of an earlier pack whose source the
 * offloader still holds (not handed back, not unpacked) is the same storage with the same
 * contents: it is not copied again (offloaded_bytes grows by nothing), both unpack to those
 * contents, and each pack's source is released exactly once. */
#define OKIT_ACTIVATION_CAP_DEDUP_BY_STORAGE (1ull << 13)

/* ---- paged stash -------------------------------------------------------------------------- */

typedef struct okit_stash_config {
  size_t row_bytes;
  size_t rows_per_page;
  size_t max_rows;
  size_t device_pages;
  size_t pinned_pages;
  size_t max_keys;
  int32_t device;
} okit_stash_config;

typedef struct okit_stash_key {
  uint32_t vp;
  uint32_t layer;
  uint32_t microbatch;
} okit_stash_key;

enum okit_stash_status_code {
  OKIT_STASH_OK = 0,
  OKIT_STASH_OVERFLOW = 1,
  OKIT_STASH_DOUBLE_STASH = 2,
  OKIT_STASH_RESTORE_EMPTY = 3,
  OKIT_STASH_ROWS_TOO_LARGE = 4
};

/* The first failure since the last clear (the sticky status word, decoded). */
typedef struct okit_stash_status {
  uint32_t code; /* okit_stash_status_code */
  okit_stash_key key;
  uint64_t rows;
  uint64_t needed;
  uint64_t free_device;
  uint64_t free_pinned;
} okit_stash_status;

typedef struct okit_stash_entry {
  okit_stash_key key;
  uint64_t rows;
  uint64_t device_pages;
  uint64_t pinned_pages;
  const uint32_t* page_ids; /* device tier 0..D-1, pinned tier D..D+P-1; NULL without page ids */
  size_t page_id_count;
} okit_stash_entry;

/* Filled by snapshot(); every array is owned by the stash and valid until its next call. */
typedef struct okit_stash_snapshot {
  okit_stash_status status;
  uint64_t free_device;
  uint64_t free_pinned;
  const uint32_t* free_ids;
  size_t free_id_count;
  const okit_stash_entry* entries;
  size_t entry_count;
} okit_stash_snapshot;

/* One key of a batch: the arguments of stash() / restore(). */
typedef struct okit_stash_item {
  okit_stash_key key;
  const void* src;
  const uint64_t* rows;
} okit_stash_item;

typedef struct okit_restore_item {
  okit_stash_key key;
  void* dst;
  uint64_t* rows_out; /* may be NULL */
} okit_restore_item;

/* Whether a stash table has `entry` (set, and inside the table's struct_size). */
#define OKIT_STASH_HAS(table, entry)                                                      \
  ((table)->struct_size >= offsetof(okit_stash_vtable, entry) + sizeof((table)->entry) && \
   (table)->entry != NULL)

typedef struct okit_stash_vtable {
  uint32_t struct_size;
  uint64_t capabilities;
  const char* implementation; /* shown in results, e.g. "triton-paged" */

  /* `ex` outlives the object. `s` may be used for initial device work. */
  okit_status (*create)(okit_error* err, const okit_executor* ex, const okit_stash_config* cfg,
                        void** out, okit_stream s);
  void (*destroy)(void* self);
  /* Stashes the first *rows rows (device memory, read in stream order) of src under key. */
  okit_status (*stash)(void* self, okit_error* err, okit_stash_key key, const void* src,
                       const uint64_t* rows, okit_stream s);
  /* Copies the key's rows into dst, writes the count to *rows_out (device, may be NULL). */
  okit_status (*restore)(void* self, okit_error* err, okit_stash_key key, void* dst,
                         uint64_t* rows_out, okit_stream s);
  okit_status (*reset)(void* self, okit_error* err, okit_stream s);
  okit_status (*clear_status)(void* self, okit_error* err, okit_stream s);
  /* Synchronizes s and describes free pages, live entries and the status word. */
  okit_status (*snapshot)(void* self, okit_error* err, okit_stash_snapshot* out, okit_stream s);

  /* Appended in version 1.1; optional (NULL, or a table built before them: offloadkit calls
   * stash() / restore() per item instead). The `count` items have distinct keys (offloadkit
   * checks) and count > 0; the result must equal stash() / restore() of each item in order:
   * entries, pages, status word, bytes. A batch is where a paged implementation issues a whole MoE
   * layer at once. */
  okit_status (*stash_batch)(void* self, okit_error* err, const okit_stash_item* items,
                             size_t count, okit_stream s);
  okit_status (*restore_batch)(void* self, okit_error* err, const okit_restore_item* items,
                               size_t count, okit_stream s);

  /* Appended in version 1.2; optional (NULL, or a table built before it: offloadkit calls
   * destroy). Tears the object down as destroy does and reports a failure of it; the object is
   * gone when it returns, whatever it returns. */
  okit_status (*close)(void* self, okit_error* err);

  /* Appended in version 1.3; read where struct_size reaches them (OKIT_STASH_HAS_KEY_LIMITS). The
   * key space: each field of a key is below its limit, and stash / restore of another key return
   * OKIT_ERR_OUT_OF_RANGE naming the field, its value and the limit (a library whose keys are
   * decimal schedule positions declares 1000 for each). 0 in a field: offloadkit's fixed-width
   * codec's limit (vp < 256, layer and microbatch < 4096). */
  uint32_t vp_limit;
  uint32_t layer_limit;
  uint32_t microbatch_limit;
} okit_stash_vtable;

/* Whether a stash table carries the key limits (1.3). */
#define OKIT_STASH_HAS_KEY_LIMITS(table) \
  ((table)->struct_size >=               \
   offsetof(okit_stash_vtable, microbatch_limit) + sizeof((table)->microbatch_limit))

/* The size of a version-1.0 stash table (without the batch entries): the smallest accepted. */
#define OKIT_STASH_V1_SIZE offsetof(okit_stash_vtable, stash_batch)

/* ---- graph-stable offload region ---------------------------------------------------------- */

typedef struct okit_region_config {
  size_t bytes;
  int32_t device;
  size_t chunk_bytes; /* 0: the implementation's default */
  /* Appended in 1.2. For a region that declares OKIT_REGION_CAP_FIXED_PAUSE_MODE: the mode of
   * every pause of this region (okit_pause_mode), or -1 where the caller did not say (pick one).
   * Only an offloadkit that reads OKIT_REGION_CAP_FIXED_PAUSE_MODE (1.2 or later) fills it in, so
   * a plugin reads it only when it declares that bit. */
  int32_t pause_mode;
} okit_region_config;

enum okit_region_state { OKIT_REGION_ACTIVE = 0, OKIT_REGION_PAUSED = 1, OKIT_REGION_PARTIAL = 2 };
enum okit_pause_mode { OKIT_PAUSE_PRESERVE = 0, OKIT_PAUSE_DISCARD = 1 };

/* Work of a graph that uses the region: issue it on s (being captured) from base; no sync. The
 * region owns ctx and calls drop(ctx) when the graph is unregistered or the region destroyed
 * (also when register_graph fails). */
typedef struct okit_capture {
  okit_status (*call)(void* ctx, okit_error* err, void* base, okit_stream s);
  void (*drop)(void* ctx);
  void* ctx;
} okit_capture;

typedef struct okit_region_info {
  void* data;
  size_t size;
  int32_t device;
  int32_t state; /* okit_region_state */
  size_t footprint;
  size_t captures;
} okit_region_info;

typedef struct okit_region_vtable {
  uint32_t struct_size;
  uint64_t capabilities;
  const char* implementation;

  okit_status (*create)(okit_error* err, const okit_executor* ex, const okit_region_config* cfg,
                        void** out);
  void (*destroy)(void* self);
  void (*info)(void* self, okit_region_info* out);
  okit_status (*pause)(void* self, okit_error* err, int32_t mode, okit_stream s);
  okit_status (*resume)(void* self, okit_error* err, okit_stream s);
  okit_status (*register_graph)(void* self, okit_error* err, okit_capture fn, uint64_t* id,
                                okit_stream s);
  okit_status (*replay)(void* self, okit_error* err, uint64_t id, okit_stream s);
  void (*unregister_graph)(void* self, uint64_t id);

  /* Appended in version 1.1; optional (NULL, or a table built before it: offloadkit pauses, then
   * resumes). Pauses self with `mode` while resuming `in`, another object created by this same
   * table on the same device; work issued to s afterwards sees in's contents. Parts already done
   * are skipped (self paused, or `in` active), so a failed swap can be retried. */
  okit_status (*swap)(void* self, okit_error* err, void* in, int32_t mode, okit_stream s);

  /* Appended in version 1.2; optional (NULL, or a table built before it: offloadkit calls
   * destroy). Tears the object down as destroy does and reports a failure of it; the object is
   * gone when it returns, whatever it returns. */
  okit_status (*close)(void* self, okit_error* err);
} okit_region_vtable;

/* The size of a version-1.0 region table (without swap): the smallest accepted. */
#define OKIT_REGION_V1_SIZE offsetof(okit_region_vtable, swap)

/* Whether a region table has `entry` (set, and inside the table's struct_size). */
#define OKIT_REGION_HAS(table, entry)                                                      \
  ((table)->struct_size >= offsetof(okit_region_vtable, entry) + sizeof((table)->entry) && \
   (table)->entry != NULL)

/* ---- coalesced arena ---------------------------------------------------------------------- */

typedef struct okit_tensor {
  void* data;
  size_t bytes;
} okit_tensor;

typedef struct okit_arena_info {
  int32_t released;
  int32_t holds_copy;
  size_t host_bytes;
} okit_arena_info;

typedef struct okit_arena_vtable {
  uint32_t struct_size;
  uint64_t capabilities;
  const char* implementation;

  okit_status (*create)(okit_error* err, const okit_executor* ex, void** out);
  void (*destroy)(void* self);
  /* Copies the set to host memory on s; *done (created with the executor's create_event, owned by
   * the caller afterwards) completes with the copies. */
  okit_status (*offload)(void* self, okit_error* err, const okit_tensor* tensors, size_t count,
                         okit_event* done, okit_stream s);
  okit_status (*reload)(void* self, okit_error* err, const okit_tensor* tensors, size_t count,
                        okit_event* done, okit_stream s);
  void (*release)(void* self);
  void (*info)(void* self, okit_arena_info* out);

  /* Appended in version 1.2; optional (NULL, or a table built before it: offloadkit calls
   * destroy). Tears the object down as destroy does and reports a failure of it; the object is
   * gone when it returns, whatever it returns. */
  okit_status (*close)(void* self, okit_error* err);
} okit_arena_vtable;

/* The size of a version-1.0 arena table (without close): the smallest accepted. */
#define OKIT_ARENA_V1_SIZE offsetof(okit_arena_vtable, close)

/* Whether an arena table has `entry` (set, and inside the table's struct_size). */
#define OKIT_ARENA_HAS(table, entry)                                                      \
  ((table)->struct_size >= offsetof(okit_arena_vtable, entry) + sizeof((table)->entry) && \
   (table)->entry != NULL)

/* ---- activation offload ------------------------------------------------------------------- */

enum okit_dtype {
  OKIT_DTYPE_U8 = 0,
  OKIT_DTYPE_I8 = 1,
  OKIT_DTYPE_F16 = 2,
  OKIT_DTYPE_BF16 = 3,
  OKIT_DTYPE_F32 = 4,
  OKIT_DTYPE_I32 = 5,
  OKIT_DTYPE_F64 = 6,
  OKIT_DTYPE_I64 = 7
};

#define OKIT_MAX_DIMS 8

/* A device tensor. `release` gives the buffer back to its owner: called exactly once (call, then
 * drop) by whoever holds the tensor last. */
typedef struct okit_activation_tensor {
  void* data;
  size_t bytes;
  int32_t device;
  int32_t dtype; /* okit_dtype */
  uint32_t ndim; /* at most OKIT_MAX_DIMS */
  int64_t shape[OKIT_MAX_DIMS];
  okit_callback release;
} okit_activation_tensor;

typedef struct okit_offload_options {
  size_t keep_threshold;
  size_t prefetch_bytes;
  int32_t prefetch_layers;
  size_t max_pending_bytes;
} okit_offload_options;

typedef struct okit_offload_stats {
  size_t packed, kept, offloaded_bytes, restored_bytes, prefetched, demand_uploads,
      served_from_source, peak_prefetch_bytes, pinned_allocations, device_allocations,
      pending_waits;
} okit_offload_stats;

typedef struct okit_activation_vtable {
  uint32_t struct_size;
  uint64_t capabilities;
  const char* implementation;

  okit_status (*create)(okit_error* err, const okit_executor* ex, const okit_offload_options* o,
                        void** out);
  void (*destroy)(void* self);
  /* Takes ownership of t (and its release) on OKIT_OK only; on failure the caller keeps it. */
  okit_status (*pack)(void* self, okit_error* err, const okit_activation_tensor* t,
                      uint64_t* handle, okit_stream s);
  /* Fills *out; the caller owns it (and its release) on OKIT_OK. */
  okit_status (*unpack)(void* self, okit_error* err, uint64_t handle, okit_activation_tensor* out,
                        okit_stream s);
  okit_status (*forward_layer_end)(void* self, okit_error* err, int32_t layer, okit_stream s);
  okit_status (*backward_layer_begin)(void* self, okit_error* err, int32_t layer, okit_stream s);
  okit_status (*synchronize)(void* self, okit_error* err);
  size_t (*keep_threshold)(void* self);
  void (*stats)(void* self, okit_offload_stats* out);

  /* Appended in version 1.2; optional (NULL, or a table built before it: offloadkit calls
   * destroy). Tears the object down as destroy does and reports a failure of it; the object is
   * gone when it returns, whatever it returns. */
  okit_status (*close)(void* self, okit_error* err);
} okit_activation_vtable;

/* The size of a version-1.0 activation table (without close): the smallest accepted. */
#define OKIT_ACTIVATION_V1_SIZE offsetof(okit_activation_vtable, close)

/* Whether an activation table has `entry` (set, and inside the table's struct_size). */
#define OKIT_ACTIVATION_HAS(table, entry)                                                      \
  ((table)->struct_size >= offsetof(okit_activation_vtable, entry) + sizeof((table)->entry) && \
   (table)->entry != NULL)

/* ---- the plugin ---------------------------------------------------------------------------- */

typedef struct okit_plugin {
  uint32_t abi_version; /* OKIT_ABI_VERSION the plugin was built against */
  uint32_t struct_size; /* sizeof(okit_plugin) */
  const char* name;
  const char* version;
  /* NULL where the plugin does not provide the feature. */
  const okit_stash_vtable* stash;
  const okit_region_vtable* region;
  const okit_arena_vtable* arena;
  const okit_activation_vtable* activation;

  /* Appended in version 1.3; optional (NULL, or a description built before it). Gives back what a
   * framework the plugin runs on keeps cached after its objects are gone (PyTorch's device and
   * pinned caching allocators hold freed blocks for reuse), so that what the process still holds
   * afterwards is the plugin's own. Called with no object of the plugin alive, by
   * `offloadkit check --driver-faults` before it reads the leak ledger; what it released is
   * reported as the framework's cache, not as a leak. */
  okit_status (*release_cached_memory)(okit_error* err);
} okit_plugin;

/* The size of a version-1.0 plugin description (without release_cached_memory): the smallest
 * accepted. */
#define OKIT_PLUGIN_V1_SIZE offsetof(okit_plugin, release_cached_memory)

/* Whether a plugin description has `entry` (set, and inside its struct_size). */
#define OKIT_PLUGIN_HAS(desc, entry)                                              \
  ((desc)->struct_size >= offsetof(okit_plugin, entry) + sizeof((desc)->entry) && \
   (desc)->entry != NULL)

/* The entry point: returns the plugin's description (static storage), or NULL when it cannot
 * serve a host of `host_abi_version`. */
typedef const okit_plugin* (*okit_plugin_entry_fn)(uint32_t host_abi_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OFFLOADKIT_PLUGIN_H */
