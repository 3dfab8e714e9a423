/* shim_table.h - a shim's hook array and bookkeeping, generated from its hooks.def.
 *
 * In the shim's table.c: define HK_SHIM_REAL as its real-pointer struct (the one shim_real.h
 * filled in), include this file, and put HK_SHIM_FIELDS into its hk_shim:
 *     #define HK_SHIM_REAL hk_real
 *     #include "preload/shim_table.h"
 *     const hk_shim hk_shim_<dir> = {.name = "<dir>", ..., HK_SHIM_FIELDS};
 * The Makefile compiles every shim with -iquote <its directory>, so "hooks.def" is the shim's.
 * Interposers come first in the array (they are what dlsym and cuGetProcAddress hand out), the
 * functions the shim only calls after them.
 */
#include "preload/preload.h"

static const hk_hook hk_shim_hooks_[] = {
#define HK_HOOK(n) {#n, (void *)&n, (void **)&HK_SHIM_REAL.n},
#define HK_AUX(n, ret, args)
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
#define HK_HOOK(n)
#define HK_AUX(n, ret, args) {#n, NULL, (void **)&HK_SHIM_REAL.n},
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
};

enum {
    HK_SHIM_NHOOKS_ = 0
#define HK_HOOK(n) +1
#define HK_AUX(n, ret, args)
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
};

static hk_shim_rt hk_shim_rt_;

#define HK_SHIM_FIELDS                                                                                              \
    .hooks = hk_shim_hooks_, .nhooks = HK_SHIM_NHOOKS_, .ntotal = sizeof hk_shim_hooks_ / sizeof hk_shim_hooks_[0], \
    .rt = &hk_shim_rt_
