/* table.c - the HIP shim as the preload layer sees it: the HIP runtime, hooks.def, HAMi's
 * environment name (env_aliases.def), and how to find a device ordinal by its key. It also owns
 * what the library does once configured (the meter) and in a forked child. */
#include "../core/meter.h"
#include "hip.h"

hk_hip_table hk_hip;

#define HK_SHIM_REAL hk_hip
#include "preload/shim_table.h"

static const hk_env_alias hip_aliases[] = {
#define HK_ENV_ALIAS(legacy, key) {legacy, key},
#include "env_aliases.def"
#undef HK_ENV_ALIAS
    {NULL, NULL},
};

void hk_hip_vmm_atfork_child(void) HK_HIDDEN;
static void hip_atfork_child(void) {
    hk_meter_atfork_child();
    hk_hip_vmm_atfork_child();
}

const hk_shim hk_shim_hip = {
    .name = "hip",
    /* The runtime's file: the one a process already loaded wins (preload/registry.c), so a
       program linked with libamdhip64.so.6, or a framework's bundled copy, is the one policed.
       ROCm names it libamdhip64.so.<major>; DTK (Hygon DCU) ships libamdhip64.so too. */
    .library = "libamdhip64.so:libamdhip64.so.7:libamdhip64.so.6:libamdhip64.so.5",
    .prefix = "hip",
    .aliases = hip_aliases,
    .ordinal_of_uuid = hk_hip_ordinal_of_key,
    .setup = hk_hip_meter_setup,
    .atfork_child = hip_atfork_child,
    HK_SHIM_FIELDS,
};
