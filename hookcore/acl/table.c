/* table.c - the ACL shim as the preload layer sees it: libascendcl.so and hooks.def. It also owns
 * what the library does once configured (the meter) and in a forked child. */
#include "../core/meter.h"
#include "npu.h"

hk_acl_table hk_acl;

#define HK_SHIM_REAL hk_acl
#include "preload/shim_table.h"

const hk_shim hk_shim_acl = {
    .name = "acl",
    .library = "libascendcl.so",
    .prefix = "acl",
    .ordinal_of_uuid = hk_npu_ordinal_of_key,
    .setup = hk_npu_meter_setup,
    .atfork_child = hk_meter_atfork_child,
    HK_SHIM_FIELDS,
};
