/* demo_shim.c - memory quota on the demo API, device index 0 of the library's claim. Enough to
 * show that a second hookcore library built from the same core and preload layer works beside
 * libvgpu.so in one process, and stays dormant when its own claim does not configure it. */
#include "core/hookcore.h"
#include "preload/preload.h"
#include "demo.h"

extern struct demo_real {
#include "preload/shim_real.h"
} demo_real HK_HIDDEN;

HK_EXPORT int demoInit(void) {
    if (hk_preload_ready() == HK_STATE_FAILCLOSED) return DEMO_NOT_INITIALIZED;
    return demo_real.demoInit ? demo_real.demoInit() : DEMO_NOT_INITIALIZED;
}

HK_EXPORT int demoMalloc(void **p, size_t size) {
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED || !demo_real.demoMalloc) return DEMO_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || !p) return demo_real.demoMalloc(p, size);
    if (hk_mem_reserve(0, size) != HK_OK) return DEMO_OOM;
    int r = demo_real.demoMalloc(p, size);
    if (r != DEMO_OK || hk_track_alloc((uint64_t)(uintptr_t)*p, HK_KIND_PTR, 0, size) != HK_OK) {
        if (r == DEMO_OK) demo_real.demoFree(*p);
        hk_mem_release(0, size);
        return r == DEMO_OK ? DEMO_OOM : r;
    }
    return DEMO_OK;
}

HK_EXPORT int demoFree(void *p) {
    if (!demo_real.demoFree) return DEMO_NOT_INITIALIZED;
    int r = demo_real.demoFree(p);
    int dev;
    uint64_t size;
    if (r == DEMO_OK && hk_track_free((uint64_t)(uintptr_t)p, HK_KIND_PTR, &dev, &size) == HK_OK)
        hk_mem_release(dev, size);
    return r;
}

HK_EXPORT int demoMemInfo(size_t *free_b, size_t *total_b) {
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED || !demo_real.demoMemInfo) return DEMO_NOT_INITIALIZED;
    int r = demo_real.demoMemInfo(free_b, total_b);
    if (r != DEMO_OK || st == HK_STATE_DORMANT || hk_mem_limit(0) == HK_MEM_UNLIMITED) return r;
    uint64_t t = hk_mem_limit(0) < *total_b ? hk_mem_limit(0) : *total_b, u = hk_mem_used(0);
    *total_b = (size_t)t;
    *free_b = (size_t)(u >= t ? 0 : t - u);
    return DEMO_OK;
}
