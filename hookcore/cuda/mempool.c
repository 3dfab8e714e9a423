/* mempool.c - stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync), the pools
 * they come from, and graph memory (allocation nodes, allocations captured from a stream): charged
 * through the allocation ladder of alloc.h.
 *
 * A pool with a release threshold (cuMemPoolSetAttribute(RELEASE_THRESHOLD)) keeps freed memory
 * reserved: its books are core/pool.h's (freed allocations stay charged up to the threshold, the
 * pool's next allocations are charged against them first; lowering the threshold, cuMemPoolTrimTo
 * and cuMemPoolDestroy give the excess back). Each allocation's pool is remembered with it, so a
 * threshold set between an allocation and its free still keeps it.
 *
 * An allocation made while its stream is being captured becomes a graph allocation node: its
 * memory belongs to the graph's pool, kept reserved across launches, so it is charged as graph
 * memory (see cuGraphAddMemAllocNode) and the captured free gives nothing back.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "../core/pool.h"
#include "alloc.h"

static _Atomic int g_pooled; /* some stream-ordered allocation had its pool remembered */

static int capturing(CUstream s) {
    int c = 0;
    return hk_real.cuStreamIsCapturing && hk_real.cuStreamIsCapturing(s, &c) == CUDA_SUCCESS && c;
}

/* The pool a stream-ordered allocation comes from: the given one, or the current pool of the
   current context's device; NULL when the driver does not say. */
static CUmemoryPool pool_of(CUmemoryPool given) {
    CUmemoryPool p = given;
    CUdevice ord;
    if (!p && (!hk_real.cuCtxGetDevice || hk_real.cuCtxGetDevice(&ord) != CUDA_SUCCESS || !hk_real.cuDeviceGetMemPool ||
               hk_real.cuDeviceGetMemPool(&p, ord) != CUDA_SUCCESS))
        return NULL;
    return p;
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
    CUmemoryPool from = graph ? NULL : pool_of(from_pool ? pool : NULL);
    hk_pool *acct = from && hk_pool_any() ? hk_pool_retaining((uintptr_t)from) : NULL;
    uint64_t reused = acct ? hk_pool_take(acct, charge) : 0;
    hk_alloc a;
    CUresult r = hk_alloc_admit(&a, charge - reused);
    if (r == CUDA_SUCCESS) r = hk_alloc_called(&a, REAL_CALL);
    if (r != CUDA_SUCCESS || a.skip) {
        if (reused) hk_pool_keep(acct, -1, reused); /* still the pool's */
        return r;
    }
    a.charge = charge; /* the whole allocation: what its free gives back (to the quota or the pool) */
    HK_ALLOC_KEEP(&a, *dptr, graph ? HK_KIND_GRAPHMEM : HK_KIND_PTR, undo(*dptr, s));
    if (from) { /* its pool, whether or not it keeps freed memory yet: a threshold may come before the free */
        int odev;
        uint64_t old;
        (void)hk_track_free(*dptr, HK_KIND_POOLPTR, &odev, &old); /* a stale entry of this address */
        if (hk_track_alloc(*dptr, HK_KIND_POOLPTR, a.dev, (uint64_t)(uintptr_t)from | 1u) == HK_OK &&
            !hk_atomic_load_relaxed(&g_pooled))
            hk_atomic_store_release(&g_pooled, 1);
    }
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
    if (hk_atomic_load_acquire(&g_pooled) && hk_track_free(p, HK_KIND_POOLPTR, &pdev, &pool) == HK_OK &&
        hk_pool_any()) {
        hk_pool *a = hk_pool_retaining((uintptr_t)(pool & ~(uint64_t)1));
        if (a) {
            hk_pool_keep(a, dev, size);
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

/* The threshold is read once and the driver is given that copy (another thread of the tenant could
   change the value between two reads); one past the pools the books can follow is refused. */
HK_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value) {
    if (!hk_real.cuMemPoolSetAttribute) return CUDA_ERROR_NOT_INITIALIZED;
    if (attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD || !value || hk_preload_ready() != HK_STATE_READY)
        return hk_real.cuMemPoolSetAttribute(pool, attr, value);
    uint64_t threshold;
    memcpy(&threshold, value, sizeof threshold);
    hk_pool *books;
    if (hk_pool_threshold_begin((uintptr_t)pool, threshold, &books) != HK_OK) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = hk_real.cuMemPoolSetAttribute(pool, attr, &threshold);
    hk_pool_threshold_end(books, threshold, r == CUDA_SUCCESS);
    return r;
}

HK_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    if (!hk_real.cuMemPoolTrimTo) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemPoolTrimTo(pool, keep);
    if (r == CUDA_SUCCESS) hk_pool_trim((uintptr_t)pool, keep);
    return r;
}

HK_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    if (!hk_real.cuMemPoolDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemPoolDestroy(pool);
    if (r == CUDA_SUCCESS) hk_pool_destroyed((uintptr_t)pool);
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
