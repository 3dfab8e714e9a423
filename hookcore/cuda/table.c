/* table.c - the CUDA shim as the preload layer sees it: libcuda.so.1, the names in hooks.def,
 * HAMi's environment names (env_aliases.def), and how to find a device ordinal by UUID. */
#include "../core/meter.h"
#include "shim.h"

hk_real_table hk_real;

#define HK_SHIM_REAL hk_real
#include "preload/shim_table.h"

void hk_context_atfork_child(void) HK_HIDDEN;
static void cuda_atfork_child(void) {
    hk_meter_atfork_child();
    hk_context_atfork_child();
    hk_cuda_sm_share_atfork_child();
}

static const hk_env_alias cuda_aliases[] = {
#define HK_ENV_ALIAS(legacy, key) {legacy, key},
#include "env_aliases.def"
#undef HK_ENV_ALIAS
    {NULL, NULL},
};

const hk_shim hk_shim_cuda = {
    .name = "cuda",
    .library = "libcuda.so.1",
    .prefix = "cu",
    .aliases = cuda_aliases,
    .ordinal_of_uuid = hk_cuda_ordinal_of_uuid,
    .setup = hk_cuda_meter_setup,
    .atfork_child = cuda_atfork_child,
    HK_SHIM_FIELDS,
};
