/* table.c - the NVML shim as the preload layer sees it: libnvidia-ml.so.1 and hooks.def. */
#include "nvml.h"

hk_nvml_table hk_nvml;

static const hk_hook g_hooks[] = {
#define HK_HOOK(n) {#n, (void *)&n, (void **)&hk_nvml.n},
#define HK_AUX(n, ret, args)
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
#define HK_HOOK(n)
#define HK_AUX(n, ret, args) {#n, NULL, (void **)&hk_nvml.n},
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
};

enum {
    N_HOOKS = 0
#define HK_HOOK(n) +1
#define HK_AUX(n, ret, args)
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
};

static hk_shim_rt g_rt;

const hk_shim hk_shim_nvml = {
    .name = "nvml",
    .library = "libnvidia-ml.so.1",
    .prefix = "nvml",
    .hooks = g_hooks,
    .nhooks = N_HOOKS,
    .ntotal = sizeof g_hooks / sizeof g_hooks[0],
    .clock_ratio_milli = hk_nvml_clock_ratio_milli,
    .rt = &g_rt,
};
