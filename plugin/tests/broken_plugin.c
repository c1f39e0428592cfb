/* Plugins that break the ABI in one way each, selected by BROKEN (see CMakeLists.txt); the loader
 * must refuse every one with a message naming the plugin, the entry and what was expected. */
#include <offloadkit/plugin.h>

#define BROKEN_no_entry 1
#define BROKEN_returns_null 2
#define BROKEN_old_abi 3
#define BROKEN_small_table 4
#define BROKEN_null_entry 5
#define BROKEN_no_executor 6
#define BROKEN_no_feature 7
#define PASTE(x) BROKEN_##x
#define OF(x) PASTE(x)
#define KIND OF(BROKEN)

static okit_status create(okit_error* err, const okit_executor* ex, void** out) {
  (void)ex;
  (void)out;
  return okit_set_error(err, OKIT_ERR_UNSUPPORTED, "never created");
}
static void destroy(void* self) { (void)self; }
static okit_status move(void* self, okit_error* err, const okit_tensor* t, size_t n,
                        okit_event* done, okit_stream s) {
  (void)self, (void)t, (void)n, (void)done, (void)s;
  return okit_set_error(err, OKIT_ERR_UNSUPPORTED, "never called");
}
static void release(void* self) { (void)self; }
static void info(void* self, okit_arena_info* out) {
  (void)self;
  out->released = 0;
  out->holds_copy = 0;
  out->host_bytes = 0;
}

#if KIND != BROKEN_no_entry
OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t v) {
  static okit_arena_vtable arena = {sizeof(okit_arena_vtable),
                                    OKIT_CAP_HOST_EXECUTOR,
                                    "broken",
                                    create,
                                    destroy,
                                    move,
                                    move,
                                    release,
                                    info};
  static okit_plugin plugin = {OKIT_ABI_VERSION, sizeof(okit_plugin), "broken", "0", 0, 0, 0, 0, 0};
  (void)v;
  plugin.arena = &arena;
#if KIND == BROKEN_returns_null
  return 0;
#elif KIND == BROKEN_old_abi
  plugin.abi_version = 0;
#elif KIND == BROKEN_small_table
  arena.struct_size = 8;
#elif KIND == BROKEN_null_entry
  arena.reload = 0;
#elif KIND == BROKEN_no_executor
  arena.capabilities = 0;
#elif KIND == BROKEN_no_feature
  plugin.arena = 0;
#endif
  return &plugin;
}
#else
OKIT_PLUGIN_EXPORT int not_the_entry_point(void) { return 0; }
#endif
