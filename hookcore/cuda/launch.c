/* launch.c - kernel and graph launches through the compute limiter (core/meter.h).
 *
 * The meter does the measuring, batching, charging and throttling; this file gives it CUDA's
 * events, contexts and stream-capture state, and wraps every launch entry point. A batch's
 * signature is a hash of the kernels with their grid and block shapes, or of the graphs, it
 * launched (repeated work is charged its uncontended cost, see meter.h). Kernels and graphs are
 * charged their device time x the share of the device's SMs their context may use (sm_share.c).
 *
 * With no compute limit configured (or no configuration at all) a launch costs one predictable
 * branch on top of the driver call.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../core/limiter.h"
#include "../core/meter.h"
#include "gate.h"
#include "shim.h"

/* ---------------------------------------------------------------------------
 * The meter's operations, in CUDA terms
 * ------------------------------------------------------------------------- */
static __thread CUcontext t_ctx; /* the last context this thread launched into ... */
static __thread int t_ldev;      /* ... its ledger device, */
static __thread CUdevice t_ord;  /* its CUDA ordinal */
static __thread unsigned t_gen;  /* and hk_cuda_ctx_generation() then (a handle can come back) */

static int op_current(void **ctx, int *ldev) {
    CUcontext c = NULL;
    if (hk_real.cuCtxGetCurrent(&c) != CUDA_SUCCESS || !c) return -1;
    unsigned gen = hk_cuda_ctx_generation();
    if (c != t_ctx || gen != t_gen) {
        int d;
        CUdevice ord;
        if (hk_current_dev(&d, &ord) != CUDA_SUCCESS) return -1;
        t_ctx = c;
        t_ldev = d;
        t_ord = ord;
        t_gen = gen;
    }
    *ctx = c;
    *ldev = t_ldev;
    return 0;
}

/* Called by the meter right after op_current, for the context it returned. */
static uint32_t op_sm_share_ppm(void *ctx, void *s) {
    if ((CUcontext)ctx != t_ctx) return HK_SM_PPM_FULL; /* not the context just resolved: unknown */
    return hk_cuda_sm_share_ppm((CUcontext)ctx, t_ldev, t_ord, (CUstream)s);
}

static int op_capturing(void *s) {
    int c = 0;
    return hk_real.cuStreamIsCapturing && hk_real.cuStreamIsCapturing((CUstream)s, &c) == CUDA_SUCCESS && c;
}

/* The calling thread's stream-capture interaction mode (hk_meter_ops.capture_mode). */
#define CU_STREAM_CAPTURE_MODE_RELAXED 2
static int op_capture_mode(int mode) {
    int m = mode == HK_CAPTURE_MODE_RELAXED ? CU_STREAM_CAPTURE_MODE_RELAXED : mode;
    return hk_real.cuThreadExchangeStreamCaptureMode && hk_real.cuThreadExchangeStreamCaptureMode(&m) == CUDA_SUCCESS
               ? m
               : -1;
}

static int op_event_create(void **ev) {
    return hk_real.cuEventCreate((CUevent *)ev, CU_EVENT_DEFAULT) == CUDA_SUCCESS ? 0 : -1;
}
static void op_event_destroy(void *ev) { hk_real.cuEventDestroy_v2((CUevent)ev); }
static int op_event_record(void *ev, void *s) {
    return hk_real.cuEventRecord((CUevent)ev, (CUstream)s) == CUDA_SUCCESS ? 0 : -1;
}
static int op_event_done(void *ev) { return hk_real.cuEventQuery((CUevent)ev) != CUDA_ERROR_NOT_READY; }
static void op_event_wait(void *ev) { hk_real.cuEventSynchronize((CUevent)ev); }

/* A deferred end event, recorded by the thread that owns the batch; a context switch since its last
   launch (a default stream is its context's) is undone for the call. */
static int op_event_record_in(void *ev, void *s, void *ctx) {
    CUcontext cur = NULL, popped = NULL;
    if (hk_real.cuCtxGetCurrent(&cur) != CUDA_SUCCESS) return -1;
    if (cur == (CUcontext)ctx) return op_event_record(ev, s);
    if (hk_real.cuCtxPushCurrent_v2((CUcontext)ctx) != CUDA_SUCCESS) return -1;
    int r = op_event_record(ev, s);
    hk_real.cuCtxPopCurrent_v2(&popped);
    return r;
}

static CUresult (*g_elapsed)(float *, CUevent, CUevent);
static int op_event_elapsed_ns(void *a, void *b, int64_t *ns) {
    float ms = 0;
    if (g_elapsed(&ms, (CUevent)a, (CUevent)b) != CUDA_SUCCESS) return -1;
    *ns = (int64_t)((double)ms * 1e6);
    return 0;
}

static hk_meter_ops g_ops = {
    .current = op_current,
    .capturing = op_capturing,
    .event_destroy = op_event_destroy,
    .event_record = op_event_record,
    .event_done = op_event_done,
    .event_wait = op_event_wait,
    .event_elapsed_ns = op_event_elapsed_ns,
    .sm_share_ppm = op_sm_share_ppm,
    .capture_mode = op_capture_mode,
};

void hk_cuda_meter_setup(void) {
    /* CUDA 12.8 added cuEventElapsedTime_v2 (same signature); prefer it where it exists. */
    g_elapsed = hk_real.cuEventElapsedTime_v2 ? hk_real.cuEventElapsedTime_v2 : hk_real.cuEventElapsedTime;
    int have = hk_real.cuEventCreate && hk_real.cuEventDestroy_v2 && hk_real.cuEventRecord && hk_real.cuEventQuery &&
               hk_real.cuEventSynchronize && g_elapsed && hk_real.cuCtxGetCurrent;
    if (!have && hk_preload_limiter_on()) {
        hk_log("the driver lacks the event API; compute limits are not enforced");
        return;
    }
    g_ops.event_create = op_event_create;
    /* End events may wait for a host wait (sync.c flushes them) where a context can be switched to. */
    if (hk_real.cuCtxPushCurrent_v2 && hk_real.cuCtxPopCurrent_v2) g_ops.event_record_in = op_event_record_in;
    g_ops.clock_ratio_milli = hk_preload_clock_ratio_milli; /* from whichever shim reads clocks */
    g_ops.device_alone = hk_preload_device_alone;           /* from whichever shim lists processes */
    hk_meter_setup(&g_ops);
}

/* ---------------------------------------------------------------------------
 * Interposers. Fast path: state ready and no limiter -> straight to the driver.
 * ------------------------------------------------------------------------- */
#define KSIG                                                                             \
    ((uint64_t)(uintptr_t)f * 31 + ((uint64_t)gx << 40 ^ (uint64_t)gy << 20 ^ gz) * 17 + \
     ((uint64_t)bx << 20 ^ (uint64_t)by << 10 ^ bz) + shmem)
#define XSIG                                                                               \
    (c ? ((uint64_t)(uintptr_t)f * 31 +                                                    \
          ((uint64_t)c->gridDimX << 40 ^ (uint64_t)c->gridDimY << 20 ^ c->gridDimZ) * 17 + \
          ((uint64_t)c->blockDimX << 20 ^ c->blockDimY << 10 ^ c->blockDimZ))              \
       : 1)

HK_EXPORT CUresult cuLaunchKernel(HK_LAUNCH_ARGS, void **params, void **extra) {
    GATED(hk_real.cuLaunchKernel, s, KSIG, hk_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}
HK_EXPORT CUresult cuLaunchKernel_ptsz(HK_LAUNCH_ARGS, void **params, void **extra) {
    GATED(hk_real.cuLaunchKernel_ptsz, HK_PTSZ(s), KSIG,
          hk_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}
HK_EXPORT CUresult cuLaunchCooperativeKernel(HK_LAUNCH_ARGS, void **params) {
    GATED(hk_real.cuLaunchCooperativeKernel, s, KSIG,
          hk_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}
HK_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(HK_LAUNCH_ARGS, void **params) {
    GATED(hk_real.cuLaunchCooperativeKernel_ptsz, HK_PTSZ(s), KSIG,
          hk_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}
HK_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GATED(hk_real.cuLaunchKernelEx, c ? c->hStream : NULL, XSIG, hk_real.cuLaunchKernelEx(c, f, params, extra));
}
HK_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GATED(hk_real.cuLaunchKernelEx_ptsz, HK_PTSZ(c ? c->hStream : NULL), XSIG,
          hk_real.cuLaunchKernelEx_ptsz(c, f, params, extra));
}
HK_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    GATED(hk_real.cuGraphLaunch, s, (uint64_t)(uintptr_t)g * 0x100000001b3ULL, hk_real.cuGraphLaunch(g, s));
}
HK_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    GATED(hk_real.cuGraphLaunch_ptsz, HK_PTSZ(s), (uint64_t)(uintptr_t)g * 0x100000001b3ULL,
          hk_real.cuGraphLaunch_ptsz(g, s));
}

/* The legacy launches (deprecated, still exported): a 1x1 or WxH grid on the default stream, or
   on a stream. Metered like the rest, or they would be a way around the compute share. */
#define LSIG(w, h) ((uint64_t)(uintptr_t)f * 31 + ((uint64_t)(unsigned)(w) << 40 ^ (uint64_t)(unsigned)(h) << 20) * 17)
HK_EXPORT CUresult cuLaunch(CUfunction f) { GATED(hk_real.cuLaunch, NULL, LSIG(1, 1), hk_real.cuLaunch(f)); }
HK_EXPORT CUresult cuLaunchGrid(CUfunction f, int gw, int gh) {
    GATED(hk_real.cuLaunchGrid, NULL, LSIG(gw, gh), hk_real.cuLaunchGrid(f, gw, gh));
}
HK_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int gw, int gh, CUstream s) {
    GATED(hk_real.cuLaunchGridAsync, s, LSIG(gw, gh), hk_real.cuLaunchGridAsync(f, gw, gh, s));
}

/* ---------------------------------------------------------------------------
 * Stream capture bookkeeping
 * ------------------------------------------------------------------------- */
/* Deferred end events before the capture, not in it: this thread's, and every thread's on `s`. */
static void flush_before_capture(CUstream s) {
    hk_meter_flush();
    hk_meter_flush_stream(s);
}

static CUresult begun(CUresult r) {
    hk_meter_capture_begun(r == CUDA_SUCCESS);
    return r;
}

HK_EXPORT CUresult cuStreamBeginCapture(CUstream s) { /* the v1 ABI: global mode */
    if (!hk_real.cuStreamBeginCapture) return CUDA_ERROR_NOT_INITIALIZED;
    flush_before_capture(s);
    return begun(hk_real.cuStreamBeginCapture(s));
}
HK_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s) {
    if (!hk_real.cuStreamBeginCapture_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    flush_before_capture(s);
    return begun(hk_real.cuStreamBeginCapture_ptsz(s));
}
HK_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
    if (!hk_real.cuStreamBeginCapture_v2) return CUDA_ERROR_NOT_INITIALIZED;
    flush_before_capture(s);
    return begun(hk_real.cuStreamBeginCapture_v2(s, mode));
}
HK_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode) {
    if (!hk_real.cuStreamBeginCapture_v2_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    flush_before_capture(s);
    return begun(hk_real.cuStreamBeginCapture_v2_ptsz(s, mode));
}
HK_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, void *graph, const void *deps, const void *edata, size_t n,
                                               int mode) {
    if (!hk_real.cuStreamBeginCaptureToGraph) return CUDA_ERROR_NOT_INITIALIZED;
    flush_before_capture(s);
    return begun(hk_real.cuStreamBeginCaptureToGraph(s, graph, deps, edata, n, mode));
}
HK_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, void *graph, const void *deps, const void *edata,
                                                    size_t n, int mode) {
    if (!hk_real.cuStreamBeginCaptureToGraph_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    flush_before_capture(s);
    return begun(hk_real.cuStreamBeginCaptureToGraph_ptsz(s, graph, deps, edata, n, mode));
}

static CUresult ended(CUstream s, void **graph, __typeof__(hk_real.cuStreamEndCapture) fn) {
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    int capturing = 1;
    if (hk_real.cuStreamIsCapturing) hk_real.cuStreamIsCapturing(s, &capturing);
    CUresult r = fn(s, graph);
    hk_meter_capture_ended(capturing);
    return r;
}
HK_EXPORT CUresult cuStreamEndCapture(CUstream s, void **graph) { return ended(s, graph, hk_real.cuStreamEndCapture); }
HK_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, void **graph) {
    return ended(s, graph, hk_real.cuStreamEndCapture_ptsz);
}

/* ---------------------------------------------------------------------------
 * Streams that go: every thread's deferred end event on it is recorded first (gate.h)
 * ------------------------------------------------------------------------- */
HK_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
    if (!hk_real.cuStreamDestroy_v2) return CUDA_ERROR_NOT_INITIALIZED;
    hk_meter_flush_stream(s);
    return hk_real.cuStreamDestroy_v2(s);
}
HK_EXPORT CUresult cuStreamDestroy(CUstream s) {
    if (!hk_real.cuStreamDestroy) return CUDA_ERROR_NOT_INITIALIZED;
    hk_meter_flush_stream(s);
    return hk_real.cuStreamDestroy(s);
}
