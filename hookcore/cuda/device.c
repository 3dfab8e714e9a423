/* device.c - CUDA ordinal -> ledger device mapping, cuInit, memory info.
 *
 * Devices are keyed by UUID: the first time an ordinal is used its UUID is read from the driver
 * (cuDeviceGetUuid_v2) and hk_device_resolve() names the ledger index. A claim that lists its GPUs
 * (HOOKCORE_DEVICE_UUID_<i>) is therefore immune to CUDA_VISIBLE_DEVICES reordering; a plain HAMi
 * config keys by ordinal, as HAMi does.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <string.h>

#include "../core/limiter.h"
#include "shim.h"

#define HK_MAX_ORDINALS 64
static _Atomic int g_ordmap[HK_MAX_ORDINALS]; /* ordinal -> ledger index + 1000 (0 = unknown) */

/* The driver's 16 UUID bytes (cuDeviceGetUuid) in the form its other tools print and claims name:
   "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
static void cuda_uuid_format(const unsigned char raw[16], char out[HK_UUID_MAX]) {
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    memcpy(o, "GPU-", 4);
    o += 4;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) *o++ = '-';
        *o++ = hex[raw[i] >> 4];
        *o++ = hex[raw[i] & 15];
    }
    *o = '\0';
}

int hk_dev_of_ordinal(CUdevice ord) {
    if (ord < 0 || ord >= HK_MAX_ORDINALS) return HK_ENODEV;
    int v = hk_atomic_load_relaxed(&g_ordmap[ord]);
    if (HK_LIKELY(v != 0)) return v - 1000;
    CUuuid raw;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (hk_real.cuDeviceGetUuid_v2) r = hk_real.cuDeviceGetUuid_v2(&raw, ord);
    if (r != CUDA_SUCCESS && hk_real.cuDeviceGetUuid) r = hk_real.cuDeviceGetUuid(&raw, ord);
    char uuid[HK_UUID_MAX] = "";
    if (r == CUDA_SUCCESS) cuda_uuid_format((const unsigned char *)raw.bytes, uuid);
    int dev = hk_device_resolve(ord, r == CUDA_SUCCESS ? uuid : NULL);
    if (dev < 0) dev = HK_ENODEV;
    if (hk_log_debug()) hk_log("device ordinal %d (%s) -> ledger index %d", ord, uuid, dev);
    hk_atomic_store_relaxed(&g_ordmap[ord], dev + 1000);
    return dev;
}

CUresult hk_current_dev(int *ldev, CUdevice *ord_out) {
    CUdevice ord;
    if (!hk_real.cuCtxGetDevice) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuCtxGetDevice(&ord);
    if (r != CUDA_SUCCESS) return r;
    *ldev = hk_dev_of_ordinal(ord);
    if (ord_out) *ord_out = ord;
    return CUDA_SUCCESS;
}

int hk_cuda_ordinal_of_uuid(const char *uuid) {
    hk_preload_load(&hk_shim_cuda);
    int n = 0;
    if (!hk_real.cuDeviceGetCount || hk_real.cuDeviceGetCount(&n) != CUDA_SUCCESS) return -1;
    for (int ord = 0; ord < n; ord++) {
        CUuuid raw;
        CUresult r = CUDA_ERROR_NOT_FOUND;
        if (hk_real.cuDeviceGetUuid_v2) r = hk_real.cuDeviceGetUuid_v2(&raw, ord);
        if (r != CUDA_SUCCESS && hk_real.cuDeviceGetUuid) r = hk_real.cuDeviceGetUuid(&raw, ord);
        if (r != CUDA_SUCCESS) continue;
        char s[HK_UUID_MAX];
        cuda_uuid_format((const unsigned char *)raw.bytes, s);
        if (hk_uuid_equal(s, uuid)) return ord;
    }
    return -1;
}

/* ---------------------------------------------------------------------------
 * cuInit: the fail-closed gate. A bad config makes CUDA unusable, never unlimited.
 * ------------------------------------------------------------------------- */
HK_EXPORT CUresult cuInit(unsigned int flags) {
    if (hk_preload_ready() == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED;
    if (!hk_real.cuInit) return CUDA_ERROR_NOT_INITIALIZED;
    if (!hk_log_debug()) return hk_real.cuInit(flags);
    int64_t t0 = hk_limiter_now_ns();
    unsigned long d0 = hk_atomic_load_relaxed(&hk_log_xdlsym_calls), g0 = hk_atomic_load_relaxed(&hk_log_xswaps);
    CUresult r = hk_real.cuInit(flags);
    hk_log("cuInit(%u) = %d in %.0f us (%lu dlsym and %lu cuGetProcAddress calls inside)", flags, r,
           (double)(hk_limiter_now_ns() - t0) / 1e3, hk_atomic_load_relaxed(&hk_log_xdlsym_calls) - d0,
           hk_atomic_load_relaxed(&hk_log_xswaps) - g0);
    return r;
}

/* ---------------------------------------------------------------------------
 * Memory info: the quota and the claim's usage, saturating (never underflows).
 * ------------------------------------------------------------------------- */
/* Reports should not count processes that died since the last admission failure: virtual_meminfo
   reclaims their slots first (one fcntl per used slot; memory-info calls are rare). */
static void virtual_meminfo(int dev, size_t real_free, size_t real_total, size_t *free_b, size_t *total_b) {
    if (dev < 0) { /* a GPU outside a UUID-keyed claim: no quota for it */
        *free_b = 0;
        *total_b = 0;
        return;
    }
    uint64_t limit = hk_mem_limit(dev);
    if (limit == HK_MEM_UNLIMITED) {
        *free_b = real_free;
        *total_b = real_total;
        return;
    }
    uint64_t total = limit < real_total ? limit : real_total;
    hk_reclaim();
    uint64_t used = hk_mem_used(dev);
    uint64_t free_q = used >= total ? 0 : total - used;
    *total_b = (size_t)total;
    *free_b = (size_t)(free_q < real_free ? free_q : real_free);
}

HK_EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) {
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED;
    if (!hk_real.cuMemGetInfo_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT) return hk_real.cuMemGetInfo_v2(free_b, total_b);
    size_t rf, rt;
    CUresult r = hk_real.cuMemGetInfo_v2(&rf, &rt);
    if (r != CUDA_SUCCESS || !free_b || !total_b) {
        if (r == CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
        return r;
    }
    int dev;
    if (hk_current_dev(&dev, NULL) != CUDA_SUCCESS) {
        *free_b = rf;
        *total_b = rt;
        return CUDA_SUCCESS;
    }
    virtual_meminfo(dev, rf, rt, free_b, total_b);
    return CUDA_SUCCESS;
}

HK_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice ord) {
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED;
    if (!hk_real.cuDeviceTotalMem_v2) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuDeviceTotalMem_v2(bytes, ord);
    if (r != CUDA_SUCCESS || st == HK_STATE_DORMANT) return r;
    size_t f, t;
    virtual_meminfo(hk_dev_of_ordinal(ord), *bytes, *bytes, &f, &t);
    *bytes = t;
    return CUDA_SUCCESS;
}
