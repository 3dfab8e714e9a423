/* mempool.c - stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync), the pools
 * they come from, and graph memory (allocation nodes, allocations captured from a stream): charged
 * through the allocation ladder of alloc.h.
 *
 * A pool with a release threshold keeps up to that much freed memory reserved on the device
 * (cuMemPoolSetAttribute(RELEASE_THRESHOLD); the default pool's threshold is 0). Its freed
 * allocations therefore stay charged, as the pool's "retained" bytes, up to the threshold; the
 * pool's next allocations are charged against what it retains first, so reuse costs nothing.
 * Lowering the threshold, cuMemPoolTrimTo and cuMemPoolDestroy give the excess back. Without a
 * retaining pool (no threshold set) none of this runs.
 *
 * An allocation made while its stream is being captured becomes a graph allocation node: its
 * memory belongs to the graph's pool, kept reserved across launches, so it is charged as graph
 * memory (see cuGraphAddMemAllocNode) and the captured free gives nothing back.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "alloc.h"

/* ---------------------------------------------------------------------------
 * Pools that keep freed memory
 * ------------------------------------------------------------------------- */
#define HK_MAX_POOLS 256
typedef struct pool_acct {
    _Atomic(uintptr_t) xpool; /* 0 = free entry */
    _Atomic int xdev;
    _Atomic uint64_t xthreshold;
    _Atomic uint64_t xretained; /* charged, freed, kept by the pool */
} pool_acct;
static pool_acct g_pools[HK_MAX_POOLS];
static _Atomic int g_any_retaining; /* some pool has a threshold > 0 */

static pool_acct *pool_find(CUmemoryPool p, int create) {
    uintptr_t key = (uintptr_t)p;
    if (!key) return NULL;
    for (int i = 0; i < HK_MAX_POOLS; i++)
        if (hk_atomic_load_acquire(&g_pools[i].xpool) == key) return &g_pools[i];
    if (!create) return NULL;
    for (int i = 0; i < HK_MAX_POOLS; i++) {
        uintptr_t expect = 0;
        if (hk_atomic_cas_strong_acq_rel(&g_pools[i].xpool, &expect, key)) {
            hk_atomic_store_relaxed(&g_pools[i].xdev, -1);
            hk_atomic_store_relaxed(&g_pools[i].xthreshold, 0);
            hk_atomic_store_relaxed(&g_pools[i].xretained, 0);
            return &g_pools[i];
        }
        if (expect == key) return &g_pools[i];
    }
    return NULL;
}

/* Take up to `want` bytes from what the pool retains (already charged). */
static uint64_t pool_take(pool_acct *a, uint64_t want) {
    uint64_t r = hk_atomic_load_acquire(&a->xretained), take;
    do { take = r < want ? r : want; } while (take && !hk_atomic_cas_weak_acq_rel(&a->xretained, &r, r - take));
    return take;
}

/* Keep `bytes` of a freed allocation as the pool's retained memory, up to its threshold;
   release the rest. */
static void pool_keep(pool_acct *a, int dev, uint64_t bytes) {
    uint64_t t = hk_atomic_load_acquire(&a->xthreshold);
    uint64_t r = hk_atomic_load_acquire(&a->xretained), keep;
    do {
        keep = r >= t ? 0 : (t - r < bytes ? t - r : bytes);
    } while (keep && !hk_atomic_cas_weak_acq_rel(&a->xretained, &r, r + keep));
    if (bytes > keep) hk_mem_release(dev, bytes - keep);
}

/* Trim the pool's retained memory to `keep` bytes. */
static void pool_trim(pool_acct *a, uint64_t keep) {
    uint64_t r = hk_atomic_load_acquire(&a->xretained);
    while (r > keep && !hk_atomic_cas_weak_acq_rel(&a->xretained, &r, keep)) {}
    int dev = hk_atomic_load_relaxed(&a->xdev);
    if (r > keep && dev >= 0) hk_mem_release(dev, r - keep);
}

static int capturing(CUstream s) {
    int c = 0;
    return hk_real.cuStreamIsCapturing && hk_real.cuStreamIsCapturing(s, &c) == CUDA_SUCCESS && c;
}

/* The pool a stream-ordered allocation comes from: the given one, or the current pool of the
   current context's device. Only needed while some pool retains memory. */
static pool_acct *pool_of(CUmemoryPool given) {
    if (!hk_atomic_load_relaxed(&g_any_retaining)) return NULL;
    CUmemoryPool p = given;
    CUdevice ord;
    if (!p && (!hk_real.cuCtxGetDevice || hk_real.cuCtxGetDevice(&ord) != CUDA_SUCCESS || !hk_real.cuDeviceGetMemPool ||
               hk_real.cuDeviceGetMemPool(&p, ord) != CUDA_SUCCESS))
        return NULL;
    pool_acct *a = pool_find(p, 0);
    return a && hk_atomic_load_relaxed(&a->xthreshold) ? a : NULL;
}

/* ---------------------------------------------------------------------------
 * Stream-ordered allocations and frees
 * ------------------------------------------------------------------------- */
static CUresult alloc_stream_ordered(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s,
                                     __typeof__(hk_real.cuMemFreeAsync) undo, int from_pool,
                                     __typeof__(hk_real.cuMemAllocAsync) real_async,
                                     __typeof__(hk_real.cuMemAllocFromPoolAsync) real_pool) {
    if (!(from_pool ? (void *)real_pool : (void *)real_async)) return CUDA_ERROR_NOT_INITIALIZED;
#define REAL_CALL (from_pool ? real_pool(dptr, size, pool, s) : real_async(dptr, size, s))
    if (!dptr || size == 0) return REAL_CALL;
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT) return REAL_CALL;
    uint64_t charge = hk_charge_of(size);
    int graph = capturing(s);
    pool_acct *acct = graph ? NULL : pool_of(from_pool ? pool : NULL);
    uint64_t reused = acct ? pool_take(acct, charge) : 0;
    hk_alloc a;
    CUresult r = hk_alloc_admit(&a, charge - reused);
    if (r == CUDA_SUCCESS) r = hk_alloc_called(&a, REAL_CALL);
    if (r != CUDA_SUCCESS || a.skip) {
        if (reused) pool_keep(acct, hk_atomic_load_relaxed(&acct->xdev), reused); /* still the pool's */
        return r;
    }
    if (acct) {
        hk_atomic_store_relaxed(&acct->xdev, a.dev);
        hk_track_alloc(*dptr, HK_KIND_POOLPTR, a.dev, (uint64_t)(uintptr_t)(from_pool ? pool : NULL) | 1u);
    }
    a.charge = charge; /* the whole allocation: what its free gives back (to the quota or the pool) */
    HK_ALLOC_KEEP(&a, *dptr, graph ? HK_KIND_GRAPHMEM : HK_KIND_PTR, undo(*dptr, s));
    return CUDA_SUCCESS;
#undef REAL_CALL
}

HK_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s) {
    return alloc_stream_ordered(dptr, size, NULL, s, hk_real.cuMemFreeAsync, 0, hk_real.cuMemAllocAsync, NULL);
}
HK_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s) {
    return alloc_stream_ordered(dptr, size, NULL, s, hk_real.cuMemFreeAsync_ptsz, 0, hk_real.cuMemAllocAsync_ptsz,
                                NULL);
}

/* Pool allocations are charged to the current context's device (the stream's device). */
HK_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    return alloc_stream_ordered(dptr, size, pool, s, hk_real.cuMemFreeAsync, 1, NULL, hk_real.cuMemAllocFromPoolAsync);
}
HK_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    return alloc_stream_ordered(dptr, size, pool, s, hk_real.cuMemFreeAsync_ptsz, 1, NULL,
                                hk_real.cuMemAllocFromPoolAsync_ptsz);
}

/* A freed device pointer: its charge goes back, or to its pool's retained memory. */
void hk_alloc_forget_ptr(CUdeviceptr p) {
    int dev, pdev;
    uint64_t size, pool;
    if (hk_track_free(p, HK_KIND_PTR, &dev, &size) != HK_OK) return; /* graph memory stays charged */
    if (hk_atomic_load_relaxed(&g_any_retaining) && hk_track_free(p, HK_KIND_POOLPTR, &pdev, &pool) == HK_OK) {
        CUmemoryPool h = (CUmemoryPool)(uintptr_t)(pool & ~(uint64_t)1);
        CUdevice ord;
        if (!h && hk_real.cuCtxGetDevice && hk_real.cuCtxGetDevice(&ord) == CUDA_SUCCESS && hk_real.cuDeviceGetMemPool)
            hk_real.cuDeviceGetMemPool(&h, ord);
        pool_acct *a = pool_find(h, 0);
        if (a && hk_atomic_load_relaxed(&a->xthreshold)) {
            pool_keep(a, dev, size);
            return;
        }
    }
    hk_mem_release(dev, size);
}

/* The memory returns to the stream's pool in stream order; the quota is given back at once (the
   driver may hand the same memory to the next allocation on that stream), unless the pool keeps
   freed memory (its retained bytes stay charged) or the free is captured into a graph. */
HK_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    if (!hk_real.cuMemFreeAsync) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemFreeAsync(p, s);
    if (r == CUDA_SUCCESS && p) hk_alloc_forget_ptr(p);
    return r;
}
HK_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
    if (!hk_real.cuMemFreeAsync_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemFreeAsync_ptsz(p, s);
    if (r == CUDA_SUCCESS && p) hk_alloc_forget_ptr(p);
    return r;
}

/* ---------------------------------------------------------------------------
 * Pool attributes: what a pool retains follows its release threshold
 * ------------------------------------------------------------------------- */
HK_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    if (!hk_real.cuMemPoolCreate) return CUDA_ERROR_NOT_INITIALIZED;
    return hk_real.cuMemPoolCreate(pool, props);
}

HK_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value) {
    if (!hk_real.cuMemPoolSetAttribute) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemPoolSetAttribute(pool, attr, value);
    if (r != CUDA_SUCCESS || attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD || !value ||
        hk_preload_ready() != HK_STATE_READY)
        return r;
    uint64_t t = *(const uint64_t *)value;
    pool_acct *a = pool_find(pool, t != 0);
    if (!a) return r; /* (more than HK_MAX_POOLS retaining pools: their frees release at once) */
    hk_atomic_store_release(&a->xthreshold, t);
    if (t) hk_atomic_store_release(&g_any_retaining, 1);
    pool_trim(a, t);
    return r;
}

HK_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    if (!hk_real.cuMemPoolTrimTo) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemPoolTrimTo(pool, keep);
    pool_acct *a = r == CUDA_SUCCESS ? pool_find(pool, 0) : NULL;
    if (a) pool_trim(a, keep);
    return r;
}

HK_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    if (!hk_real.cuMemPoolDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemPoolDestroy(pool);
    pool_acct *a = r == CUDA_SUCCESS ? pool_find(pool, 0) : NULL;
    if (a) {
        hk_atomic_store_release(&a->xthreshold, 0);
        pool_trim(a, 0);
        hk_atomic_store_release(&a->xpool, 0);
    }
    return r;
}

/* ---------------------------------------------------------------------------
 * Graph memory nodes: the graph's allocation is made when it is launched and stays reserved in
 * the device's graph memory pool between launches (until the application trims it), so a node is
 * charged when it is added, with its device's quota, and stays charged for the process's life.
 * ------------------------------------------------------------------------- */
static CUresult graph_admit(const CUDA_MEM_ALLOC_NODE_PARAMS *p, hk_alloc *a) {
    *a = (hk_alloc)HK_ALLOC_NONE;
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || !p || p->bytesize == 0) return CUDA_SUCCESS;
    int ldev;
    if (p->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        ldev = hk_dev_of_ordinal(p->poolProps.location.id);
    else if (hk_current_dev(&ldev, NULL) != CUDA_SUCCESS)
        return CUDA_SUCCESS;
    CUresult r = hk_alloc_on(a, ldev);
    return r == CUDA_SUCCESS ? hk_alloc_reserve(a, hk_round_up(p->bytesize, HK_MIB2)) : r;
}

HK_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                          CUDA_MEM_ALLOC_NODE_PARAMS *params) {
    if (!hk_real.cuGraphAddMemAllocNode) return CUDA_ERROR_NOT_INITIALIZED;
    hk_alloc a;
    CUresult r = graph_admit(params, &a);
    if (r != CUDA_SUCCESS) return r;
    return hk_alloc_called(&a, hk_real.cuGraphAddMemAllocNode(node, g, deps, n, params));
}

HK_EXPORT CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                  CUgraphNodeParams *params) {
    if (!hk_real.cuGraphAddNode) return CUDA_ERROR_NOT_INITIALIZED;
    hk_alloc a = HK_ALLOC_NONE;
    if (params && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUresult r = graph_admit(&params->u.alloc, &a);
        if (r != CUDA_SUCCESS) return r;
    }
    return hk_alloc_called(&a, hk_real.cuGraphAddNode(node, g, deps, n, params));
}

HK_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, const void *edata, size_t n,
                                     CUgraphNodeParams *params) {
    if (!hk_real.cuGraphAddNode_v2) return CUDA_ERROR_NOT_INITIALIZED;
    hk_alloc a = HK_ALLOC_NONE;
    if (params && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUresult r = graph_admit(&params->u.alloc, &a);
        if (r != CUDA_SUCCESS) return r;
    }
    return hk_alloc_called(&a, hk_real.cuGraphAddNode_v2(node, g, deps, edata, n, params));
}
