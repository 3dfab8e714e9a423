/* mempool.c - stream-ordered allocations (hipMallocAsync, hipMallocFromPoolAsync), their frees,
 * and the pools they come from.
 *
 * A pool with a release threshold (hipMemPoolSetAttribute(hipMemPoolAttrReleaseThreshold)) keeps
 * up to that much freed memory resident on the device; its books are core/pool.h's: a freed
 * allocation of such a pool stays charged as the pool's retained bytes, up to the threshold; the
 * pool's next allocations are charged against them first; lowering the threshold,
 * hipMemPoolTrimTo, hipMemPoolDestroy and a reset of the device give the excess back. Before,
 * hipFreeAsync gave the whole charge back while the pool kept the memory: four pools at UINT64_MAX
 * held four times the quota. Without a retaining pool none of this runs.
 *
 * The pool is the one named, else the device's current pool (hipDeviceGetMemPool), resolved at
 * every allocation and remembered with it, so a threshold set between an allocation and its free
 * still keeps it; an allocation is charged to the current device, as every other (a pool of
 * another device included). At most HK_MAX_POOLS pools keep freed memory at once: a threshold for
 * one more is refused (hipErrorOutOfMemory).
 *
 * Graph memory: an allocation made while its stream is captured becomes a graph allocation node,
 * whose memory the graph's pool keeps reserved between launches (HIP's graph pool never releases
 * it), so it is charged for the process's life (HK_KIND_HIP_GRAPHMEM) and the captured free gives
 * nothing back; so is a node added with hipGraphAddMemAllocNode. A reset of the device gives the
 * captured ones back. Before, the captured free gave the charge back and every launch of the graph
 * held memory uncharged.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "../core/pool.h"
#include "hip.h"

static _Atomic int g_pooled; /* some stream-ordered allocation had its pool remembered */

static int capturing(hipStream_t s) {
    hipStreamCaptureStatus st = 0;
    return hk_hip.hipStreamIsCapturing && HK_HIP_NESTED(hk_hip.hipStreamIsCapturing(s, &st)) == hipSuccess &&
           st == hipStreamCaptureStatusActive;
}

/* The pool an allocation on device ordinal `dev` comes from: `given`, else the device's current
   one; NULL when the runtime does not say. */
static hipMemPool_t pool_of(hipMemPool_t given, int dev) {
    hipMemPool_t p = given;
    if (!p && (!hk_hip.hipDeviceGetMemPool || HK_HIP_NESTED(hk_hip.hipDeviceGetMemPool(&p, dev)) != hipSuccess))
        return NULL;
    return p;
}

static hipError_t alloc_stream_ordered(void **out, size_t size, hipMemPool_t pool, hipStream_t s, int from_pool) {
#define REAL_CALL (from_pool ? hk_hip.hipMallocFromPoolAsync(out, size, pool, s) : hk_hip.hipMallocAsync(out, size, s))
    if (hk_hip_nested() || !out || size == 0) return HK_HIP_NESTED(REAL_CALL);
    uint64_t charge = hk_hip_charge(size);
    int dev = -1, ldev = -1, skip = 0;
    int st = hk_preload_ready();
    int graph = st == HK_STATE_READY && capturing(s);
    hipMemPool_t from = st == HK_STATE_READY && !graph && hk_hip_current(&dev) == 0 ? pool_of(pool, dev) : NULL;
    hk_pool *acct = from && hk_pool_any() ? hk_pool_retaining((uintptr_t)from) : NULL;
    uint64_t reused = acct ? hk_pool_take(acct, charge) : 0;
    int rc = hk_hip_admit(&dev, charge - reused, &ldev, &skip);
    hipError_t r =
        rc != HK_OK ? (rc == HK_ENOMEM ? hipErrorOutOfMemory : hipErrorNotInitialized) : HK_HIP_NESTED(REAL_CALL);
    if (rc == HK_OK && !skip && r != hipSuccess) hk_mem_release(ldev, charge - reused);
    if (rc != HK_OK || skip || r != hipSuccess) {
        if (reused) hk_pool_keep(acct, -1, reused); /* still the pool's */
        return r;
    }
    /* The whole charge is the allocation's: its free gives it back, to the quota or to the pool. */
    if (hk_hip_remember((uint64_t)(uintptr_t)*out, graph ? HK_KIND_HIP_GRAPHMEM : HK_KIND_HIP_PTR, dev, ldev, charge)) {
        (void)HK_HIP_NESTED(hk_hip.hipFree(*out));
        return hipErrorOutOfMemory;
    }
    if (from) { /* its pool, whether or not it keeps freed memory yet: a threshold may come before the free */
        hk_hip_remember_pool((uint64_t)(uintptr_t)*out, dev, (uintptr_t)from);
        if (!hk_atomic_load_relaxed(&g_pooled)) hk_atomic_store_release(&g_pooled, 1);
    }
    return hipSuccess;
#undef REAL_CALL
}

/* Stream-ordered: undone with a hipFree, which waits for the stream (hipFreeAsync would not). */
HK_EXPORT hipError_t hipMallocAsync(void **p, size_t size, hipStream_t s) {
    HK_HIP_REAL(hk_hip.hipMallocAsync);
    return alloc_stream_ordered(p, size, NULL, s, 0);
}

HK_EXPORT hipError_t hipMallocFromPoolAsync(void **p, size_t size, hipMemPool_t pool, hipStream_t s) {
    HK_HIP_REAL(hk_hip.hipMallocFromPoolAsync);
    return alloc_stream_ordered(p, size, pool, s, 1);
}

/* A freed device pointer: its charge goes back, or, when its pool keeps freed memory, to the pool. */
void hk_hip_forget_ptr(uint64_t key) {
    int ldev, pdev;
    uint64_t size, pool;
    if (hk_track_free(key, HK_KIND_HIP_PTR, &ldev, &size) != HK_OK) return;
    if (hk_atomic_load_acquire(&g_pooled) && hk_track_free(key, HK_KIND_POOLPTR, &pdev, &pool) == HK_OK &&
        hk_pool_any()) {
        hk_pool *a = hk_pool_retaining((uintptr_t)(pool & ~(uint64_t)1));
        if (a) {
            hk_pool_keep(a, ldev, size);
            return;
        }
    }
    hk_mem_release(ldev, size);
}

/* ---------------------------------------------------------------------------
 * Pool attributes: what a pool retains follows its release threshold
 * ------------------------------------------------------------------------- */
/* The threshold is read once and the runtime is given that copy (another thread of the tenant
   could change the value between two reads); one past the pools the books can follow is refused
   with hipErrorOutOfMemory before the runtime sees it. */
HK_EXPORT hipError_t hipMemPoolSetAttribute(hipMemPool_t pool, int attr, void *value) {
    HK_HIP_REAL(hk_hip.hipMemPoolSetAttribute);
    if (hk_hip_nested() || attr != hipMemPoolAttrReleaseThreshold || !value || hk_preload_ready() != HK_STATE_READY)
        return HK_HIP_NESTED(hk_hip.hipMemPoolSetAttribute(pool, attr, value));
    uint64_t threshold;
    memcpy(&threshold, value, sizeof threshold);
    hk_pool *books;
    if (hk_pool_threshold_begin((uintptr_t)pool, threshold, &books) != HK_OK) return hipErrorOutOfMemory;
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemPoolSetAttribute(pool, attr, &threshold));
    hk_pool_threshold_end(books, threshold, r == hipSuccess);
    return r;
}

HK_EXPORT hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t keep) {
    HK_HIP_REAL(hk_hip.hipMemPoolTrimTo);
    int pass = hk_hip_nested();
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemPoolTrimTo(pool, keep));
    if (!pass && r == hipSuccess) hk_pool_trim((uintptr_t)pool, keep);
    return r;
}

HK_EXPORT hipError_t hipMemPoolDestroy(hipMemPool_t pool) {
    HK_HIP_REAL(hk_hip.hipMemPoolDestroy);
    int pass = hk_hip_nested();
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemPoolDestroy(pool));
    if (!pass && r == hipSuccess) hk_pool_destroyed((uintptr_t)pool);
    return r;
}

/* ---------------------------------------------------------------------------
 * Graph memory nodes: charged when added, with their device's quota, for the process's life
 * (rounded up to 2 MiB, the graph pool's granularity).
 * ------------------------------------------------------------------------- */
HK_EXPORT hipError_t hipGraphAddMemAllocNode(hipGraphNode_t *node, hipGraph_t g, const hipGraphNode_t *deps, size_t n,
                                             hipMemAllocNodeParams *params) {
    HK_HIP_REAL(hk_hip.hipGraphAddMemAllocNode);
    if (hk_hip_nested() || !params || params->bytesize == 0)
        return HK_HIP_NESTED(hk_hip.hipGraphAddMemAllocNode(node, g, deps, n, params));
    int dev = params->poolProps.location.type == hipMemLocationTypeDevice ? params->poolProps.location.id : -1;
    uint64_t charge = hk_hip_round(params->bytesize, 2u << 20);
    int ldev = -1, skip = 0;
    int rc = hk_hip_admit(&dev, charge, &ldev, &skip);
    if (rc != HK_OK) return rc == HK_ENOMEM ? hipErrorOutOfMemory : hipErrorNotInitialized;
    hipError_t r = HK_HIP_NESTED(hk_hip.hipGraphAddMemAllocNode(node, g, deps, n, params));
    if (!skip && r != hipSuccess) hk_mem_release(ldev, charge);
    return r;
}
