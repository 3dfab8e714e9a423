/* table.c - the demo shim for the preload layer: libdemodrv.so.1, prefix "demo". */
#include "preload/preload.h"
#include "demo.h"

struct demo_real {
#include "preload/shim_real.h"
} demo_real HK_HIDDEN;

#define HK_SHIM_REAL demo_real
#include "preload/shim_table.h"

const hk_shim hk_shim_demo = {
    .name = "demo",
    .library = "libdemodrv.so.1",
    .prefix = "demo",
    HK_SHIM_FIELDS,
};
