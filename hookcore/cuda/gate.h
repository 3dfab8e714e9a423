/* gate.h - every call that submits device work (launches, copies, memsets) goes through GATED.
 *
 * Fast path: configured without a compute limit, or dormant -> straight to the driver (one load,
 * one branch). Failed closed -> CUDA_ERROR_NOT_INITIALIZED. Otherwise the meter brackets the call
 * (core/meter.h): it may throttle first, then times the work on `stream` and charges it.
 */
#ifndef HOOKCORE_CUDA_GATE_H
#define HOOKCORE_CUDA_GATE_H

#include "../core/meter.h"
#include "copy.h"
#include "shim.h"

static inline int fast_path(void) {
    int s = hk_atomic_load_relaxed(&hk_preload_xstate);
    return HK_LIKELY((s == HK_STATE_READY || s == HK_STATE_DORMANT) && !hk_preload_limiter_on());
}

/* A default stream (legacy or per-thread): it cannot be destroyed or captured behind the launching
   thread's back. A created stream can: the meter lists its batch (HK_WORK_SHARED), and
   cuStreamDestroy and every capture begin record the listed ends on that stream first (launch.c).
   Either way a launch may leave its batch's end event for later (meter.h, Deferred end events). */
#define HK_DEFAULT_STREAM(s) ((s) == NULL || (s) == CU_STREAM_LEGACY || (s) == CU_STREAM_PER_THREAD)

/* Kernels and graphs. */
#define GATED(real_fn, stream, sig, call)                                                                           \
    GATED_WORK(real_fn, stream, sig, HK_WORK_SM | HK_WORK_DEFER | (HK_DEFAULT_STREAM(stream) ? 0 : HK_WORK_SHARED), \
               call)

/* `work`: HK_WORK_SM (kernels, graphs: charged x the context's SM fraction) or HK_WORK_COPY
   (copies, memsets: charged their device time in full). */
#define GATED_WORK(real_fn, stream, sig, work, call)                                      \
    do {                                                                                  \
        if (HK_UNLIKELY(!real_fn)) return CUDA_ERROR_NOT_INITIALIZED;                     \
        if (fast_path()) return call;                                                     \
        if (hk_preload_ready() == HK_STATE_FAILCLOSED) return CUDA_ERROR_NOT_INITIALIZED; \
        if (!hk_preload_limiter_on()) return call;                                        \
        CUstream s_ = (stream);                                                           \
        hk_meter_batch *b_ = hk_meter_before_work(s_, (work));                            \
        CUresult r_ = call;                                                               \
        hk_meter_after(b_, s_, r_ == CUDA_SUCCESS, (sig));                                \
        return r_;                                                                        \
    } while (0)

#endif
