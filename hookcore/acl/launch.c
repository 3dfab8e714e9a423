/* launch.c - ACL kernel launches and model executions through the compute limiter (core/meter.h),
 * and the meter's operations in CANN terms (used by both layers; ascend_rt/rt.c gates rt* with it).
 *
 * The meter measures device time between timing events recorded on the submitting stream and
 * holds the claim to its share (a cap: the claim's processes together keep the NPU busy at most
 * `cores`% of the time). Events come from ACL (aclrtCreateEventWithFlag(ACL_EVENT_TIME_LINE),
 * aclrtRecordEvent, aclrtQueryEventStatus, aclrtSynchronizeEvent, aclrtEventElapsedTime) or, in a
 * process without libascendcl.so, from the runtime (rtEvent*). A context is the current device.
 *
 * Synchronous model execution (aclmdlExecute, aclmdlRIExecute) is bracketed on the default
 * stream, one batch per call: the end event is recorded when the call returns, so the batch holds
 * the model's time and not the host's time between calls.
 * While an aclmdlRI capture is in progress no event is recorded (it would be captured).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../core/meter.h"
#include "npu.h"

/* ---------------------------------------------------------------------------
 * The meter's operations
 * ------------------------------------------------------------------------- */
static int g_use_acl; /* 1: ACL events; 0: rt events */

/* The meter's "context" is the device, tagged 0 for asynchronous submissions and, for synchronous
   ones, 1 and 2 in turn: a change of context closes the thread's batch, so every synchronous call
   is a batch of its own, [start recorded before the call, end recorded when it returned], and the
   host's time between two calls (when the NPU is idle) is never charged. */
static __thread int t_sync;     /* 0, or the tag of the synchronous call being submitted */
static __thread int t_sync_tag; /* the last tag used by this thread */

static int op_current(void **ctx, int *ldev) {
    int32_t dev;
    if (hk_npu_current(&dev) != 0) return -1;
    *ctx = (void *)(intptr_t)(((intptr_t)dev + 1) << 2 | t_sync);
    *ldev = hk_npu_ldev(dev);
    return 0;
}

static int op_capturing(void *s) {
    int status = 0;
    return hk_acl.aclmdlRICaptureGetInfo && hk_acl.aclmdlRICaptureGetInfo(s, &status, NULL) == ACL_SUCCESS &&
           status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE;
}

static int op_event_create(void **ev) {
    if (g_use_acl) return hk_acl.aclrtCreateEventWithFlag(ev, ACL_EVENT_TIME_LINE) == ACL_SUCCESS ? 0 : -1;
    return hk_rt.rtEventCreate(ev) == 0 ? 0 : -1;
}
static void op_event_destroy(void *ev) {
    if (g_use_acl)
        hk_acl.aclrtDestroyEvent(ev);
    else
        hk_rt.rtEventDestroy(ev);
}
static int op_event_record(void *ev, void *s) {
    return (g_use_acl ? hk_acl.aclrtRecordEvent(ev, s) : hk_rt.rtEventRecord(ev, s)) == 0 ? 0 : -1;
}
static int op_event_done(void *ev) {
    if (!g_use_acl) return hk_rt.rtEventQuery(ev) == 0;
    int status = 0;
    /* a failed query counts as done: the elapsed-time call then fails and nothing is charged */
    return hk_acl.aclrtQueryEventStatus(ev, &status) != ACL_SUCCESS || status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
}
static void op_event_wait(void *ev) {
    if (g_use_acl)
        hk_acl.aclrtSynchronizeEvent(ev);
    else
        hk_rt.rtEventSynchronize(ev);
}
static int op_event_elapsed_ns(void *a, void *b, int64_t *ns) {
    float ms = 0;
    aclError r = g_use_acl ? hk_acl.aclrtEventElapsedTime(&ms, a, b) : hk_rt.rtEventElapsedTime(&ms, a, b);
    if (r != ACL_SUCCESS) return -1;
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
};

void hk_npu_meter_setup(void) {
    g_use_acl = hk_acl.aclrtCreateEventWithFlag && hk_acl.aclrtDestroyEvent && hk_acl.aclrtRecordEvent &&
                hk_acl.aclrtQueryEventStatus && hk_acl.aclrtSynchronizeEvent && hk_acl.aclrtEventElapsedTime;
    int rt = hk_rt.rtEventCreate && hk_rt.rtEventDestroy && hk_rt.rtEventRecord && hk_rt.rtEventQuery &&
             hk_rt.rtEventSynchronize && hk_rt.rtEventElapsedTime;
    int current = hk_acl.aclrtGetDevice || hk_rt.rtGetDevice;
    if (!(g_use_acl || rt) || !current) {
        if (hk_preload_limiter_on()) hk_log("the CANN runtime lacks the event API; compute limits are not enforced");
        return;
    }
    g_ops.event_create = op_event_create;
    if (hk_log_debug()) hk_log("NPU meter on %s timing events", g_use_acl ? "ACL" : "runtime");
    hk_meter_setup(&g_ops);
}

/* ---------------------------------------------------------------------------
 * Interposers. Fast path: state ready (or dormant) and no limiter -> straight to the runtime.
 * ------------------------------------------------------------------------- */
#define ACL_GATED(real_fn, stream, sig, call) HK_NPU_GATED(real_fn, stream, sig, 0, ACL_ERROR_UNINITIALIZE, call)

/* A synchronous call: its own batch on the default stream (see op_current). */
#define ACL_GATED_SYNC(real_fn, sig, call)                                                                 \
    do {                                                                                                   \
        if (HK_UNLIKELY(!(real_fn)) && !HK_NPU_LOADED((real_fn))) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT; \
        if (hk_npu_fast()) return HK_NPU_NESTED(call);                                                     \
        if (hk_preload_ready() == HK_STATE_FAILCLOSED) return ACL_ERROR_UNINITIALIZE;                      \
        if (!hk_preload_limiter_on()) return HK_NPU_NESTED(call);                                          \
        t_sync = t_sync_tag = t_sync_tag == 1 ? 2 : 1;                                                     \
        hk_meter_batch *b_ = hk_meter_before(NULL);                                                        \
        t_sync = 0;                                                                                        \
        aclError r_ = HK_NPU_NESTED(call);                                                                 \
        hk_meter_after(b_, NULL, r_ == ACL_SUCCESS, (sig));                                                \
        return r_;                                                                                         \
    } while (0)

#define KSIG    ((uint64_t)(uintptr_t)f * 31 + blocks)
#define MSIG(m) ((uint64_t)(m) * 0x100000001b3ULL + 7)

HK_EXPORT aclError aclrtLaunchKernel(aclrtFuncHandle f, uint32_t blocks, const void *args, size_t args_size,
                                     aclrtStream s) {
    ACL_GATED(hk_acl.aclrtLaunchKernel, s, KSIG, hk_acl.aclrtLaunchKernel(f, blocks, args, args_size, s));
}

HK_EXPORT aclError aclrtLaunchKernelV2(aclrtFuncHandle f, uint32_t blocks, const void *args, size_t args_size,
                                       aclrtLaunchKernelCfg *cfg, aclrtStream s) {
    ACL_GATED(hk_acl.aclrtLaunchKernelV2, s, KSIG, hk_acl.aclrtLaunchKernelV2(f, blocks, args, args_size, cfg, s));
}

HK_EXPORT aclError aclrtLaunchKernelWithConfig(aclrtFuncHandle f, uint32_t blocks, aclrtStream s,
                                               aclrtLaunchKernelCfg *cfg, void *args, void *reserve) {
    ACL_GATED(hk_acl.aclrtLaunchKernelWithConfig, s, KSIG,
              hk_acl.aclrtLaunchKernelWithConfig(f, blocks, s, cfg, args, reserve));
}

HK_EXPORT aclError aclmdlExecuteAsync(uint32_t model, const aclmdlDataset *in, aclmdlDataset *out, aclrtStream s) {
    ACL_GATED(hk_acl.aclmdlExecuteAsync, s, MSIG(model), hk_acl.aclmdlExecuteAsync(model, in, out, s));
}

HK_EXPORT aclError aclmdlExecute(uint32_t model, const aclmdlDataset *in, aclmdlDataset *out) {
    ACL_GATED_SYNC(hk_acl.aclmdlExecute, MSIG(model), hk_acl.aclmdlExecute(model, in, out));
}

HK_EXPORT aclError aclmdlRIExecuteAsync(aclmdlRI ri, aclrtStream s) {
    ACL_GATED(hk_acl.aclmdlRIExecuteAsync, s, MSIG((uintptr_t)ri), hk_acl.aclmdlRIExecuteAsync(ri, s));
}

HK_EXPORT aclError aclmdlRIExecute(aclmdlRI ri, int32_t timeout) {
    ACL_GATED_SYNC(hk_acl.aclmdlRIExecute, MSIG((uintptr_t)ri), hk_acl.aclmdlRIExecute(ri, timeout));
}

/* ---------------------------------------------------------------------------
 * aclmdlRI capture bookkeeping: no events while a capture is in progress
 * ------------------------------------------------------------------------- */
HK_EXPORT aclError aclmdlRICaptureBegin(aclrtStream s, aclmdlRICaptureMode mode) {
    if (HK_UNLIKELY(!hk_acl.aclmdlRICaptureBegin) && !HK_NPU_LOADED(hk_acl.aclmdlRICaptureBegin))
        return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    aclError r = HK_NPU_NESTED(hk_acl.aclmdlRICaptureBegin(s, mode));
    hk_meter_capture_begun(r == ACL_SUCCESS);
    return r;
}

HK_EXPORT aclError aclmdlRICaptureEnd(aclrtStream s, aclmdlRI *ri) {
    if (HK_UNLIKELY(!hk_acl.aclmdlRICaptureEnd) && !HK_NPU_LOADED(hk_acl.aclmdlRICaptureEnd))
        return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    int was = hk_acl.aclmdlRICaptureGetInfo ? op_capturing(s) : 1;
    aclError r = HK_NPU_NESTED(hk_acl.aclmdlRICaptureEnd(s, ri));
    hk_meter_capture_ended(was);
    return r;
}
