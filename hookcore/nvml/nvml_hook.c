/* nvml_hook.c - NVML memory info reports the claim's quota and usage.
 *
 * nvidia-smi and NVML-based tools (vLLM, DCGM exporters in the pod) then show total = quota and
 * used = the claim's charged usage, free = quota - used, never below zero. Devices are matched
 * by UUID (nvmlDeviceGetUUID), so NVML's PCI-order enumeration never picks the wrong quota.
 * Everything else in NVML passes through untouched (the shim only interposes these two).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "nvml.h"

/* A handful of NVML handles -> ledger index (handles are stable for the process lifetime).
   Publication order: a writer claims an empty slot by CAS on the handle, then stores ldev + 1
   (release); a reader that finds its handle reads ldev with acquire, and 0 means "not yet
   published": it computes the index itself instead of taking device 0's quota for another GPU. */
#define HK_NVML_CACHE 64
static struct {
    _Atomic(nvmlDevice_t) xhandle;
    _Atomic int xldev1;
} g_cache[HK_NVML_CACHE];

static int ldev_lookup(nvmlDevice_t h) {
    char uuid[96] = "";
    if (!hk_nvml.nvmlDeviceGetUUID || hk_nvml.nvmlDeviceGetUUID(h, uuid, sizeof uuid) != NVML_SUCCESS) return HK_ENODEV;
    /* NVML has no CUDA ordinal. A UUID-keyed claim is matched by UUID alone; a HAMi-style claim
       is keyed by the compute API's ordinal, so find the ordinal with this UUID (when that API is
       initialised in this process), else fall back to NVML's own index. */
    int ord = hk_preload_ordinal_of_uuid(uuid);
    unsigned idx;
    if (ord < 0 && hk_nvml.nvmlDeviceGetIndex && hk_nvml.nvmlDeviceGetIndex(h, &idx) == NVML_SUCCESS) ord = (int)idx;
    int dev = hk_device_resolve(ord, uuid);
    return dev < 0 ? HK_ENODEV : dev;
}

static int ldev_of(nvmlDevice_t h) {
    for (int i = 0; i < HK_NVML_CACHE; i++) {
        nvmlDevice_t c = hk_atomic_load_acquire(&g_cache[i].xhandle);
        if (c == NULL) break;
        if (c != h) continue;
        int v = hk_atomic_load_acquire(&g_cache[i].xldev1);
        if (v != 0) return v - 1;
        break; /* being published by another thread: compute it ourselves */
    }
    int dev = ldev_lookup(h);
    for (int i = 0; i < HK_NVML_CACHE; i++) {
        nvmlDevice_t expect = NULL;
        if (hk_atomic_cas_strong_acq_rel(&g_cache[i].xhandle, &expect, h)) {
            hk_atomic_store_release(&g_cache[i].xldev1, dev + 1);
            break;
        }
        if (expect == h) break; /* someone else caches it */
    }
    return dev;
}

/* Quota view of one device; returns 0 when the device has a quota (fields replaced). */
static int quota_view(nvmlDevice_t h, unsigned long long real_total, unsigned long long real_free,
                      unsigned long long *total, unsigned long long *used, unsigned long long *free_b) {
    int dev = ldev_of(h);
    if (dev < 0) return -1;
    uint64_t limit = hk_mem_limit(dev);
    if (limit == HK_MEM_UNLIMITED) return -1;
    uint64_t t = limit < real_total ? limit : real_total;
    hk_reclaim(); /* do not report the charges of processes that died */
    uint64_t u = hk_mem_used(dev);
    uint64_t f = u >= t ? 0 : t - u;
    *total = t;
    *used = u > t ? t : u;
    *free_b = f < real_free ? f : real_free;
    return 0;
}

HK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) {
    hk_preload_load(&hk_shim_nvml);
    if (!hk_nvml.nvmlDeviceGetMemoryInfo) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = hk_nvml.nvmlDeviceGetMemoryInfo(dev, m);
    if (r != NVML_SUCCESS || !m) return r;
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return NVML_ERROR_UNINITIALIZED;
    if (st == HK_STATE_DORMANT) return r;
    quota_view(dev, m->total, m->free, &m->total, &m->used, &m->free);
    return r;
}

HK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m) {
    hk_preload_load(&hk_shim_nvml);
    if (!hk_nvml.nvmlDeviceGetMemoryInfo_v2) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = hk_nvml.nvmlDeviceGetMemoryInfo_v2(dev, m);
    if (r != NVML_SUCCESS || !m) return r;
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return NVML_ERROR_UNINITIALIZED;
    if (st == HK_STATE_DORMANT) return r;
    if (quota_view(dev, m->total, m->free, &m->total, &m->used, &m->free) == 0) m->reserved = 0;
    return r;
}
