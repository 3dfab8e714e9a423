/* table.c - the CUDA shim as the preload layer sees it: libcuda.so.1, the names in hooks.def,
 * HAMi's environment names, and how to find a device ordinal by UUID. */
#include "../core/meter.h"
#include "hami_env.h"
#include "shim.h"

hk_real_table hk_real;

static const hk_hook g_hooks[] = {
#define HK_HOOK(n) {#n, (void *)&n, (void **)&hk_real.n},
#define HK_AUX(n, ret, args)
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
#define HK_HOOK(n)
#define HK_AUX(n, ret, args) {#n, NULL, (void **)&hk_real.n},
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

const hk_shim hk_shim_cuda = {
    .name = "cuda",
    .library = "libcuda.so.1",
    .prefix = "cu",
    .hooks = g_hooks,
    .nhooks = N_HOOKS,
    .ntotal = sizeof g_hooks / sizeof g_hooks[0],
    .aliases = hk_hami_env_aliases,
    .ordinal_of_uuid = hk_cuda_ordinal_of_uuid,
    .setup = hk_cuda_meter_setup,
    .atfork_child = hk_meter_atfork_child,
    .rt = &g_rt,
};
