/* memory.c - the HIP allocation, free and memory-info entry points, charged to the claim's ledger.
 *
 * Each allocation: reserve the charge on the device's ledger index before the runtime allocates
 * (lock free; refused past the quota with hipErrorOutOfMemory, the runtime's own out-of-memory
 * code), run the real call nested, give the charge back if it failed, else remember pointer (or
 * array) -> device, charge, so the free releases exactly that. Frees call the runtime first and
 * release only on success. Host memory (hipHostMalloc, hipMallocHost) is not charged.
 *
 * Charges: the size rounded up (hip.h, hk_hip_charge); pitched memory pitch x height (x depth) as
 * the runtime chose the pitch (an upper bound is reserved first, then settled); arrays the
 * element size from their channel format x the extent. Stream-ordered allocations and their
 * pools are mempool.c; the virtual-memory API (hipMemCreate) is vmm.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "hip.h"

/* ---------------------------------------------------------------------------
 * The bodies: reserve the charge on the device before the runtime allocates, run the real call
 * nested, give the charge back if it failed, else remember it (with its device, which a reset
 * takes it with). Over quota: hipErrorOutOfMemory, the runtime's own out-of-memory code.
 * ------------------------------------------------------------------------- */

/* After a successful allocation charged `reserved` on `ldev`: settle on `actual`. 0, or -1 when
   the actual charge does not fit (everything given back; the caller frees and refuses). */
static int settle(int ldev, uint64_t reserved, uint64_t actual) {
    if (actual <= reserved) {
        hk_mem_release(ldev, reserved - actual);
        return 0;
    }
    if (hk_mem_reserve(ldev, actual - reserved) == HK_OK) return 0;
    hk_mem_release(ldev, reserved);
    return -1;
}

/* A pitched/array allocation, whose size is the runtime's choice: `bound` reserved, `actual` (an
   expression read after the call) settled, the result remembered under `key`/`kind`. */
#define HK_HIP_SIZED(real_fn, bound, call, actual, key, kind, undo)                                         \
    do {                                                                                                    \
        uint64_t charge_ = (bound);                                                                         \
        int dev_ = -1, ldev_, skip_;                                                                        \
        int rc_ = hk_hip_admit(&dev_, charge_, &ldev_, &skip_);                                             \
        if (rc_ != HK_OK) return rc_ == HK_ENOMEM ? hipErrorOutOfMemory : hipErrorNotInitialized;           \
        hipError_t r_ = HK_HIP_NESTED(call);                                                                \
        if (skip_) return r_;                                                                               \
        if (r_ != hipSuccess) {                                                                             \
            hk_mem_release(ldev_, charge_);                                                                 \
            return r_;                                                                                      \
        }                                                                                                   \
        uint64_t actual_ = (actual);                                                                        \
        if (settle(ldev_, charge_, actual_) != 0 || hk_hip_remember((key), (kind), dev_, ldev_, actual_)) { \
            (void)HK_HIP_NESTED(undo);                                                                      \
            return hipErrorOutOfMemory;                                                                     \
        }                                                                                                   \
        return hipSuccess;                                                                                  \
    } while (0)

/* A plain allocation of `size` (in scope) into *`out`: charged its rounded size. */
#define HK_HIP_ALLOC(real_fn, out, call, undo)                                                             \
    do {                                                                                                   \
        HK_HIP_REAL(real_fn);                                                                              \
        if (hk_hip_nested() || !(out) || size == 0) return HK_HIP_NESTED(call);                            \
        HK_HIP_SIZED(real_fn, hk_hip_charge(size), call, hk_hip_charge(size), (uint64_t)(uintptr_t)*(out), \
                     HK_KIND_HIP_PTR, undo);                                                               \
    } while (0)

HK_EXPORT hipError_t hipMalloc(void **p, size_t size) {
    HK_HIP_ALLOC(hk_hip.hipMalloc, p, hk_hip.hipMalloc(p, size), hk_hip.hipFree(*p));
}

HK_EXPORT hipError_t hipMallocManaged(void **p, size_t size, unsigned int flags) {
    HK_HIP_ALLOC(hk_hip.hipMallocManaged, p, hk_hip.hipMallocManaged(p, size, flags), hk_hip.hipFree(*p));
}

HK_EXPORT hipError_t hipExtMallocWithFlags(void **p, size_t size, unsigned int flags) {
    HK_HIP_ALLOC(hk_hip.hipExtMallocWithFlags, p, hk_hip.hipExtMallocWithFlags(p, size, flags), hk_hip.hipFree(*p));
}

/* ---------------------------------------------------------------------------
 * Pitched and array memory: the size is the runtime's choice.
 * ------------------------------------------------------------------------- */

#define PITCH_BOUND(w, rows) hk_hip_charge(hk_hip_round((uint64_t)(w), 512) * (rows))

HK_EXPORT hipError_t hipMallocPitch(void **p, size_t *pitch, size_t width, size_t height) {
    HK_HIP_REAL(hk_hip.hipMallocPitch);
    if (hk_hip_nested() || !p || !pitch || width == 0 || height == 0)
        return HK_HIP_NESTED(hk_hip.hipMallocPitch(p, pitch, width, height));
    HK_HIP_SIZED(hk_hip.hipMallocPitch, PITCH_BOUND(width, height), hk_hip.hipMallocPitch(p, pitch, width, height),
                 hk_hip_charge((uint64_t)*pitch * height), (uint64_t)(uintptr_t)*p, HK_KIND_HIP_PTR,
                 hk_hip.hipFree(*p));
}

HK_EXPORT hipError_t hipMemAllocPitch(hipDeviceptr_t *p, size_t *pitch, size_t width, size_t height,
                                      unsigned int elem) {
    HK_HIP_REAL(hk_hip.hipMemAllocPitch);
    if (hk_hip_nested() || !p || !pitch || width == 0 || height == 0)
        return HK_HIP_NESTED(hk_hip.hipMemAllocPitch(p, pitch, width, height, elem));
    HK_HIP_SIZED(hk_hip.hipMemAllocPitch, PITCH_BOUND(width, height),
                 hk_hip.hipMemAllocPitch(p, pitch, width, height, elem), hk_hip_charge((uint64_t)*pitch * height),
                 (uint64_t)(uintptr_t)*p, HK_KIND_HIP_PTR, hk_hip.hipFree(*p));
}

static uint64_t rows3d(hipExtent e) { return (uint64_t)(e.height ? e.height : 1) * (e.depth ? e.depth : 1); }

HK_EXPORT hipError_t hipMalloc3D(hipPitchedPtr *pp, hipExtent extent) {
    HK_HIP_REAL(hk_hip.hipMalloc3D);
    if (hk_hip_nested() || !pp || extent.width == 0) return HK_HIP_NESTED(hk_hip.hipMalloc3D(pp, extent));
    HK_HIP_SIZED(hk_hip.hipMalloc3D, PITCH_BOUND(extent.width, rows3d(extent)), hk_hip.hipMalloc3D(pp, extent),
                 hk_hip_charge((uint64_t)pp->pitch * rows3d(extent)), (uint64_t)(uintptr_t)pp->ptr, HK_KIND_HIP_PTR,
                 hk_hip.hipFree(pp->ptr));
}

/* An array element's bytes from its channel format (bits per component), at least 1. */
static uint64_t element_bytes(const hipChannelFormatDesc *d) {
    uint64_t bits = (uint64_t)(d->x > 0 ? d->x : 0) + (uint64_t)(d->y > 0 ? d->y : 0) +
                    (uint64_t)(d->z > 0 ? d->z : 0) + (uint64_t)(d->w > 0 ? d->w : 0);
    return bits >= 8 ? bits / 8 : 1;
}

HK_EXPORT hipError_t hipMallocArray(hipArray_t *a, const hipChannelFormatDesc *desc, size_t width, size_t height,
                                    unsigned int flags) {
    HK_HIP_REAL(hk_hip.hipMallocArray);
    if (hk_hip_nested() || !a || !desc || width == 0)
        return HK_HIP_NESTED(hk_hip.hipMallocArray(a, desc, width, height, flags));
    uint64_t bytes = hk_hip_charge(element_bytes(desc) * width * (height ? height : 1));
    HK_HIP_SIZED(hk_hip.hipMallocArray, bytes, hk_hip.hipMallocArray(a, desc, width, height, flags), bytes,
                 (uint64_t)(uintptr_t)*a, HK_KIND_HIP_ARRAY, hk_hip.hipFreeArray(*a));
}

HK_EXPORT hipError_t hipMalloc3DArray(hipArray_t *a, const hipChannelFormatDesc *desc, hipExtent extent,
                                      unsigned int flags) {
    HK_HIP_REAL(hk_hip.hipMalloc3DArray);
    if (hk_hip_nested() || !a || !desc || extent.width == 0)
        return HK_HIP_NESTED(hk_hip.hipMalloc3DArray(a, desc, extent, flags));
    uint64_t bytes = hk_hip_charge(element_bytes(desc) * extent.width * rows3d(extent));
    HK_HIP_SIZED(hk_hip.hipMalloc3DArray, bytes, hk_hip.hipMalloc3DArray(a, desc, extent, flags), bytes,
                 (uint64_t)(uintptr_t)*a, HK_KIND_HIP_ARRAY, hk_hip.hipFreeArray(*a));
}

/* A product of extents and element sizes a tenant chose, saturating: a wrapped product would
   charge a few bytes for an allocation the runtime might still make. */
static uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Every level of a mipmapped array: each halves the extent (down to 1) of the one before. */
static uint64_t mip_elements(hipExtent e, unsigned int levels) {
    uint64_t w = e.width, h = e.height ? e.height : 1, d = e.depth ? e.depth : 1, sum = 0;
    for (unsigned int l = 0; l < (levels ? levels : 1) && l < 64; l++) {
        uint64_t level = sat_mul(sat_mul(w, h), d);
        sum = sum > UINT64_MAX - level ? UINT64_MAX : sum + level;
        w = w > 1 ? w / 2 : 1, h = h > 1 ? h / 2 : 1, d = d > 1 ? d / 2 : 1;
    }
    return sum;
}

/* The driver-style arrays: an element is its format's size (HIP_AD_FORMAT_*) times its channels; a
   layered array's levels keep its layers. */
static uint64_t format_bytes(int f) {
    switch (f) {
        case 0x01:
        case 0x08: return 1; /* (un)signed int8 */
        case 0x02:
        case 0x09:
        case 0x10: return 2; /* (un)signed int16, half */
        default: return 4;   /* (un)signed int32, float; at most 4 B for the others */
    }
}

static uint64_t drv_array_bytes(size_t w, size_t h, size_t d, int format, unsigned int ch, unsigned int flags,
                                unsigned int levels) {
    uint64_t elem = sat_mul(format_bytes(format), ch ? ch : 1), total = 0;
    uint64_t W = w ? w : 1, H = h ? h : 1, D = d ? d : 1;
    for (unsigned int l = 0; l < (levels ? levels : 1) && l < 64; l++) {
        uint64_t level = sat_mul(sat_mul(sat_mul(W, H), D), elem);
        total = total > UINT64_MAX - level ? UINT64_MAX : total + level;
        W = W > 1 ? W / 2 : 1, H = H > 1 ? H / 2 : 1;
        if (!(flags & hipArrayLayered)) D = D > 1 ? D / 2 : 1;
    }
    return total > UINT64_MAX - (4u << 20) ? UINT64_MAX : hk_hip_charge(total);
}

#define DRV_ARRAY(real_fn, bytes, call, key, undo)                                                \
    do {                                                                                          \
        uint64_t b_ = (bytes);                                                                    \
        HK_HIP_SIZED(real_fn, b_, call, b_, (uint64_t)(uintptr_t)(key), HK_KIND_HIP_ARRAY, undo); \
    } while (0)

HK_EXPORT hipError_t hipArrayCreate(hipArray_t *a, const HIP_ARRAY_DESCRIPTOR *d) {
    HK_HIP_REAL(hk_hip.hipArrayCreate);
    if (hk_hip_nested() || !a || !d || d->Width == 0) return HK_HIP_NESTED(hk_hip.hipArrayCreate(a, d));
    DRV_ARRAY(hk_hip.hipArrayCreate, drv_array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels, 0, 1),
              hk_hip.hipArrayCreate(a, d), *a, hk_hip.hipArrayDestroy(*a));
}

HK_EXPORT hipError_t hipArray3DCreate(hipArray_t *a, const HIP_ARRAY3D_DESCRIPTOR *d) {
    HK_HIP_REAL(hk_hip.hipArray3DCreate);
    if (hk_hip_nested() || !a || !d || d->Width == 0) return HK_HIP_NESTED(hk_hip.hipArray3DCreate(a, d));
    DRV_ARRAY(hk_hip.hipArray3DCreate,
              drv_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags, 1),
              hk_hip.hipArray3DCreate(a, d), *a, hk_hip.hipArrayDestroy(*a));
}

HK_EXPORT hipError_t hipMipmappedArrayCreate(hipMipmappedArray_t *a, HIP_ARRAY3D_DESCRIPTOR *d, unsigned int levels) {
    HK_HIP_REAL(hk_hip.hipMipmappedArrayCreate);
    if (hk_hip_nested() || !a || !d || d->Width == 0)
        return HK_HIP_NESTED(hk_hip.hipMipmappedArrayCreate(a, d, levels));
    DRV_ARRAY(hk_hip.hipMipmappedArrayCreate,
              drv_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags, levels),
              hk_hip.hipMipmappedArrayCreate(a, d, levels), *a, hk_hip.hipMipmappedArrayDestroy(*a));
}

HK_EXPORT hipError_t hipMallocMipmappedArray(hipMipmappedArray_t *a, const hipChannelFormatDesc *desc, hipExtent extent,
                                             unsigned int levels, unsigned int flags) {
    HK_HIP_REAL(hk_hip.hipMallocMipmappedArray);
    if (hk_hip_nested() || !a || !desc || extent.width == 0)
        return HK_HIP_NESTED(hk_hip.hipMallocMipmappedArray(a, desc, extent, levels, flags));
    uint64_t elements = sat_mul(element_bytes(desc), mip_elements(extent, levels));
    uint64_t bytes = elements > UINT64_MAX - (4u << 20) ? UINT64_MAX : hk_hip_charge(elements);
    HK_HIP_SIZED(hk_hip.hipMallocMipmappedArray, bytes, hk_hip.hipMallocMipmappedArray(a, desc, extent, levels, flags),
                 bytes, (uint64_t)(uintptr_t)*a, HK_KIND_HIP_ARRAY, hk_hip.hipFreeMipmappedArray(*a));
}

/* ---------------------------------------------------------------------------
 * Frees: the runtime first, the charge released only when it succeeded.
 * ------------------------------------------------------------------------- */
#define HK_HIP_FREE(real_fn, key, forget, call)                                      \
    do {                                                                             \
        HK_HIP_REAL(real_fn);                                                        \
        int pass_ = hk_hip_nested();                                                 \
        hipError_t r_ = HK_HIP_NESTED(call);                                         \
        if (!pass_ && r_ == hipSuccess && (key)) forget((uint64_t)(uintptr_t)(key)); \
        return r_;                                                                   \
    } while (0)

static void forget_array(uint64_t key) { hk_hip_forget(key, HK_KIND_HIP_ARRAY); }

/* A pointer's charge goes back, or to its pool when that pool keeps freed memory (mempool.c). */
HK_EXPORT hipError_t hipFree(void *p) { HK_HIP_FREE(hk_hip.hipFree, p, hk_hip_forget_ptr, hk_hip.hipFree(p)); }

HK_EXPORT hipError_t hipFreeAsync(void *p, hipStream_t s) {
    HK_HIP_FREE(hk_hip.hipFreeAsync, p, hk_hip_forget_ptr, hk_hip.hipFreeAsync(p, s));
}

HK_EXPORT hipError_t hipFreeArray(hipArray_t a) {
    HK_HIP_FREE(hk_hip.hipFreeArray, a, forget_array, hk_hip.hipFreeArray(a));
}

HK_EXPORT hipError_t hipFreeMipmappedArray(hipMipmappedArray_t a) {
    HK_HIP_FREE(hk_hip.hipFreeMipmappedArray, a, forget_array, hk_hip.hipFreeMipmappedArray(a));
}

HK_EXPORT hipError_t hipArrayDestroy(hipArray_t a) {
    HK_HIP_FREE(hk_hip.hipArrayDestroy, a, forget_array, hk_hip.hipArrayDestroy(a));
}

HK_EXPORT hipError_t hipMipmappedArrayDestroy(hipMipmappedArray_t a) {
    HK_HIP_FREE(hk_hip.hipMipmappedArrayDestroy, a, forget_array, hk_hip.hipMipmappedArrayDestroy(a));
}

/* ---------------------------------------------------------------------------
 * The claim's view of memory (torch.cuda.mem_get_info on ROCm calls hipMemGetInfo)
 * ------------------------------------------------------------------------- */
HK_EXPORT hipError_t hipMemGetInfo(size_t *free_b, size_t *total_b) {
    HK_HIP_REAL(hk_hip.hipMemGetInfo);
    if (hk_hip_nested()) return HK_HIP_NESTED(hk_hip.hipMemGetInfo(free_b, total_b));
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return hipErrorNotInitialized;
    hipError_t r = HK_HIP_NESTED(hk_hip.hipMemGetInfo(free_b, total_b));
    if (r == hipSuccess && st == HK_STATE_READY && free_b && total_b) hk_hip_meminfo(-1, free_b, total_b);
    return r;
}

HK_EXPORT hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t dev) {
    HK_HIP_REAL(hk_hip.hipDeviceTotalMem);
    if (hk_hip_nested()) return HK_HIP_NESTED(hk_hip.hipDeviceTotalMem(bytes, dev));
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return hipErrorNotInitialized;
    hipError_t r = HK_HIP_NESTED(hk_hip.hipDeviceTotalMem(bytes, dev));
    if (r == hipSuccess && st == HK_STATE_READY && bytes && dev >= 0) hk_hip_meminfo(dev, NULL, bytes);
    return r;
}
