/* table.c - the CANN runtime shim as the preload layer sees it: libruntime.so and hooks.def. */
#include "../acl/npu.h"

hk_rt_table hk_rt;

static const hk_hook g_hooks[] = {
#define HK_HOOK(n) {#n, (void *)&n, (void **)&hk_rt.n},
#define HK_AUX(n, ret, args)
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
#define HK_HOOK(n)
#define HK_AUX(n, ret, args) {#n, NULL, (void **)&hk_rt.n},
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

const hk_shim hk_shim_ascend_rt = {
    .name = "ascend_rt",
    .library = "libruntime.so",
    .prefix = "rt",
    .hooks = g_hooks,
    .nhooks = N_HOOKS,
    .ntotal = sizeof g_hooks / sizeof g_hooks[0],
    .rt = &g_rt,
};
