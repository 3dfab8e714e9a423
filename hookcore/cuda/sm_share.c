/* sm_share.c - the share of its device's SMs a context may use: the fraction the compute limiter
 * charges a batch of kernels at (core/limiter.h: a batch costs its device time x this fraction, so
 * a claim's `cores` bound SM x time, a percentage of the GPU's compute).
 *
 * The part comes from the driver, never from the environment: cuCtxGetExecAffinity(
 * CU_EXEC_AFFINITY_TYPE_SM_COUNT) gives the SMs the current context is limited to (an MPS client's
 * active-thread percentage as the driver provisioned it, an affinity context's count).
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is the tenant's to set, but the driver enforces the SMs it
 * provisions: a tenant that raises its percentage gets more SMs and a larger fraction, so the
 * claim's share stays a ceiling; an honest MPS client at its claim's percentage is charged that
 * part of its device time and is not limited twice.
 *
 * The whole comes from the daemon: HOOKCORE_DEVICE_SMS_<i> in the claim's read-only config, the
 * device's SM count as the DRA driver read it from the vendor's management library at discovery
 * (hk_device_sms). Not from CUDA: inside an MPS client cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)
 * answers the client's provisioned count too, the same as cuCtxGetExecAffinity (measured on an
 * H200 under MPS at 30%: both 38 of 132, bench/results/h200-2026-12-04-round2/mps-mounts.md), so
 * the fraction would be 1 and an honest client would be throttled twice, by MPS and by the hook.
 * A config without the key (an older daemon, a driver that could not read the count) falls back
 * to the attribute: right outside MPS, a full charge inside it (fail safe).
 *
 * Fail safe, the full device (a charge of the whole device time): a driver without the call, an
 * error, 0 SMs, more SMs than the device has (the config's count, or the attribute's), no device
 * count, or work submitted to a stream of another context than the current one (cuStreamGetCtx;
 * the fraction is the current context's).
 *
 * Asked once per context and cached process-wide; each batch of work opens with one lookup in a
 * thread-local copy (a compare), never a driver query per launch. A context handle can come back
 * for a new context with other SMs (cuCtxDestroy then cuCtxCreate; a primary context reset, or
 * released and retained again, after the tenant changed its environment), so context.c forgets
 * the cache on those calls and a generation number makes every thread's copy stale.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <string.h>

#include "../core/limiter.h"
#include "shim.h"

#define HK_SM_CACHE 64

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    uint32_t ppm;
} g_cache[HK_SM_CACHE];
static unsigned g_ncache, g_next; /* entries in use; the next to overwrite once full */
static _Atomic unsigned g_gen = 1;

static __thread CUcontext t_ctx; /* this thread's copy of the last answer */
static __thread uint32_t t_ppm;
static __thread unsigned t_gen;

unsigned hk_cuda_ctx_generation(void) { return hk_atomic_load_acquire(&g_gen); }

void hk_cuda_sm_share_forget(CUcontext ctx) {
    pthread_mutex_lock(&g_lock);
    for (unsigned i = 0; i < g_ncache;) {
        if (ctx == NULL || g_cache[i].ctx == ctx)
            g_cache[i] = g_cache[--g_ncache];
        else
            i++;
    }
    g_next = 0;
    hk_atomic_add_acq_rel(&g_gen, 1);
    pthread_mutex_unlock(&g_lock);
}

void hk_cuda_sm_share_atfork_child(void) {
    pthread_mutex_init(&g_lock, NULL);
    g_ncache = g_next = 0;
    hk_atomic_add_acq_rel(&g_gen, 1);
}

/* Ask the driver about the current context `ctx` on device ordinal `ord`, ledger device `ldev`. */
static uint32_t query(CUcontext ctx, int ldev, CUdevice ord) {
    CUexecAffinityParam a;
    memset(&a, 0, sizeof a);
    int total = 0;
    CUresult ra = hk_real.cuCtxGetExecAffinity ? hk_real.cuCtxGetExecAffinity(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT)
                                               : CUDA_ERROR_NOT_FOUND;
    uint32_t configured = hk_device_sms(ldev); /* the daemon's count of the device, 0 = not given */
    CUresult rt = CUDA_SUCCESS;
    if (configured)
        total = (int)configured;
    else
        rt = hk_real.cuDeviceGetAttribute
                 ? hk_real.cuDeviceGetAttribute(&total, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ord)
                 : CUDA_ERROR_NOT_FOUND;
    unsigned sms = a.param.smCount.val;
    uint32_t ppm = HK_SM_PPM_FULL;
    if (ra == CUDA_SUCCESS && rt == CUDA_SUCCESS && total > 0 && sms > 0 && sms <= (unsigned)total)
        ppm = (uint32_t)(((uint64_t)sms * HK_SM_PPM_FULL + (uint64_t)total - 1) / (uint64_t)total); /* rounded up */
    if (hk_log_debug())
        hk_log("context %p on device ordinal %d: cuCtxGetExecAffinity %d (%u SMs), device %d (%d SMs, %s): "
               "charged at %u/1000000 of its device time",
               (void *)ctx, ord, ra, sms, rt, total, configured ? "the claim's config" : "the driver's attribute", ppm);
    return ppm;
}

static int special(CUstream s) { return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

uint32_t hk_cuda_sm_share_ppm(CUcontext ctx, int ldev, CUdevice ord, CUstream s) {
    if (!ctx) return HK_SM_PPM_FULL;
    if (!special(s)) { /* a stream of another context runs on that context's SMs */
        CUcontext sc = NULL;
        if (!hk_real.cuStreamGetCtx || hk_real.cuStreamGetCtx(s, &sc) != CUDA_SUCCESS || sc != ctx)
            return HK_SM_PPM_FULL;
    }
    unsigned gen = hk_atomic_load_acquire(&g_gen);
    if (HK_LIKELY(t_ctx == ctx && t_gen == gen)) return t_ppm;
    uint32_t ppm = 0;
    pthread_mutex_lock(&g_lock);
    for (unsigned i = 0; i < g_ncache && !ppm; i++)
        if (g_cache[i].ctx == ctx) ppm = g_cache[i].ppm;
    pthread_mutex_unlock(&g_lock);
    if (!ppm) {
        ppm = query(ctx, ldev, ord); /* outside the lock: a driver call */
        pthread_mutex_lock(&g_lock);
        if (hk_atomic_load_relaxed(&g_gen) == gen) { /* not forgotten meanwhile */
            unsigned i = g_ncache < HK_SM_CACHE ? g_ncache++ : g_next++ % HK_SM_CACHE;
            g_cache[i].ctx = ctx;
            g_cache[i].ppm = ppm;
        }
        pthread_mutex_unlock(&g_lock);
    }
    t_ctx = ctx;
    t_ppm = ppm;
    t_gen = gen;
    return ppm;
}
