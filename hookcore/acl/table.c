/* table.c - the ACL shim as the preload layer sees it: libascendcl.so and hooks.def. It also owns
 * what the library does once configured (the meter) and in a forked child. */
#include "../core/meter.h"
#include "npu.h"

hk_acl_table hk_acl;

static const hk_hook g_hooks[] = {
#define HK_HOOK(n) {#n, (void *)&n, (void **)&hk_acl.n},
#define HK_AUX(n, ret, args)
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
#define HK_HOOK(n)
#define HK_AUX(n, ret, args) {#n, NULL, (void **)&hk_acl.n},
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

const hk_shim hk_shim_acl = {
    .name = "acl",
    .library = "libascendcl.so",
    .prefix = "acl",
    .hooks = g_hooks,
    .nhooks = N_HOOKS,
    .ntotal = sizeof g_hooks / sizeof g_hooks[0],
    .ordinal_of_uuid = hk_npu_ordinal_of_key,
    .setup = hk_npu_meter_setup,
    .atfork_child = hk_meter_atfork_child,
    .rt = &g_rt,
};
