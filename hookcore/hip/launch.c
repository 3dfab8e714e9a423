/* launch.c - kernel and graph launches, copies and memsets through the compute limiter
 * (core/meter.h), and the meter's operations in HIP terms.
 *
 * The meter measures device time between timing events recorded on the submitting stream and
 * holds the claim to its share (a cap: the claim's processes together keep the device busy at
 * most `cores`% of the time). Events are HIP's (hipEventCreate, hipEventRecord, hipEventQuery,
 * hipEventSynchronize, hipEventElapsedTime); a context is the current device. Copies and memsets
 * are metered like launches (HK_WORK_COPY: their device time in full): a claim held to 30% of
 * the kernels' time could otherwise keep the copy engines busy at full rate. Synchronous copies
 * run on the null stream, where the events go: the end event completes when the copy has, so
 * the charge is the copy's device time, not the host's wait.
 *
 * hipExtLaunchKernel and hipExtModuleLaunchKernel record the caller's own start/stop events
 * around the kernel; the meter's events are recorded on the stream before and after the call,
 * so both measure the same kernel. While a stream capture is in progress no event is recorded
 * (it would become a graph node); captured work is charged when the graph is launched.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../core/meter.h"
#include "hip.h"

/* ---------------------------------------------------------------------------
 * The meter's operations
 * ------------------------------------------------------------------------- */
static int op_current(void **ctx, int *ldev) {
    int dev;
    if (hk_hip_current(&dev) != 0) return -1;
    *ctx = (void *)(intptr_t)(dev + 1);
    *ldev = hk_hip_ldev(dev);
    return 0;
}

static int op_capturing(void *s) {
    hipStreamCaptureStatus st = 0;
    return hk_hip.hipStreamIsCapturing && hk_hip.hipStreamIsCapturing((hipStream_t)s, &st) == hipSuccess &&
           st == hipStreamCaptureStatusActive;
}

/* The calling thread's stream-capture interaction mode (hk_meter_ops.capture_mode). */
#define HIP_STREAM_CAPTURE_MODE_RELAXED 2
static int op_capture_mode(int mode) {
    int m = mode == HK_CAPTURE_MODE_RELAXED ? HIP_STREAM_CAPTURE_MODE_RELAXED : mode;
    return hk_hip.hipThreadExchangeStreamCaptureMode && hk_hip.hipThreadExchangeStreamCaptureMode(&m) == hipSuccess
               ? m
               : -1;
}

static int op_event_create(void **ev) { return hk_hip.hipEventCreate((hipEvent_t *)ev) == hipSuccess ? 0 : -1; }
static void op_event_destroy(void *ev) { hk_hip.hipEventDestroy((hipEvent_t)ev); }
static int op_event_record(void *ev, void *s) { return hk_hip.hipEventRecord(ev, s) == hipSuccess ? 0 : -1; }
/* a failed query counts as done: the elapsed-time call then fails and nothing is charged */
static int op_event_done(void *ev) { return hk_hip.hipEventQuery((hipEvent_t)ev) != hipErrorNotReady; }
static void op_event_wait(void *ev) { hk_hip.hipEventSynchronize((hipEvent_t)ev); }
static int op_event_elapsed_ns(void *a, void *b, int64_t *ns) {
    float ms = 0;
    if (hk_hip.hipEventElapsedTime(&ms, (hipEvent_t)a, (hipEvent_t)b) != hipSuccess) return -1;
    *ns = (int64_t)((double)ms * 1e6);
    return 0;
}

static hk_meter_ops g_ops = {
    .current = op_current,
    .capturing = op_capturing,
    .event_create = op_event_create,
    .event_destroy = op_event_destroy,
    .event_record = op_event_record,
    .event_done = op_event_done,
    .event_wait = op_event_wait,
    .event_elapsed_ns = op_event_elapsed_ns,
    .capture_mode = op_capture_mode,
};

void hk_hip_meter_setup(void) {
    if (!(hk_hip.hipEventCreate && hk_hip.hipEventDestroy && hk_hip.hipEventRecord && hk_hip.hipEventQuery &&
          hk_hip.hipEventSynchronize && hk_hip.hipEventElapsedTime && hk_hip.hipGetDevice)) {
        if (hk_preload_limiter_on()) hk_log("the HIP runtime lacks the event API; compute limits are not enforced");
        return;
    }
    hk_meter_setup(&g_ops);
}

/* ---------------------------------------------------------------------------
 * Launches
 * ------------------------------------------------------------------------- */
#define KERNEL(real_fn, stream, sig, call) HK_HIP_GATED(real_fn, stream, sig, HK_WORK_SM, call)

static inline uint64_t grid_sig(const void *f, uint64_t gx, uint64_t gy, uint64_t gz, uint64_t bx, uint64_t by,
                                uint64_t bz) {
    uint64_t h = (uint64_t)(uintptr_t)f * 0x9e3779b97f4a7c15ULL;
    h ^= (gx * 73856093u) ^ (gy * 19349663u) ^ (gz * 83492791u);
    return h ^ ((bx << 20) ^ (by << 10) ^ bz) * 0x100000001b3ULL;
}
#define DSIG(f, g, b) grid_sig((f), (g).x, (g).y, (g).z, (b).x, (b).y, (b).z)

HK_EXPORT hipError_t hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s) {
    KERNEL(hk_hip.hipLaunchKernel, s, DSIG(f, grid, block), hk_hip.hipLaunchKernel(f, grid, block, args, shmem, s));
}

HK_EXPORT hipError_t hipExtLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s,
                                        hipEvent_t start, hipEvent_t stop, int flags) {
    KERNEL(hk_hip.hipExtLaunchKernel, s, DSIG(f, grid, block),
           hk_hip.hipExtLaunchKernel(f, grid, block, args, shmem, s, start, stop, flags));
}

HK_EXPORT hipError_t hipLaunchCooperativeKernel(const void *f, dim3 grid, dim3 block, void **args, unsigned int shmem,
                                                hipStream_t s) {
    KERNEL(hk_hip.hipLaunchCooperativeKernel, s, DSIG(f, grid, block),
           hk_hip.hipLaunchCooperativeKernel(f, grid, block, args, shmem, s));
}

HK_EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                           hipStream_t s, void **params, void **extra) {
    KERNEL(hk_hip.hipModuleLaunchKernel, s, grid_sig(f, gx, gy, gz, bx, by, bz),
           hk_hip.hipModuleLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

HK_EXPORT hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
                                              uint32_t ly, uint32_t lz, size_t shmem, hipStream_t s, void **params,
                                              void **extra, hipEvent_t start, hipEvent_t stop, uint32_t flags) {
    KERNEL(hk_hip.hipExtModuleLaunchKernel, s, grid_sig(f, gx, gy, gz, lx, ly, lz),
           hk_hip.hipExtModuleLaunchKernel(f, gx, gy, gz, lx, ly, lz, shmem, s, params, extra, start, stop, flags));
}

HK_EXPORT hipError_t hipGraphLaunch(hipGraphExec_t g, hipStream_t s) {
    KERNEL(hk_hip.hipGraphLaunch, s, (uint64_t)(uintptr_t)g * 0x100000001b3ULL + 7, hk_hip.hipGraphLaunch(g, s));
}

HK_EXPORT hipError_t hipModuleLaunchCooperativeKernel(hipFunction_t f, unsigned int gx, unsigned int gy,
                                                      unsigned int gz, unsigned int bx, unsigned int by,
                                                      unsigned int bz, unsigned int shmem, hipStream_t s,
                                                      void **params) {
    KERNEL(hk_hip.hipModuleLaunchCooperativeKernel, s, grid_sig(f, gx, gy, gz, bx, by, bz),
           hk_hip.hipModuleLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

/* The extensible launches: the work goes to the configuration's stream (no configuration: the
   runtime refuses the call, which then runs unmetered). */
HK_EXPORT hipError_t hipLaunchKernelExC(const hipLaunchConfig_t *config, const void *f, void **args) {
    KERNEL(hk_hip.hipLaunchKernelExC, config ? config->stream : NULL,
           config ? DSIG(f, config->gridDim, config->blockDim) : 0, hk_hip.hipLaunchKernelExC(config, f, args));
}

HK_EXPORT hipError_t hipDrvLaunchKernelEx(const HIP_LAUNCH_CONFIG *config, hipFunction_t f, void **params,
                                          void **extra) {
    KERNEL(hk_hip.hipDrvLaunchKernelEx, config ? config->hStream : NULL,
           config ? grid_sig(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                             config->blockDimY, config->blockDimZ)
                  : 0,
           hk_hip.hipDrvLaunchKernelEx(config, f, params, extra));
}

/* The per-thread default stream's twins (-fgpu-default-stream=per-thread builds call these): the
   meter's events go to the stream the work runs on, hipStreamPerThread for a null stream. */
HK_EXPORT hipError_t hipLaunchKernel_spt(const void *f, dim3 grid, dim3 block, void **args, size_t shmem,
                                         hipStream_t s) {
    KERNEL(hk_hip.hipLaunchKernel_spt, HK_HIP_PT(s), DSIG(f, grid, block),
           hk_hip.hipLaunchKernel_spt(f, grid, block, args, shmem, s));
}

HK_EXPORT hipError_t hipLaunchCooperativeKernel_spt(const void *f, dim3 grid, dim3 block, void **args, uint32_t shmem,
                                                    hipStream_t s) {
    KERNEL(hk_hip.hipLaunchCooperativeKernel_spt, HK_HIP_PT(s), DSIG(f, grid, block),
           hk_hip.hipLaunchCooperativeKernel_spt(f, grid, block, args, shmem, s));
}

HK_EXPORT hipError_t hipGraphLaunch_spt(hipGraphExec_t g, hipStream_t s) {
    KERNEL(hk_hip.hipGraphLaunch_spt, HK_HIP_PT(s), (uint64_t)(uintptr_t)g * 0x100000001b3ULL + 7,
           hk_hip.hipGraphLaunch_spt(g, s));
}

/* ---------------------------------------------------------------------------
 * Copies and memsets (copy.h)
 * ------------------------------------------------------------------------- */
#define HK_HIP_COPY_SIG(kind, bytes) (((uint64_t)(kind) << 56) ^ ((uint64_t)(bytes) * 0x9e3779b97f4a7c15ULL))

#define HK_HIP_COPY_DEF(name, params, args, stream, bytes, kind)                                           \
    HK_EXPORT hipError_t name params {                                                                     \
        HK_HIP_GATED(hk_hip.name, (stream), HK_HIP_COPY_SIG(kind, bytes), HK_WORK_COPY, hk_hip.name args); \
    }
HK_HIP_COPIES(HK_HIP_COPY_DEF)
HK_HIP_COPIES_SPT(HK_HIP_COPY_DEF)
#undef HK_HIP_COPY_DEF

/* ---------------------------------------------------------------------------
 * Stream capture bookkeeping: no events while a capture is in progress
 * ------------------------------------------------------------------------- */
/* The capture calls, each run by `real_fn` (its _spt twin on `stream`, the per-thread stream where
   the caller gave the null one). */
#define BEGIN_CAPTURE(real_fn, s, mode)                  \
    do {                                                 \
        HK_HIP_REAL(real_fn);                            \
        hipError_t r_ = HK_HIP_NESTED(real_fn(s, mode)); \
        hk_meter_capture_begun(r_ == hipSuccess);        \
        return r_;                                       \
    } while (0)
#define END_CAPTURE(real_fn, s, stream, g)                                 \
    do {                                                                   \
        HK_HIP_REAL(real_fn);                                              \
        int was_ = hk_hip.hipStreamIsCapturing ? op_capturing(stream) : 1; \
        hipError_t r_ = HK_HIP_NESTED(real_fn(s, g));                      \
        hk_meter_capture_ended(was_);                                      \
        return r_;                                                         \
    } while (0)

HK_EXPORT hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode mode) {
    BEGIN_CAPTURE(hk_hip.hipStreamBeginCapture, s, mode);
}
HK_EXPORT hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t *g) {
    END_CAPTURE(hk_hip.hipStreamEndCapture, s, s, g);
}
HK_EXPORT hipError_t hipStreamBeginCapture_spt(hipStream_t s, hipStreamCaptureMode mode) {
    BEGIN_CAPTURE(hk_hip.hipStreamBeginCapture_spt, s, mode);
}
HK_EXPORT hipError_t hipStreamEndCapture_spt(hipStream_t s, hipGraph_t *g) {
    END_CAPTURE(hk_hip.hipStreamEndCapture_spt, s, HK_HIP_PT(s), g);
}

/* ---------------------------------------------------------------------------
 * A device reset takes the process's streams, events and memory on the current device (its
 * primary context): the meter is told around it (core/meter.h), so it charges the work in flight
 * while its events live and never touches one of them again; the memory's charges go back.
 * ------------------------------------------------------------------------- */
HK_EXPORT hipError_t hipDeviceReset(void) {
    HK_HIP_REAL(hk_hip.hipDeviceReset);
    if (hk_hip_nested()) return hk_hip.hipDeviceReset();
    int dev;
    void *ctx = hk_hip_current(&dev) != 0 ? HK_METER_ANY_CONTEXT : (void *)(intptr_t)(dev + 1);
    unsigned token = hk_meter_context_going(ctx);
    hipError_t r = HK_HIP_NESTED(hk_hip.hipDeviceReset());
    hk_meter_context_gone(token, r == hipSuccess);
    if (r == hipSuccess && ctx != HK_METER_ANY_CONTEXT) hk_hip_device_reset(dev); /* its memory went too */
    return r;
}
