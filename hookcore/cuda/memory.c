/* memory.c - linear device memory (cuMemAlloc, managed, pitched) and CUDA arrays, charged to the
 * claim's ledger through the allocation ladder of alloc.h; stream-ordered allocations, pools and
 * graph memory are in mempool.c, VMM handles in vmm.c.
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
#include "alloc.h"

/* ---------------------------------------------------------------------------
 * Linear allocations
 * ------------------------------------------------------------------------- */
HK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    if (!hk_real.cuMemAlloc_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || size == 0) return hk_real.cuMemAlloc_v2(dptr, size);
    HK_ALLOC(hk_charge_of(size), hk_real.cuMemAlloc_v2(dptr, size), *dptr, HK_KIND_PTR, hk_real.cuMemFree_v2(*dptr));
}

HK_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    if (!hk_real.cuMemAllocManaged) return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || size == 0) return hk_real.cuMemAllocManaged(dptr, size, flags);
    HK_ALLOC(hk_charge_of(size), hk_real.cuMemAllocManaged(dptr, size, flags), *dptr, HK_KIND_PTR,
             hk_real.cuMemFree_v2(*dptr));
}

/* Pitch: reserve an upper bound (pitch alignment is at most 512 B), then settle on the real
   pitch x height the driver returned. */
HK_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h, unsigned int elem) {
    if (!hk_real.cuMemAllocPitch_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !pitch || w == 0 || h == 0) return hk_real.cuMemAllocPitch_v2(dptr, pitch, w, h, elem);
    hk_alloc a;
    CUresult r = hk_alloc_admit(&a, hk_charge_of(hk_round_up(w, 512) * h));
    if (r != CUDA_SUCCESS) return r;
    HK_ALLOC_CALL(&a, hk_real.cuMemAllocPitch_v2(dptr, pitch, w, h, elem));
    uint64_t actual = hk_charge_of((uint64_t)*pitch * h);
    if (actual < a.charge) {
        hk_mem_release(a.dev, a.charge - actual);
    } else if (actual > a.charge && hk_mem_reserve(a.dev, actual - a.charge) != HK_OK) {
        hk_real.cuMemFree_v2(*dptr);
        hk_mem_release(a.dev, a.charge);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a.charge = actual;
    HK_ALLOC_KEEP(&a, *dptr, HK_KIND_PTR, hk_real.cuMemFree_v2(*dptr));
    return CUDA_SUCCESS;
}

HK_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    if (!hk_real.cuMemFree_v2) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMemFree_v2(p);
    if (r == CUDA_SUCCESS && p) hk_alloc_forget_ptr(p);
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
    return hk_charge_of(total);
}

HK_EXPORT CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!hk_real.cuArrayCreate_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (!arr || !d) return hk_real.cuArrayCreate_v2(arr, d);
    HK_ALLOC(array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels, 0, 1), hk_real.cuArrayCreate_v2(arr, d),
             (uint64_t)(uintptr_t)*arr, HK_KIND_ARRAY, hk_real.cuArrayDestroy(*arr));
}

HK_EXPORT CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    if (!hk_real.cuArray3DCreate_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (!arr || !d) return hk_real.cuArray3DCreate_v2(arr, d);
    HK_ALLOC(array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags, 1),
             hk_real.cuArray3DCreate_v2(arr, d), (uint64_t)(uintptr_t)*arr, HK_KIND_ARRAY,
             hk_real.cuArrayDestroy(*arr));
}

HK_EXPORT CUresult cuArrayDestroy(CUarray arr) {
    if (!hk_real.cuArrayDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuArrayDestroy(arr);
    if (r == CUDA_SUCCESS) hk_alloc_forget((uint64_t)(uintptr_t)arr, HK_KIND_ARRAY);
    return r;
}

/* Mipmapped arrays share the array key space; bit 63 keeps the two handle kinds apart. */
#define MIPMAP_KEY(a) ((uint64_t)(uintptr_t)(a) | (1ULL << 63))

HK_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                          unsigned int levels) {
    if (!hk_real.cuMipmappedArrayCreate) return CUDA_ERROR_NOT_INITIALIZED;
    if (!arr || !d) return hk_real.cuMipmappedArrayCreate(arr, d, levels);
    HK_ALLOC(array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags, levels),
             hk_real.cuMipmappedArrayCreate(arr, d, levels), MIPMAP_KEY(*arr), HK_KIND_ARRAY,
             hk_real.cuMipmappedArrayDestroy(*arr));
}

HK_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr) {
    if (!hk_real.cuMipmappedArrayDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = hk_real.cuMipmappedArrayDestroy(arr);
    if (r == CUDA_SUCCESS) hk_alloc_forget(MIPMAP_KEY(arr), HK_KIND_ARRAY);
    return r;
}
