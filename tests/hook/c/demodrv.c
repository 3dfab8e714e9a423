/* demodrv.c - a fake vendor library (libdemodrv.so.1) with 1 GiB of "device memory" backed by
 * the heap, for the two-libraries test. Not policed by anything but the demo shim. */
#include <stdlib.h>

#include "demo/demo.h"

static size_t g_used;
static const size_t g_total = (size_t)1 << 30;

int demoInit(void) { return DEMO_OK; }
int demoMalloc(void **p, size_t size) {
    if (g_used + size > g_total) return DEMO_OOM;
    *p = malloc(size ? size : 1);
    if (!*p) return DEMO_OOM;
    g_used += size;
    return DEMO_OK;
}
int demoFree(void *p) {
    free(p);
    return DEMO_OK;
}
int demoMemInfo(size_t *free_b, size_t *total_b) {
    *total_b = g_total;
    *free_b = g_total - g_used;
    return DEMO_OK;
}
