/* alloc.c - the rungs of the allocation ladder (alloc.h): admit, settle, remember, forget. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "alloc.h"

CUresult hk_alloc_admit(hk_alloc *a, uint64_t charge) {
    a->skip = 0;
    a->ctx = 0;
    int st = hk_preload_ready();
    if (HK_UNLIKELY(st == HK_STATE_FAILCLOSED)) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || hk_current_dev(&a->dev, NULL) != CUDA_SUCCESS) {
        a->skip = 1;
        return CUDA_SUCCESS;
    }
    CUresult r = hk_alloc_on(a, a->dev);
    CUcontext ctx = NULL;
    if (r == CUDA_SUCCESS && hk_real.cuCtxGetCurrent && hk_real.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS)
        a->ctx = (uint64_t)(uintptr_t)ctx;
    return r == CUDA_SUCCESS ? hk_alloc_reserve(a, charge) : r;
}

CUresult hk_alloc_on(hk_alloc *a, int ldev) {
    a->dev = ldev;
    a->skip = 0;
    a->charge = 0;
    a->ctx = 0;
    if (ldev < 0) return CUDA_ERROR_OUT_OF_MEMORY; /* GPU outside the claim */
    return hk_context_charge_current(ldev);        /* the process's context first (context.c) */
}

CUresult hk_alloc_reserve(hk_alloc *a, uint64_t charge) {
    int rc = hk_mem_reserve(a->dev, charge);
    if (HK_LIKELY(rc == HK_OK)) {
        a->charge = charge;
        return CUDA_SUCCESS;
    }
    return rc == HK_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult hk_alloc_called(hk_alloc *a, CUresult r) {
    if (!a->skip && r != CUDA_SUCCESS) hk_mem_release(a->dev, a->charge);
    return r;
}

/* Device pointers and arrays die with the context they were made in; other kinds (pools, VMM
   handles, graph memory) are not followed. */
static int track(const hk_alloc *a, uint64_t key, uint32_t kind) {
    int owned = kind == HK_KIND_PTR || kind == HK_KIND_ARRAY;
    return hk_track_alloc_owned(key, kind, a->dev, a->charge, owned ? a->ctx : 0);
}

int hk_alloc_keep(const hk_alloc *a, uint64_t key, uint32_t kind) {
    int rc = track(a, key, kind);
    if (HK_LIKELY(rc == HK_OK)) return 0;
    if (rc == HK_EEXIST) {
        /* The key was freed through a path we do not see (e.g. a v1 free); drop the stale charge. */
        int odev;
        uint64_t osize;
        if (hk_track_free(key, kind, &odev, &osize) == HK_OK) hk_mem_release(odev, osize);
        if (track(a, key, kind) == HK_OK) return 0;
    }
    hk_mem_release(a->dev, a->charge);
    return 1;
}

static void give_back(int dev, uint64_t size) { hk_mem_release(dev, size); }

void hk_alloc_context_gone(void *ctx) {
    if (!ctx) return;
    hk_track_drop_owner((uint64_t)(uintptr_t)ctx, HK_KIND_PTR, give_back);
    hk_track_drop_owner((uint64_t)(uintptr_t)ctx, HK_KIND_ARRAY, give_back);
}

void hk_alloc_forget(uint64_t key, uint32_t kind) {
    int dev;
    uint64_t size;
    if (hk_track_free(key, kind, &dev, &size) == HK_OK) hk_mem_release(dev, size);
}
