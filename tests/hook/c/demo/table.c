/* table.c - the demo shim for the preload layer: libdemodrv.so.1, prefix "demo". */
#include "preload/preload.h"
#include "demo.h"

struct demo_real {
#define HK_HOOK(n) __typeof__(&n) n;
#include "hooks.def"
#undef HK_HOOK
} demo_real HK_HIDDEN;

static const hk_hook g_hooks[] = {
#define HK_HOOK(n) {#n, (void *)&n, (void **)&demo_real.n},
#include "hooks.def"
#undef HK_HOOK
};

static hk_shim_rt g_rt;

const hk_shim hk_shim_demo = {
    .name = "demo",
    .library = "libdemodrv.so.1",
    .prefix = "demo",
    .hooks = g_hooks,
    .nhooks = sizeof g_hooks / sizeof g_hooks[0],
    .ntotal = sizeof g_hooks / sizeof g_hooks[0],
    .rt = &g_rt,
};
