/* An offloadkit plugin written in C: the library exports okit_plugin_entry, which describes the
 * features it provides. This one provides none yet. */
#include <offloadkit/plugin.h>

static const okit_plugin example_plugin = {
    OKIT_ABI_VERSION,    /* abi_version */
    sizeof(okit_plugin), /* struct_size */
    "example",           /* name */
    "0.1.0",             /* version */
    NULL,                /* stash */
    NULL,                /* region */
    NULL,                /* arena */
    NULL,                /* activation */
};

OKIT_PLUGIN_EXPORT const okit_plugin* okit_plugin_entry(uint32_t host_abi_version) {
  return host_abi_version == OKIT_ABI_VERSION ? &example_plugin : NULL;
}
