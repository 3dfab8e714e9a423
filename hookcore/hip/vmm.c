/* vmm.c - the virtual-memory API: physical memory is what hipMemCreate makes, so that is what is
 * charged, to the device the allocation's properties name; reserving address ranges is free.
 *
 * HIP keeps a physical allocation alive while a handle to it is held (hipMemCreate, and each
 * hipMemRetainAllocationHandle) or any range maps it (hipMemMap until hipMemUnmap), as CUDA's
 * VMM does. So the charge is given back only when the last reference is released and the last
 * mapping unmapped: releasing a handle that is still mapped keeps it charged, which would
 * otherwise let a process map, release and create again past its quota. The books are
 * process-local (a handle is a process's own); VMM calls are rare (an allocator growing a
 * segment), so one lock and two small tables suffice.
 *
 * Sharing: an exported handle may be imported by a process the hook cannot see, which then holds
 * the memory, so exporting pins the handle's charge for this process's life (one reference never
 * released). An imported handle is memory another process created: it is charged here when it is
 * mapped (the mapping's size, on the current device), so a process that keeps an import alive
 * after the exporter is gone still holds a charge for it. An import of this process's own handle
 * is one more reference to it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <string.h>

#include "hip.h"

#define VMM_HANDLES  1024
#define VMM_MAPPINGS 4096

typedef struct vmm_handle {
    hipMemGenericAllocationHandle_t h; /* NULL = free slot */
    int ldev;                          /* -1: an import not mapped yet (nothing charged) */
    uint64_t charge;
    uint32_t refs;     /* hipMemCreate or import + retains - releases (+ 1 once exported) */
    uint32_t maps;     /* live mappings */
    uint32_t exported; /* pinned: an importer elsewhere may hold the memory */
} vmm_handle;

typedef struct vmm_map {
    uintptr_t base, end; /* NULL base = free slot */
    hipMemGenericAllocationHandle_t h;
} vmm_map;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static vmm_handle g_handles[VMM_HANDLES];
static vmm_map g_maps[VMM_MAPPINGS];

void hk_hip_vmm_atfork_child(void) {
    pthread_mutex_init(&g_lock, NULL);
    memset(g_handles, 0, sizeof g_handles); /* the child was charged none of its parent's memory */
    memset(g_maps, 0, sizeof g_maps);
}

static vmm_handle *find(hipMemGenericAllocationHandle_t h) {
    for (int i = 0; i < VMM_HANDLES; i++)
        if (g_handles[i].h == h) return &g_handles[i];
    return NULL;
}

/* Under the lock: give the charge back once nothing holds the memory. */
static void maybe_free(vmm_handle *e) {
    if (e->refs || e->maps) return;
    if (e->charge) hk_mem_release(e->ldev, e->charge);
    memset(e, 0, sizeof *e);
}

HK_EXPORT hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *h, size_t size, const hipMemAllocationProp *prop,
                                  unsigned long long flags) {
    HK_HIP_REAL(hk_hip.hipMemCreate);
    if (hk_hip_nested() || !h || !prop || size == 0 || prop->location.type != hipMemLocationTypeDevice)
        return HK_HIP_NESTED(hk_hip.hipMemCreate(h, size, prop, flags)); /* host memory or invalid: not charged */
    uint64_t charge = hk_hip_charge(size);
    int dev = prop->location.id, ldev, skip;
    int rc = hk_hip_admit(&dev, charge, &ldev, &skip);
    if (rc != HK_OK) return rc == HK_ENOMEM ? hipErrorOutOfMemory : hipErrorNotInitialized;
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemCreate(h, size, prop, flags));
    if (skip) return r;
    if (r != hipSuccess) {
        hk_mem_release(ldev, charge);
        return r;
    }
    pthread_mutex_lock(&g_lock);
    vmm_handle *e = find(NULL);
    if (e) *e = (vmm_handle){*h, ldev, charge, 1, 0, 0};
    pthread_mutex_unlock(&g_lock);
    if (!e) { /* the table is full: refuse rather than hold memory nobody accounts for */
        hk_mem_release(ldev, charge);
        (void)HK_HIP_NESTED(hk_hip.hipMemRelease(*h));
        return hipErrorOutOfMemory;
    }
    return hipSuccess;
}

HK_EXPORT hipError_t hipMemRelease(hipMemGenericAllocationHandle_t h) {
    HK_HIP_REAL(hk_hip.hipMemRelease);
    int pass = hk_hip_nested();
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemRelease(h));
    if (pass || r != hipSuccess || !h) return r;
    pthread_mutex_lock(&g_lock);
    vmm_handle *e = find(h);
    if (e && e->refs) {
        e->refs--;
        maybe_free(e);
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

HK_EXPORT hipError_t hipMemRetainAllocationHandle(hipMemGenericAllocationHandle_t *h, void *addr) {
    HK_HIP_REAL(hk_hip.hipMemRetainAllocationHandle);
    int pass = hk_hip_nested();
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemRetainAllocationHandle(h, addr));
    if (pass || r != hipSuccess || !h) return r;
    pthread_mutex_lock(&g_lock);
    vmm_handle *e = find(*h);
    if (e) e->refs++; /* each retain is released once more before the memory goes */
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* A mapping of a charged handle is counted before the runtime makes it, under the lock: with the
   table full (4096 live mappings, far beyond what allocators make) the map is refused with
   hipErrorOutOfMemory, since an uncounted mapping would let the handle's charge go at its release
   while the memory stays mapped (before, such a mapping was made and not counted). */
HK_EXPORT hipError_t hipMemMap(void *ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t h,
                               unsigned long long flags) {
    HK_HIP_REAL(hk_hip.hipMemMap);
    if (hk_hip_nested() || !ptr) return HK_HIP_NESTED(hk_hip.hipMemMap(ptr, size, offset, h, flags));
    pthread_mutex_lock(&g_lock);
    vmm_handle *e = find(h);
    vmm_map *slot = NULL;
    for (int i = 0; e && !slot && i < VMM_MAPPINGS; i++)
        if (!g_maps[i].base) slot = &g_maps[i];
    int ldev = -1, dev;
    uint64_t charge = 0;
    hipError_t r = e && !slot ? hipErrorOutOfMemory : hipSuccess;
    if (r == hipSuccess && e && e->ldev < 0) { /* an import mapped first: charged now, here */
        charge = hk_hip_charge(size);
        int rc = hk_hip_current(&dev) == 0 ? ((ldev = hk_hip_ldev(dev)) < 0 ? HK_ENOMEM : hk_mem_reserve(ldev, charge))
                                           : HK_ENOMEM;
        if (rc != HK_OK) r = rc == HK_ENOMEM ? hipErrorOutOfMemory : hipErrorNotInitialized, charge = 0;
    }
    if (r == hipSuccess) r = HK_HIP_NESTED(hk_hip.hipMemMap(ptr, size, offset, h, flags));
    if (r != hipSuccess && charge) hk_mem_release(ldev, charge);
    if (r == hipSuccess && slot) {
        *slot = (vmm_map){(uintptr_t)ptr, (uintptr_t)ptr + size, h};
        e->maps++;
        if (charge) e->ldev = ldev, e->charge = charge;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

HK_EXPORT hipError_t hipMemUnmap(void *ptr, size_t size) {
    HK_HIP_REAL(hk_hip.hipMemUnmap);
    int pass = hk_hip_nested();
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemUnmap(ptr, size));
    if (pass || r != hipSuccess || !ptr) return r;
    uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < VMM_MAPPINGS; i++) {
        vmm_map *m = &g_maps[i];
        if (!m->base || m->base < lo || m->end > hi) continue;
        vmm_handle *e = find(m->h);
        memset(m, 0, sizeof *m);
        if (e && e->maps) {
            e->maps--;
            maybe_free(e);
        }
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

HK_EXPORT hipError_t hipMemExportToShareableHandle(void *shareable, hipMemGenericAllocationHandle_t h, int type,
                                                   unsigned long long flags) {
    HK_HIP_REAL(hk_hip.hipMemExportToShareableHandle);
    int pass = hk_hip_nested();
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemExportToShareableHandle(shareable, h, type, flags));
    if (pass || r != hipSuccess) return r;
    pthread_mutex_lock(&g_lock);
    vmm_handle *e = find(h);
    if (e && !e->exported) e->exported = 1, e->refs++; /* the importer's reference: never given back */
    pthread_mutex_unlock(&g_lock);
    return r;
}

HK_EXPORT hipError_t hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *h, void *os_handle, int type) {
    HK_HIP_REAL(hk_hip.hipMemImportFromShareableHandle);
    if (hk_hip_nested() || !h) return HK_HIP_NESTED(hk_hip.hipMemImportFromShareableHandle(h, os_handle, type));
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return hipErrorNotInitialized;
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemImportFromShareableHandle(h, os_handle, type));
    if (r != hipSuccess || st == HK_STATE_DORMANT) return r;
    pthread_mutex_lock(&g_lock);
    vmm_handle *e = find(*h);
    if (e)
        e->refs++; /* this process's own handle came back */
    else if ((e = find(NULL)) != NULL)
        *e = (vmm_handle){*h, -1, 0, 1, 0, 0};
    pthread_mutex_unlock(&g_lock);
    if (!e) { /* the table is full: refuse rather than map memory nobody accounts for */
        (void)HK_HIP_NESTED(hk_hip.hipMemRelease(*h));
        return hipErrorOutOfMemory;
    }
    return r;
}
