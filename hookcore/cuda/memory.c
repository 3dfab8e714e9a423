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

static inline uint64_t charge_of(size_t size) {
    return size >= MiB2 ? round_up(size, MiB2) : round_up(size, 512);
}

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
    if (*dev < 0) return CUDA_ERROR_OUT_OF_MEMORY;   /* GPU outside the claim */
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
#define ALLOC_BODY(real_call, ptr_expr, undo_call)                        \
    if (!hk_real_fn) return CUDA_ERROR_NOT_INITIALIZED;                  \
    if (!dptr || size == 0) return real_call;                            \
    uint64_t charge = charge_of(size);                                   \
    int dev, skip;                                                       \
    CUresult r = admit_current(charge, &dev, &skip);                     \
    if (r != CUDA_SUCCESS) return r;                                     \
    r = real_call;                                                       \
    if (skip) return r;                                                  \
    if (r != CUDA_SUCCESS) {                                             \
        hk_mem_release(dev, charge);                                     \
        return r;                                                        \
    }                                                                    \
    if (remember((ptr_expr), HK_KIND_PTR, dev, charge)) {                \
        undo_call;                                                       \
        return CUDA_ERROR_OUT_OF_MEMORY;                                 \
    }                                                                    \
    return CUDA_SUCCESS;

HK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    __typeof__(hk_real.cuMemAlloc_v2) hk_real_fn = hk_real.cuMemAlloc_v2;
    ALLOC_BODY(hk_real_fn(dptr, size), *dptr, hk_real.cuMemFree_v2(*dptr))
}

HK_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    __typeof__(hk_real.cuMemAllocManaged) hk_real_fn = hk_real.cuMemAllocManaged;
    ALLOC_BODY(hk_real_fn(dptr, size, flags), *dptr, hk_real.cuMemFree_v2(*dptr))
}

static CUresult alloc_async(__typeof__(hk_real.cuMemAllocAsync) hk_real_fn,
                            __typeof__(hk_real.cuMemFreeAsync) undo, CUdeviceptr *dptr, size_t size,
                            CUstream s) {
    ALLOC_BODY(hk_real_fn(dptr, size, s), *dptr, undo(*dptr, s))
}

HK_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s) {
    return alloc_async(hk_real.cuMemAllocAsync, hk_real.cuMemFreeAsync, dptr, size, s);
}
HK_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s) {
    return alloc_async(hk_real.cuMemAllocAsync_ptsz, hk_real.cuMemFreeAsync_ptsz, dptr, size, s);
}

/* Pool allocations are charged to the current context's device (the stream's device). */
static CUresult alloc_pool(__typeof__(hk_real.cuMemAllocFromPoolAsync) hk_real_fn,
                           __typeof__(hk_real.cuMemFreeAsync) undo, CUdeviceptr *dptr, size_t size,
                           CUmemoryPool pool, CUstream s) {
    ALLOC_BODY(hk_real_fn(dptr, size, pool, s), *dptr, undo(*dptr, s))
}

HK_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    return alloc_pool(hk_real.cuMemAllocFromPoolAsync, hk_real.cuMemFreeAsync, dptr, size, pool, s);
}
HK_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                                CUstream s) {
    return alloc_pool(hk_real.cuMemAllocFromPoolAsync_ptsz, hk_real.cuMemFreeAsync_ptsz, dptr, size, pool, s);
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
    if (r == CUDA_SUCCESS && p) forget(p, HK_KIND_PTR);
    return r;
}

/* The memory returns to the stream's pool in stream order; the quota is given back at once,
   as the driver may hand the same memory to the next allocation on that stream. */
HK_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    if (!hk_real.cuMemFreeAsync) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemFreeAsync(p, s);
    if (r == CUDA_SUCCESS && p) forget(p, HK_KIND_PTR);
    return r;
}
HK_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
    if (!hk_real.cuMemFreeAsync_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemFreeAsync_ptsz(p, s);
    if (r == CUDA_SUCCESS && p) forget(p, HK_KIND_PTR);
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

HK_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
    if (!hk_real.cuMemCreate) return CUDA_ERROR_NOT_INITIALIZED;
    int st = hk_preload_ready();
    if (HK_UNLIKELY(st == HK_STATE_FAILCLOSED)) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || !h || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return hk_real.cuMemCreate(h, size, prop, flags);   /* host memory or invalid: not charged */
    int dev = hk_dev_of_ordinal(prop->location.id);
    if (dev < 0) return CUDA_ERROR_OUT_OF_MEMORY;
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
    return CUDA_SUCCESS;
}

HK_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    if (!hk_real.cuMemRelease) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemRelease(h);
    if (r == CUDA_SUCCESS) forget(h, HK_KIND_VMM);
    return r;
}

/* ---------------------------------------------------------------------------
 * Arrays (CUDA arrays, 3D/layered arrays, mipmapped arrays)
 * ------------------------------------------------------------------------- */
static uint64_t format_bytes(CUarray_format f) {
    switch (f) {
    case 0x01: case 0x08: return 1;                 /* (un)signed int8 */
    case 0x02: case 0x09: case 0x10: return 2;      /* (un)signed int16, half */
    case 0x03: case 0x0a: case 0x20: return 4;      /* (un)signed int32, float */
    default: return 4;                              /* newer formats: at most 4 B per channel-element
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
    if (r != CUDA_SUCCESS) { hk_mem_release(dev, charge); return r; }
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
    if (r != CUDA_SUCCESS) { hk_mem_release(dev, charge); return r; }
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
    if (r != CUDA_SUCCESS) { hk_mem_release(dev, charge); return r; }
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
