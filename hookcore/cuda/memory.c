/* memory.c - every device-memory allocation path, charged to the claim's ledger.
 *
 * Pattern for each allocation: resolve the ledger device, reserve the charge (hk_mem_reserve,
 * lock free, fails when the claim's quota would be exceeded), call the real allocator, release
 * the charge if it failed, else remember (pointer or handle -> device, charge) so the free knows
 * what to give back. Frees call the driver first and release only on success.
 *
 * What a call is charged:
 *   cuMemAlloc/Managed/Async/FromPool: the size rounded up to 512 B, or to 2 MiB from 2 MiB up
 *     (the driver's page size for large allocations);
 *   cuMemAllocPitch: pitch x height as returned by the driver;
 *   cuMemCreate: the handle size rounded up to the allocation granularity (VMM; map/unmap are free);
 *   arrays: width x height x depth x channels x element size (all mip levels for mipmapped arrays).
 * Host allocations are not device memory and are not charged.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "shim.h"

#define MiB2 ((uint64_t)2 << 20)

static inline uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static inline uint64_t charge_of(size_t size) { return size >= MiB2 ? round_up(size, MiB2) : round_up(size, 512); }

/* Reserve `charge` on the ledger device of the current context. Returns CUDA_SUCCESS with *dev
   set, CUDA_ERROR_OUT_OF_MEMORY when over quota, an error when failed closed; *skip = 1 when
   there is no current context (the real call then reports that itself, nothing is charged). */
static CUresult admit_current(uint64_t charge, int *dev, int *skip) {
    *skip = 0;
    int st = hk_preload_ready();
    if (HK_UNLIKELY(st == HK_STATE_FAILCLOSED)) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || hk_current_dev(dev, NULL) != CUDA_SUCCESS) {
        *skip = 1;
        return CUDA_SUCCESS;
    }
    if (*dev < 0) return CUDA_ERROR_OUT_OF_MEMORY; /* GPU outside the claim */
    CUresult cr = hk_context_charge_current(*dev); /* the process's context first (context.c) */
    if (cr != CUDA_SUCCESS) return cr;
    int rc = hk_mem_reserve(*dev, charge);
    if (HK_LIKELY(rc == HK_OK)) return CUDA_SUCCESS;
    return rc == HK_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_INITIALIZED;
}

/* Remember a successful allocation. On a table failure the allocation cannot be accounted for,
   so it is undone by the caller (returns nonzero). */
static int remember(uint64_t key, uint32_t kind, int dev, uint64_t charge) {
    int rc = hk_track_alloc(key, kind, dev, charge);
    if (HK_LIKELY(rc == HK_OK)) return 0;
    if (rc == HK_EEXIST) {
        /* The key was freed through a path we do not see (e.g. a v1 free); drop the stale charge. */
        int odev;
        uint64_t osize;
        if (hk_track_free(key, kind, &odev, &osize) == HK_OK) hk_mem_release(odev, osize);
        if (hk_track_alloc(key, kind, dev, charge) == HK_OK) return 0;
    }
    hk_mem_release(dev, charge);
    return 1;
}

/* Release what a freed key was charged. */
static void forget(uint64_t key, uint32_t kind) {
    int dev;
    uint64_t size;
    if (hk_track_free(key, kind, &dev, &size) == HK_OK) hk_mem_release(dev, size);
}

/* ---------------------------------------------------------------------------
 * Linear allocations
 * ------------------------------------------------------------------------- */
#define ALLOC_BODY(real_call, ptr_expr, undo_call)        \
    if (!hk_real_fn) return CUDA_ERROR_NOT_INITIALIZED;   \
    if (!dptr || size == 0) return real_call;             \
    uint64_t charge = charge_of(size);                    \
    int dev, skip;                                        \
    CUresult r = admit_current(charge, &dev, &skip);      \
    if (r != CUDA_SUCCESS) return r;                      \
    r = real_call;                                        \
    if (skip) return r;                                   \
    if (r != CUDA_SUCCESS) {                              \
        hk_mem_release(dev, charge);                      \
        return r;                                         \
    }                                                     \
    if (remember((ptr_expr), HK_KIND_PTR, dev, charge)) { \
        undo_call;                                        \
        return CUDA_ERROR_OUT_OF_MEMORY;                  \
    }                                                     \
    return CUDA_SUCCESS;

HK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    __typeof__(hk_real.cuMemAlloc_v2) hk_real_fn = hk_real.cuMemAlloc_v2;
    ALLOC_BODY(hk_real_fn(dptr, size), *dptr, hk_real.cuMemFree_v2(*dptr))
}

HK_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    __typeof__(hk_real.cuMemAllocManaged) hk_real_fn = hk_real.cuMemAllocManaged;
    ALLOC_BODY(hk_real_fn(dptr, size, flags), *dptr, hk_real.cuMemFree_v2(*dptr))
}

/* ---------------------------------------------------------------------------
 * Stream-ordered allocations: pools that keep freed memory, and stream capture.
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
    uint64_t charge = charge_of(size);
    int graph = capturing(s);
    pool_acct *acct = graph ? NULL : pool_of(from_pool ? pool : NULL);
    uint64_t reused = acct ? pool_take(acct, charge) : 0;
    int dev, skip;
    CUresult r = admit_current(charge - reused, &dev, &skip);
    if (r != CUDA_SUCCESS) {
        if (reused) pool_keep(acct, hk_atomic_load_relaxed(&acct->xdev), reused);
        return r;
    }
    r = REAL_CALL;
    if (skip || r != CUDA_SUCCESS) {
        if (!skip) hk_mem_release(dev, charge - reused);
        if (reused) pool_keep(acct, hk_atomic_load_relaxed(&acct->xdev), reused); /* still the pool's */
        return r;
    }
    if (acct) {
        hk_atomic_store_relaxed(&acct->xdev, dev);
        hk_track_alloc(*dptr, HK_KIND_POOLPTR, dev, (uint64_t)(uintptr_t)(from_pool ? pool : NULL) | 1u);
    }
    if (remember(*dptr, graph ? HK_KIND_GRAPHMEM : HK_KIND_PTR, dev, charge)) {
        undo(*dptr, s);
        return CUDA_ERROR_OUT_OF_MEMORY;
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
static void forget_ptr(CUdeviceptr p) {
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
static CUresult graph_admit(const CUDA_MEM_ALLOC_NODE_PARAMS *p, int *dev, uint64_t *charge) {
    *dev = -1;
    *charge = 0;
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || !p || p->bytesize == 0) return CUDA_SUCCESS;
    int ldev;
    if (p->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        ldev = hk_dev_of_ordinal(p->poolProps.location.id);
    else if (hk_current_dev(&ldev, NULL) != CUDA_SUCCESS)
        return CUDA_SUCCESS;
    if (ldev < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult cr = hk_context_charge_current(ldev);
    if (cr != CUDA_SUCCESS) return cr;
    uint64_t c = round_up(p->bytesize, MiB2);
    int rc = hk_mem_reserve(ldev, c);
    if (rc != HK_OK) return rc == HK_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_INITIALIZED;
    *dev = ldev;
    *charge = c;
    return CUDA_SUCCESS;
}

static CUresult graph_settle(CUresult r, int dev, uint64_t charge) {
    if (r != CUDA_SUCCESS && charge) hk_mem_release(dev, charge);
    return r;
}

HK_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                          CUDA_MEM_ALLOC_NODE_PARAMS *params) {
    if (!hk_real.cuGraphAddMemAllocNode) return CUDA_ERROR_NOT_INITIALIZED;
    int dev;
    uint64_t charge;
    CUresult r = graph_admit(params, &dev, &charge);
    if (r != CUDA_SUCCESS) return r;
    return graph_settle(hk_real.cuGraphAddMemAllocNode(node, g, deps, n, params), dev, charge);
}

HK_EXPORT CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                  CUgraphNodeParams *params) {
    if (!hk_real.cuGraphAddNode) return CUDA_ERROR_NOT_INITIALIZED;
    int dev = -1;
    uint64_t charge = 0;
    if (params && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUresult r = graph_admit(&params->u.alloc, &dev, &charge);
        if (r != CUDA_SUCCESS) return r;
    }
    return graph_settle(hk_real.cuGraphAddNode(node, g, deps, n, params), dev, charge);
}

HK_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, const void *edata, size_t n,
                                     CUgraphNodeParams *params) {
    if (!hk_real.cuGraphAddNode_v2) return CUDA_ERROR_NOT_INITIALIZED;
    int dev = -1;
    uint64_t charge = 0;
    if (params && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUresult r = graph_admit(&params->u.alloc, &dev, &charge);
        if (r != CUDA_SUCCESS) return r;
    }
    return graph_settle(hk_real.cuGraphAddNode_v2(node, g, deps, edata, n, params), dev, charge);
}

/* Pitch: reserve an upper bound (pitch alignment is at most 512 B), then settle on the real
   pitch x height the driver returned. */
HK_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h, unsigned int elem) {
    if (!hk_real.cuMemAllocPitch_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !pitch || w == 0 || h == 0) return hk_real.cuMemAllocPitch_v2(dptr, pitch, w, h, elem);
    uint64_t charge = charge_of(round_up(w, 512) * h);
    int dev, skip;
    CUresult r = admit_current(charge, &dev, &skip);
    if (r != CUDA_SUCCESS) return r;
    r = hk_real.cuMemAllocPitch_v2(dptr, pitch, w, h, elem);
    if (skip) return r;
    if (r != CUDA_SUCCESS) {
        hk_mem_release(dev, charge);
        return r;
    }
    uint64_t actual = charge_of((uint64_t)*pitch * h);
    if (actual < charge) {
        hk_mem_release(dev, charge - actual);
    } else if (actual > charge && hk_mem_reserve(dev, actual - charge) != HK_OK) {
        hk_real.cuMemFree_v2(*dptr);
        hk_mem_release(dev, charge);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (remember(*dptr, HK_KIND_PTR, dev, actual)) {
        hk_real.cuMemFree_v2(*dptr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

HK_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    if (!hk_real.cuMemFree_v2) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemFree_v2(p);
    if (r == CUDA_SUCCESS && p) forget_ptr(p);
    return r;
}

/* The memory returns to the stream's pool in stream order; the quota is given back at once (the
   driver may hand the same memory to the next allocation on that stream), unless the pool keeps
   freed memory (its retained bytes stay charged) or the free is captured into a graph. */
HK_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    if (!hk_real.cuMemFreeAsync) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemFreeAsync(p, s);
    if (r == CUDA_SUCCESS && p) forget_ptr(p);
    return r;
}
HK_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
    if (!hk_real.cuMemFreeAsync_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemFreeAsync_ptsz(p, s);
    if (r == CUDA_SUCCESS && p) forget_ptr(p);
    return r;
}

/* ---------------------------------------------------------------------------
 * Virtual memory management: physical memory is created by cuMemCreate, so that is what is
 * charged; cuMemMap/cuMemUnmap/cuMemAddressReserve move no physical memory.
 * ------------------------------------------------------------------------- */
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
        g = MiB2;
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
        forget(h, HK_KIND_VMM);
    }
}

HK_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
    if (!hk_real.cuMemCreate) return CUDA_ERROR_NOT_INITIALIZED;
    int st = hk_preload_ready();
    if (HK_UNLIKELY(st == HK_STATE_FAILCLOSED)) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || !h || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return hk_real.cuMemCreate(h, size, prop, flags); /* host memory or invalid: not charged */
    int dev = hk_dev_of_ordinal(prop->location.id);
    if (dev < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult cr = hk_context_charge_current(dev);
    if (cr != CUDA_SUCCESS) return cr;
    uint64_t charge = round_up(size, granularity_of(prop));
    int rc = hk_mem_reserve(dev, charge);
    if (rc != HK_OK) return rc == HK_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemCreate(h, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        hk_mem_release(dev, charge);
        return r;
    }
    if (remember(*h, HK_KIND_VMM, dev, charge)) {
        hk_real.cuMemRelease(*h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
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
        charge = round_up(size, MiB2);
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

/* ---------------------------------------------------------------------------
 * Arrays (CUDA arrays, 3D/layered arrays, mipmapped arrays)
 * ------------------------------------------------------------------------- */
static uint64_t format_bytes(CUarray_format f) {
    switch (f) {
        case 0x01:
        case 0x08: return 1; /* (un)signed int8 */
        case 0x02:
        case 0x09:
        case 0x10: return 2; /* (un)signed int16, half */
        case 0x03:
        case 0x0a:
        case 0x20: return 4; /* (un)signed int32, float */
        default:
            return 4; /* newer formats: at most 4 B per channel-element
                                                       except 64-bit-block BC formats, close enough */
    }
}

#define CUDA_ARRAY3D_LAYERED 0x01

static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch, unsigned flags,
                            unsigned levels) {
    uint64_t elem = format_bytes(f) * (ch ? ch : 1), total = 0;
    uint64_t W = w ? w : 1, H = h ? h : 1, D = d ? d : 1;
    for (unsigned l = 0; l < (levels ? levels : 1); l++) {
        total += W * H * D * elem;
        W = W > 1 ? W / 2 : 1;
        H = H > 1 ? H / 2 : 1;
        if (!(flags & CUDA_ARRAY3D_LAYERED)) D = D > 1 ? D / 2 : 1;
    }
    return charge_of(total);
}

static CUresult array_admit(uint64_t charge, int *dev, int *skip) { return admit_current(charge, dev, skip); }

HK_EXPORT CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!hk_real.cuArrayCreate_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (!arr || !d) return hk_real.cuArrayCreate_v2(arr, d);
    uint64_t charge = array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels, 0, 1);
    int dev, skip;
    CUresult r = array_admit(charge, &dev, &skip);
    if (r != CUDA_SUCCESS) return r;
    r = hk_real.cuArrayCreate_v2(arr, d);
    if (skip) return r;
    if (r != CUDA_SUCCESS) {
        hk_mem_release(dev, charge);
        return r;
    }
    if (remember((uint64_t)(uintptr_t)*arr, HK_KIND_ARRAY, dev, charge)) {
        hk_real.cuArrayDestroy(*arr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

HK_EXPORT CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    if (!hk_real.cuArray3DCreate_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (!arr || !d) return hk_real.cuArray3DCreate_v2(arr, d);
    uint64_t charge = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags, 1);
    int dev, skip;
    CUresult r = array_admit(charge, &dev, &skip);
    if (r != CUDA_SUCCESS) return r;
    r = hk_real.cuArray3DCreate_v2(arr, d);
    if (skip) return r;
    if (r != CUDA_SUCCESS) {
        hk_mem_release(dev, charge);
        return r;
    }
    if (remember((uint64_t)(uintptr_t)*arr, HK_KIND_ARRAY, dev, charge)) {
        hk_real.cuArrayDestroy(*arr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

HK_EXPORT CUresult cuArrayDestroy(CUarray arr) {
    if (!hk_real.cuArrayDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuArrayDestroy(arr);
    if (r == CUDA_SUCCESS) forget((uint64_t)(uintptr_t)arr, HK_KIND_ARRAY);
    return r;
}

/* Mipmapped arrays share the array key space; bit 63 keeps the two handle kinds apart. */
#define MIPMAP_KEY(a) ((uint64_t)(uintptr_t)(a) | (1ULL << 63))

HK_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                          unsigned int levels) {
    if (!hk_real.cuMipmappedArrayCreate) return CUDA_ERROR_NOT_INITIALIZED;
    if (!arr || !d) return hk_real.cuMipmappedArrayCreate(arr, d, levels);
    uint64_t charge = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags, levels);
    int dev, skip;
    CUresult r = array_admit(charge, &dev, &skip);
    if (r != CUDA_SUCCESS) return r;
    r = hk_real.cuMipmappedArrayCreate(arr, d, levels);
    if (skip) return r;
    if (r != CUDA_SUCCESS) {
        hk_mem_release(dev, charge);
        return r;
    }
    if (remember(MIPMAP_KEY(*arr), HK_KIND_ARRAY, dev, charge)) {
        hk_real.cuMipmappedArrayDestroy(*arr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

HK_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr) {
    if (!hk_real.cuMipmappedArrayDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMipmappedArrayDestroy(arr);
    if (r == CUDA_SUCCESS) forget(MIPMAP_KEY(arr), HK_KIND_ARRAY);
    return r;
}
