/* context.c - contexts and their limits are device memory: charged to the claim like allocations.
 *
 * A context holds device memory of its own (on an H200 about 500 MiB: code, the per-thread stack
 * of every resident thread, printf FIFO, malloc heap). The driver does not say how much, so the
 * claim's config says it per device (HOOKCORE_CONTEXT_MEMORY_<i>, written by the node daemon from
 * a measurement of that GPU model): one charge per process and device for the primary context
 * (the first time the process retains it or allocates on the device, as HAMi-core charges one
 * context per process), one per context it creates (cuCtxCreate*, green contexts), released when
 * that context is destroyed. A context that would not fit is refused with
 * CUDA_ERROR_OUT_OF_MEMORY before the driver creates it, so a cuCtxCreate loop ends at the quota.
 *
 * cuCtxSetLimit enlarges a context: the malloc heap (charged above its 8 MiB default), the printf
 * FIFO (above 1 MiB) and the stack (above 1 KiB per thread, times every thread the device can
 * hold resident: SMs x threads per SM). The increase is reserved before the driver is asked, and
 * given back when the limit shrinks or the context is destroyed.
 *
 * A context that goes takes the device pointers allocated while it was current (cuMemAlloc, pitch,
 * managed): their charges go back when the driver says it went (alloc.h), so a program that resets
 * its device (cudaDeviceReset, Numba's cuda.close()) and allocates again is not refused for memory
 * it no longer holds. Only on CUDA_SUCCESS: a destruction the driver refused frees nothing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../core/meter.h"
#include "alloc.h"
#include "shim.h"

#define MiB ((uint64_t)1 << 20)

static _Atomic int g_primary[HK_MAX_DEVICES]; /* 1: this process's primary context is charged */
#define HK_ORDINALS 64
static void *_Atomic g_primary_ctx[HK_ORDINALS]; /* each CUDA ordinal's primary context, once retained */

static CUresult reserve(int ldev, uint64_t bytes) {
    if (bytes == 0) return CUDA_SUCCESS;
    int rc = hk_mem_reserve(ldev, bytes);
    if (rc == HK_OK) return CUDA_SUCCESS;
    return rc == HK_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult hk_context_charge_primary(int ldev) {
    if (ldev < 0 || ldev >= HK_MAX_DEVICES) return CUDA_SUCCESS;
    if (HK_LIKELY(hk_atomic_load_acquire(&g_primary[ldev]))) return CUDA_SUCCESS;
    uint64_t bytes = hk_context_bytes(ldev);
    if (bytes == 0) return CUDA_SUCCESS;
    int expect = 0;
    if (!hk_atomic_cas_strong_acq_rel(&g_primary[ldev], &expect, 1)) return CUDA_SUCCESS;
    CUresult r = reserve(ldev, bytes);
    if (r != CUDA_SUCCESS) hk_atomic_store_release(&g_primary[ldev], 0); /* the next use tries again */
    return r;
}

CUresult hk_context_charge_current(int ldev) {
    if (ldev < 0 || ldev >= HK_MAX_DEVICES || HK_LIKELY(hk_atomic_load_acquire(&g_primary[ldev]))) return CUDA_SUCCESS;
    if (hk_context_bytes(ldev) == 0) return CUDA_SUCCESS;
    CUcontext c = NULL;
    int d;
    uint64_t sz;
    if (hk_real.cuCtxGetCurrent && hk_real.cuCtxGetCurrent(&c) == CUDA_SUCCESS && c &&
        hk_track_lookup((uint64_t)(uintptr_t)c, HK_KIND_CTX, &d, &sz) == HK_OK)
        return CUDA_SUCCESS; /* a context this process created: charged at creation */
    return hk_context_charge_primary(ldev);
}

/* A forked child has no context (CUDA does not survive fork): charge again on first use. */
void hk_context_atfork_child(void) HK_HIDDEN;
void hk_context_atfork_child(void) {
    for (int i = 0; i < HK_MAX_DEVICES; i++) hk_atomic_store_relaxed(&g_primary[i], 0);
    for (int i = 0; i < HK_ORDINALS; i++) hk_atomic_store_relaxed(&g_primary_ctx[i], NULL);
}

static int ready_dev(CUdevice ord, int *ldev) {
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return -1;
    if (st == HK_STATE_DORMANT) return 0;
    *ldev = hk_dev_of_ordinal(ord);
    return 1;
}

HK_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    if (!hk_real.cuDevicePrimaryCtxRetain) return CUDA_ERROR_NOT_INITIALIZED;
    int ldev = -1, st = ready_dev(dev, &ldev);
    if (st < 0) return CUDA_ERROR_NOT_INITIALIZED;
    if (st > 0 && ldev >= 0) {
        CUresult r = hk_context_charge_primary(ldev);
        if (r != CUDA_SUCCESS) return r;
    }
    CUresult r = hk_real.cuDevicePrimaryCtxRetain(ctx, dev);
    if (r == CUDA_SUCCESS && ctx && dev >= 0 && dev < HK_ORDINALS) hk_atomic_store_release(&g_primary_ctx[dev], *ctx);
    return r;
}

/* Whether a context destruction call that returned `r` took the context: unless the driver refused
   the handle or was not running, it did (it may report an earlier asynchronous error and still
   destroy it). */
static int took(CUresult r) {
    return r != CUDA_ERROR_INVALID_CONTEXT && r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_INVALID_DEVICE &&
           r != CUDA_ERROR_NOT_INITIALIZED;
}

/* A primary context reset, or released (to zero references: the driver then destroys it), comes
   back under the same handle as a new context, which reads the environment again (an MPS client's
   active-thread percentage): the SM share cached for the old one is forgotten (sm_share.c), and
   the meter is told around the call (meter.h). A release that leaves references (the context still
   active after it) took nothing. */
static CUresult primary_gone(CUresult (*real_fn)(CUdevice), CUdevice dev, int release) {
    if (!real_fn) return CUDA_ERROR_NOT_INITIALIZED;
    void *ctx = dev >= 0 && dev < HK_ORDINALS ? hk_atomic_load_acquire(&g_primary_ctx[dev]) : NULL;
    unsigned token = hk_meter_context_going(ctx ? ctx : HK_METER_ANY_CONTEXT);
    CUresult r = real_fn(dev);
    int went = took(r);
    unsigned flags = 0;
    int active = 0;
    if (went && release && hk_real.cuDevicePrimaryCtxGetState &&
        hk_real.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active)
        went = 0;
    hk_meter_context_gone(token, went);
    if (r == CUDA_SUCCESS) hk_cuda_sm_share_forget(NULL);
    if (r == CUDA_SUCCESS && went) hk_alloc_context_gone(ctx);
    return r;
}

HK_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    return primary_gone(hk_real.cuDevicePrimaryCtxRelease, dev, 1);
}
HK_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    return primary_gone(hk_real.cuDevicePrimaryCtxRelease_v2, dev, 1);
}
HK_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
    return primary_gone(hk_real.cuDevicePrimaryCtxReset, dev, 0);
}
HK_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    return primary_gone(hk_real.cuDevicePrimaryCtxReset_v2, dev, 0);
}

/* A created context: reserve its charge, create it, remember it (or give the charge back). */
#define CREATE_BODY(real_fn, out, dev, call)                                                         \
    if (!(real_fn)) return CUDA_ERROR_NOT_INITIALIZED;                                               \
    int ldev = -1, st = ready_dev((dev), &ldev);                                                     \
    if (st < 0) return CUDA_ERROR_NOT_INITIALIZED;                                                   \
    if (st == 0 || !(out)) return call;                                                              \
    if (ldev < 0) return CUDA_ERROR_OUT_OF_MEMORY; /* a GPU outside the claim */                     \
    uint64_t bytes = hk_context_bytes(ldev);                                                         \
    CUresult r = reserve(ldev, bytes);                                                               \
    if (r != CUDA_SUCCESS) return r;                                                                 \
    r = call;                                                                                        \
    if (r != CUDA_SUCCESS) {                                                                         \
        hk_mem_release(ldev, bytes);                                                                 \
        return r;                                                                                    \
    }                                                                                                \
    if (hk_track_alloc((uint64_t)(uintptr_t)*(out), HK_KIND_CTX, ldev, bytes) != HK_OK)              \
        hk_mem_release(ldev, bytes); /* cannot remember it: do not hold a charge no destroy frees */ \
    return CUDA_SUCCESS;

HK_EXPORT CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev){
    CREATE_BODY(hk_real.cuCtxCreate_v2, ctx, dev, hk_real.cuCtxCreate_v2(ctx, flags, dev))} HK_EXPORT CUresult
    cuCtxCreate_v3(CUcontext *ctx, void *affinity, int n, unsigned int flags,
                   CUdevice dev){CREATE_BODY(hk_real.cuCtxCreate_v3, ctx, dev,
                                             hk_real.cuCtxCreate_v3(ctx, affinity, n, flags, dev))} HK_EXPORT CUresult
    cuCtxCreate_v4(CUcontext *ctx, void *params, unsigned int flags,
                   CUdevice dev){CREATE_BODY(hk_real.cuCtxCreate_v4, ctx, dev,
                                             hk_real.cuCtxCreate_v4(ctx, params, flags, dev))} HK_EXPORT CUresult
    cuGreenCtxCreate(CUgreenCtx *ctx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
    CREATE_BODY(hk_real.cuGreenCtxCreate, ctx, dev, hk_real.cuGreenCtxCreate(ctx, desc, dev, flags))
}

static void forget_key(uint64_t key, uint32_t kind) {
    int dev;
    uint64_t size;
    if (hk_track_free(key, kind, &dev, &size) == HK_OK) hk_mem_release(dev, size);
}

static uint64_t limit_key(uint64_t ctx, CUlimit which) { return ctx * 4 + (uint64_t)which; }

static void forget_context(uint64_t key) {
    forget_key(key, HK_KIND_CTX);
    for (int l = 0; l < 3; l++) forget_key(limit_key(key, (CUlimit)l), HK_KIND_CTXLIMIT);
}

HK_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    if (!hk_real.cuCtxDestroy_v2) return CUDA_ERROR_NOT_INITIALIZED;
    unsigned token = hk_meter_context_going(ctx ? (void *)ctx : HK_METER_ANY_CONTEXT);
    CUresult r = hk_real.cuCtxDestroy_v2(ctx);
    hk_meter_context_gone(token, took(r));
    if (r == CUDA_SUCCESS && ctx) {
        forget_context((uint64_t)(uintptr_t)ctx);
        hk_cuda_sm_share_forget(ctx);
        hk_alloc_context_gone(ctx);
    }
    return r;
}
HK_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx ctx) {
    if (!hk_real.cuGreenCtxDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    CUcontext as_ctx = NULL; /* the handle its work is launched under */
    if (!ctx || !hk_real.cuCtxFromGreenCtx || hk_real.cuCtxFromGreenCtx(&as_ctx, ctx) != CUDA_SUCCESS) as_ctx = NULL;
    unsigned token = hk_meter_context_going(as_ctx ? (void *)as_ctx : HK_METER_ANY_CONTEXT);
    CUresult r = hk_real.cuGreenCtxDestroy(ctx);
    hk_meter_context_gone(token, took(r));
    if (r == CUDA_SUCCESS && ctx) {
        forget_context((uint64_t)(uintptr_t)ctx);
        hk_cuda_sm_share_forget(NULL); /* its CUcontext (cuCtxFromGreenCtx) is another handle */
        hk_alloc_context_gone(as_ctx);
    }
    return r;
}

/* Device memory a limit of `value` takes beyond what the context already holds by default. */
static uint64_t limit_bytes(CUlimit which, size_t value, CUdevice ord) {
    switch (which) {
        case CU_LIMIT_MALLOC_HEAP_SIZE: return value > 8 * MiB ? (uint64_t)value - 8 * MiB : 0;
        case CU_LIMIT_PRINTF_FIFO_SIZE: return value > MiB ? (uint64_t)value - MiB : 0;
        case CU_LIMIT_STACK_SIZE: {
            if (value <= 1024) return 0;
            int sms = 0, threads = 0;
            if (!hk_real.cuDeviceGetAttribute ||
                hk_real.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ord) != CUDA_SUCCESS ||
                hk_real.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, ord) !=
                    CUDA_SUCCESS ||
                sms <= 0 || threads <= 0) {
                sms = 256; /* unknown: assume a large device (over- rather than under-charge) */
                threads = 2048;
            }
            uint64_t per = (uint64_t)value - 1024, n = (uint64_t)sms * (uint64_t)threads;
            return per > UINT64_MAX / n ? UINT64_MAX : per * n;
        }
        default: return 0;
    }
}

HK_EXPORT CUresult cuCtxSetLimit(CUlimit which, size_t value) {
    if (!hk_real.cuCtxSetLimit) return CUDA_ERROR_NOT_INITIALIZED;
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED;
    if (st == HK_STATE_DORMANT || which > CU_LIMIT_MALLOC_HEAP_SIZE) return hk_real.cuCtxSetLimit(which, value);
    int ldev;
    CUdevice ord;
    CUcontext ctx = NULL;
    if (hk_current_dev(&ldev, &ord) != CUDA_SUCCESS || !hk_real.cuCtxGetCurrent ||
        hk_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return hk_real.cuCtxSetLimit(which, value); /* no context: the driver says so */
    if (ldev < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t key = limit_key((uint64_t)(uintptr_t)ctx, which), want = limit_bytes(which, value, ord), have = 0;
    int odev;
    if (hk_track_lookup(key, HK_KIND_CTXLIMIT, &odev, &have) != HK_OK) have = 0;
    if (want > have) {
        CUresult r = reserve(ldev, want - have);
        if (r != CUDA_SUCCESS) return r;
    }
    CUresult r = hk_real.cuCtxSetLimit(which, value);
    if (r != CUDA_SUCCESS) {
        if (want > have) hk_mem_release(ldev, want - have);
        return r;
    }
    if (want < have) hk_mem_release(ldev, have - want);
    hk_track_free(key, HK_KIND_CTXLIMIT, &odev, &have);
    if (want > 0 && hk_track_alloc(key, HK_KIND_CTXLIMIT, ldev, want) != HK_OK) hk_mem_release(ldev, want);
    return CUDA_SUCCESS;
}
