/* vmm.c - virtual memory management: physical memory is created by cuMemCreate, so that is what
 * is charged (through the allocation ladder of alloc.h), the handle size rounded up to the
 * allocation granularity; cuMemMap/cuMemUnmap/cuMemAddressReserve move no physical memory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "alloc.h"

#define HK_MAX_ORD 64
static _Atomic uint64_t g_granularity[HK_MAX_ORD];

static uint64_t granularity_of(const CUmemAllocationProp *prop) {
    int ord = prop->location.id;
    if (ord >= 0 && ord < HK_MAX_ORD) {
        uint64_t g = hk_atomic_load_relaxed(&g_granularity[ord]);
        if (g) return g;
    }
    size_t g = 0;
    if (!hk_real.cuMemGetAllocationGranularity ||
        hk_real.cuMemGetAllocationGranularity(&g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !g)
        g = HK_MIB2;
    if (ord >= 0 && ord < HK_MAX_ORD) hk_atomic_store_relaxed(&g_granularity[ord], g);
    return g;
}

/* A handle's physical memory lives while any reference to it does: the handle itself, each
   cuMemRetainAllocationHandle, each mapping (cuMemMap); an exported handle may be held by an
   importer we cannot see, so exporting pins its charge for the process's life. The charge goes
   back when the last reference does. References are counted per handle (HK_KIND_VMMREF). */
static uint64_t vmm_refs(CUmemGenericAllocationHandle h) {
    int d;
    uint64_t n = 0;
    return hk_track_lookup(h, HK_KIND_VMMREF, &d, &n) == HK_OK ? n : 0;
}

static void vmm_set_refs(CUmemGenericAllocationHandle h, uint64_t n) {
    int d;
    uint64_t old;
    hk_track_free(h, HK_KIND_VMMREF, &d, &old);
    if (n) hk_track_alloc(h, HK_KIND_VMMREF, 0, n);
}

static void vmm_ref(CUmemGenericAllocationHandle h, int delta) {
    uint64_t n = vmm_refs(h);
    if (n == 0) return; /* not a handle of ours */
    if (delta > 0) {
        vmm_set_refs(h, n + 1);
    } else if (n > 1) {
        vmm_set_refs(h, n - 1);
    } else {
        vmm_set_refs(h, 0);
        hk_alloc_forget(h, HK_KIND_VMM);
    }
}

HK_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
    if (!hk_real.cuMemCreate) return CUDA_ERROR_NOT_INITIALIZED;
    int st = hk_preload_ready();
    if (HK_UNLIKELY(st == HK_STATE_FAILCLOSED)) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || !h || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return hk_real.cuMemCreate(h, size, prop, flags); /* host memory or invalid: not charged */
    hk_alloc a;
    CUresult r = hk_alloc_on(&a, hk_dev_of_ordinal(prop->location.id));
    if (r == CUDA_SUCCESS) r = hk_alloc_reserve(&a, hk_round_up(size, granularity_of(prop)));
    if (r != CUDA_SUCCESS) return r;
    HK_ALLOC_CALL(&a, hk_real.cuMemCreate(h, size, prop, flags));
    HK_ALLOC_KEEP(&a, *h, HK_KIND_VMM, hk_real.cuMemRelease(*h));
    vmm_set_refs(*h, 1);
    return CUDA_SUCCESS;
}

HK_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    if (!hk_real.cuMemRelease) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemRelease(h);
    if (r == CUDA_SUCCESS) vmm_ref(h, -1);
    return r;
}

HK_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    if (!hk_real.cuMemRetainAllocationHandle) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemRetainAllocationHandle(h, addr);
    if (r == CUDA_SUCCESS && h) vmm_ref(*h, +1);
    return r;
}

HK_EXPORT CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h, int type,
                                                unsigned long long flags) {
    if (!hk_real.cuMemExportToShareableHandle) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemExportToShareableHandle(shareable, h, type, flags);
    if (r == CUDA_SUCCESS) vmm_ref(h, +1); /* the importer's reference: never given back */
    return r;
}

/* An imported handle: memory another process created. It is charged here when this process
   maps it (the mapping's size), so a process that keeps an import alive after the exporter is gone
   still holds a charge for it. */
HK_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type) {
    if (!hk_real.cuMemImportFromShareableHandle) return CUDA_ERROR_NOT_INITIALIZED;
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemImportFromShareableHandle(h, os_handle, type);
    if (r != CUDA_SUCCESS || st == HK_STATE_DORMANT || !h) return r;
    if (vmm_refs(*h)) { /* our own handle came back: one more reference to it */
        vmm_ref(*h, +1);
        return r;
    }
    if (hk_track_alloc(*h, HK_KIND_VMM, -1, 0) == HK_OK) vmm_set_refs(*h, 1);
    return r;
}

HK_EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,
                            unsigned long long flags) {
    if (!hk_real.cuMemMap) return CUDA_ERROR_NOT_INITIALIZED;
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || vmm_refs(h) == 0) return hk_real.cuMemMap(p, size, off, h, flags);
    int dev = -1, ldev;
    uint64_t charged = 0, charge = 0;
    hk_track_lookup(h, HK_KIND_VMM, &dev, &charged);
    if (dev < 0) { /* an import not charged yet: charge the mapping on the current device */
        if (hk_current_dev(&ldev, NULL) != CUDA_SUCCESS) ldev = 0;
        if (ldev < 0) return CUDA_ERROR_OUT_OF_MEMORY;
        charge = hk_round_up(size, HK_MIB2);
        int rc = hk_mem_reserve(ldev, charge);
        if (rc != HK_OK) return rc == HK_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_INITIALIZED;
    }
    CUresult r = hk_real.cuMemMap(p, size, off, h, flags);
    if (r != CUDA_SUCCESS) {
        if (charge) hk_mem_release(ldev, charge);
        return r;
    }
    if (charge) {
        int d;
        uint64_t z;
        hk_track_free(h, HK_KIND_VMM, &d, &z);
        hk_track_alloc(h, HK_KIND_VMM, ldev, charge);
    }
    if (hk_track_alloc(p, HK_KIND_VMMMAP, 0, h) == HK_OK) vmm_ref(h, +1);
    return r;
}

HK_EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
    if (!hk_real.cuMemUnmap) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemUnmap(p, size);
    int d;
    uint64_t h;
    if (r == CUDA_SUCCESS && hk_track_free(p, HK_KIND_VMMMAP, &d, &h) == HK_OK) vmm_ref(h, -1);
    return r;
}
