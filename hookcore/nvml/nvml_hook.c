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

#include "../cuda/shim.h"

/* A handful of NVML handles -> ledger index (handles are stable for the process lifetime). */
#define HK_NVML_CACHE 64
static struct { _Atomic(nvmlDevice_t) handle; _Atomic int ldev; } g_cache[HK_NVML_CACHE];

static int ldev_of(nvmlDevice_t h) {
    for (int i = 0; i < HK_NVML_CACHE; i++) {
        nvmlDevice_t c = atomic_load_explicit(&g_cache[i].handle, memory_order_acquire);
        if (c == h) return atomic_load_explicit(&g_cache[i].ldev, memory_order_relaxed);
        if (c == NULL) break;
    }
    char uuid[96] = "";
    if (!hk_real.nvmlDeviceGetUUID || hk_real.nvmlDeviceGetUUID(h, uuid, sizeof uuid) != NVML_SUCCESS)
        return HK_ENODEV;
    /* NVML has no CUDA ordinal. A UUID-keyed claim is matched by UUID alone; a HAMi-style claim
       is keyed by CUDA ordinal, so find the ordinal with this UUID (when CUDA is initialised in
       this process), else fall back to NVML's own index. */
    int ord = hk_cuda_ordinal_of_uuid(uuid);
    unsigned idx;
    if (ord < 0 && hk_real.nvmlDeviceGetIndex && hk_real.nvmlDeviceGetIndex(h, &idx) == NVML_SUCCESS) ord = (int)idx;
    int dev = hk_device_resolve(ord, uuid);
    if (dev < 0) dev = HK_ENODEV;
    for (int i = 0; i < HK_NVML_CACHE; i++) {
        nvmlDevice_t expect = NULL;
        if (atomic_compare_exchange_strong(&g_cache[i].handle, &expect, h) || expect == h) {
            atomic_store_explicit(&g_cache[i].ldev, dev, memory_order_relaxed);
            break;
        }
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
    hk_reclaim_for_report();
    uint64_t u = hk_mem_used(dev);
    uint64_t f = u >= t ? 0 : t - u;
    *total = t;
    *used = u > t ? t : u;
    *free_b = f < real_free ? f : real_free;
    return 0;
}

HK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) {
    hk_shim_load(1);
    if (!hk_real.nvmlDeviceGetMemoryInfo) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = hk_real.nvmlDeviceGetMemoryInfo(dev, m);
    if (r != NVML_SUCCESS || !m) return r;
    int st = hk_shim_ready();
    if (st == HK_SHIM_FAILCLOSED) return NVML_ERROR_UNINITIALIZED;
    if (st == HK_SHIM_DORMANT) return r;
    quota_view(dev, m->total, m->free, &m->total, &m->used, &m->free);
    return r;
}

HK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m) {
    hk_shim_load(1);
    if (!hk_real.nvmlDeviceGetMemoryInfo_v2) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = hk_real.nvmlDeviceGetMemoryInfo_v2(dev, m);
    if (r != NVML_SUCCESS || !m) return r;
    int st = hk_shim_ready();
    if (st == HK_SHIM_FAILCLOSED) return NVML_ERROR_UNINITIALIZED;
    if (st == HK_SHIM_DORMANT) return r;
    if (quota_view(dev, m->total, m->free, &m->total, &m->used, &m->free) == 0) m->reserved = 0;
    return r;
}
