/* shim_real.h - the body of a shim's real-pointer struct, one slot per hooks.def entry:
 *     typedef struct hk_real_table {
 *     #include "preload/shim_real.h"
 *     } hk_real_table;
 * (the interposers' prototypes must be declared first: a slot has the type of its interposer). */
#define HK_HOOK(name)           __typeof__(&name) name;
#define HK_AUX(name, ret, args) ret(*name) args;
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
