/* An example offloadkit plugin, in plain C: a coalesced arena that offloads a tensor set into one
 * cached pinned host buffer. Everything goes through the executor offloadkit lends, so the plugin
 * runs on the GPU and on offloadkit's CPU-only host executor, and offloadkit's fault injection can
 * fail its allocations and copies. Check it with:
 *   offloadkit check --plugin ./liboffloadkit_example_plugin.so */
#include <offloadkit/plugin.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct arena {
  const okit_executor* ex;
  void* host;      /* one pinned buffer, kept across cycles */
  size_t capacity; /* its size */
  size_t* sizes;   /* tensor sizes of the held copy */
  size_t count;
  int valid;    /* a complete copy is held */
  int released; /* release() was called: every call but release() is refused */
} arena;

static okit_status create(okit_error* err, const okit_executor* ex, void** out) {
  arena* a = calloc(1, sizeof(arena));
  if (a == NULL) return okit_set_error(err, OKIT_ERR_OUT_OF_MEMORY, "example arena: calloc failed");
  a->ex = ex;
  *out = a;
  return OKIT_OK;
}

static void release(void* self) {
  arena* a = self;
  /* Copies are synchronous (see offload), so none is still using the buffer. */
  if (a->host != NULL) a->ex->deallocate(a->ex->self, OKIT_MEMORY_PINNED, a->host, a->capacity);
  free(a->sizes);
  a->host = NULL;
  a->sizes = NULL;
  a->capacity = a->count = 0;
  a->valid = 0;
  a->released = 1;
}

static void destroy(void* self) {
  release(self);
  free(self);
}

/* Prefixes err's message with which tensor's copy failed; keeps the code. */
static okit_status copy_failed(okit_error* err, const char* direction, size_t i, size_t n) {
  char msg[OKIT_ERROR_MESSAGE_BYTES];
  snprintf(msg, sizeof msg, "example arena: copy of tensor %zu of %zu %s failed: %s", i, n,
           direction, err->message);
  return okit_set_error(err, err->code, msg);
}

/* Records a fresh event on s: the caller waits on it (it is complete already). */
static okit_status done_event(arena* a, okit_error* err, okit_event* done, okit_stream s) {
  okit_status st = a->ex->create_event(a->ex->self, err, s.device, done);
  if (st != OKIT_OK) return st;
  st = a->ex->record(a->ex->self, err, *done, s);
  if (st != OKIT_OK) a->ex->destroy_event(a->ex->self, *done);
  return st;
}

static okit_status offload(void* self, okit_error* err, const okit_tensor* t, size_t n,
                           okit_event* done, okit_stream s) {
  arena* a = self;
  size_t total = 0, offset = 0, i;
  okit_status st;
  if (a->released)
    return okit_set_error(err, OKIT_ERR_STATE, "example arena: offload after release");
  a->valid = 0;
  for (i = 0; i < n; ++i) total += t[i].bytes;
  if (total > a->capacity) { /* grow: free first, so that one buffer is held at most */
    if (a->host != NULL) a->ex->deallocate(a->ex->self, OKIT_MEMORY_PINNED, a->host, a->capacity);
    a->host = NULL;
    a->capacity = 0;
    st = a->ex->allocate(a->ex->self, err, OKIT_MEMORY_PINNED, total, 0, &a->host);
    if (st != OKIT_OK) return st;
    a->capacity = total;
  }
  free(a->sizes);
  a->sizes = malloc((n ? n : 1) * sizeof(size_t));
  if (a->sizes == NULL) return okit_set_error(err, OKIT_ERR_OUT_OF_MEMORY, "example arena: malloc");
  for (i = 0; i < n; ++i) {
    a->sizes[i] = t[i].bytes;
    if (t[i].bytes == 0) continue;
    st = a->ex->copy(a->ex->self, err, (char*)a->host + offset, t[i].data, t[i].bytes, s);
    if (st != OKIT_OK) return copy_failed(err, "to the host", i, n);
    offset += t[i].bytes;
  }
  a->count = n;
  st = a->ex->synchronize_stream(a->ex->self, err, s);
  if (st == OKIT_OK) st = done_event(a, err, done, s);
  /* Only an offload that reports success holds a copy: after a failed one, reload is refused. */
  a->valid = st == OKIT_OK;
  return st;
}

static okit_status reload(void* self, okit_error* err, const okit_tensor* t, size_t n,
                          okit_event* done, okit_stream s) {
  arena* a = self;
  size_t offset = 0, i;
  char msg[160];
  okit_status st;
  if (a->released)
    return okit_set_error(err, OKIT_ERR_STATE, "example arena: reload after release");
  if (!a->valid) return okit_set_error(err, OKIT_ERR_STATE, "example arena: no complete host copy");
  if (n != a->count) {
    snprintf(msg, sizeof msg, "example arena: reload of %zu tensors, the copy holds %zu", n,
             a->count);
    return okit_set_error(err, OKIT_ERR_OUT_OF_RANGE, msg);
  }
  for (i = 0; i < n; ++i) {
    if (t[i].bytes != a->sizes[i]) {
      snprintf(msg, sizeof msg, "example arena: tensor %zu has %zu bytes, the copy holds %zu", i,
               t[i].bytes, a->sizes[i]);
      return okit_set_error(err, OKIT_ERR_OUT_OF_RANGE, msg);
    }
  }
  for (i = 0; i < n; ++i) {
    if (t[i].bytes == 0) continue;
    st = a->ex->copy(a->ex->self, err, t[i].data, (char*)a->host + offset, t[i].bytes, s);
    /* The host copy is intact: a retry succeeds. */
    if (st != OKIT_OK) return copy_failed(err, "to the device", i, n);
    offset += t[i].bytes;
  }
  st = a->ex->synchronize_stream(a->ex->self, err, s);
  if (st != OKIT_OK) return st;
  return done_event(a, err, done, s);
}

static void info(void* self, okit_arena_info* out) {
  const arena* a = self;
  out->released = a->released;
  out->holds_copy = a->valid;
  out->host_bytes = a->capacity;
}

OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  static const okit_arena_vtable table = {
      sizeof(okit_arena_vtable),
      /* Not OKIT_ARENA_CAP_PINNED_STEADY_STATE: that promise also means one copy per run of
       * device-contiguous tensors, and this example copies tensor by tensor. */
      OKIT_CAP_CUDA_EXECUTOR | OKIT_CAP_HOST_EXECUTOR | OKIT_CAP_EXECUTOR_ALLOCATIONS |
          OKIT_ARENA_CAP_SINGLE_HOST_BUFFER,
      /* No close (ABI 1.2): this teardown (release, free) cannot fail, so the example stays on
       * destroy, which offloadkit calls when close is NULL, as it does for tables built before
       * 1.2. A teardown that can fail (a double release it detects, a failed unmap) fills close
       * and returns the error, and offloadkit fails the case that destroyed the object. */
      "example-arena", create, destroy, offload, reload, release, info};
  static const okit_plugin plugin = {
      OKIT_ABI_VERSION, sizeof(okit_plugin), "example", "1.0", NULL, NULL, &table, NULL, NULL};
  return host_abi_version == OKIT_ABI_VERSION ? &plugin : NULL;
}
