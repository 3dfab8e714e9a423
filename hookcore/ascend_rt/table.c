/* table.c - the CANN runtime shim as the preload layer sees it: libruntime.so and hooks.def. */
#include "../acl/npu.h"

hk_rt_table hk_rt;

#define HK_SHIM_REAL hk_rt
#include "preload/shim_table.h"

const hk_shim hk_shim_ascend_rt = {
    .name = "ascend_rt",
    .library = "libruntime.so",
    .prefix = "rt",
    HK_SHIM_FIELDS,
};
