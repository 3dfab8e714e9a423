/* cuda_stub_engine.c - streams, events and the simulated engine of the stub libcuda.so.1: launches
 * and copies queue on it (cuda_stub.c's header says how long they take). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <string.h>

#include "cuda_stub.h"

/* ---------------------------------------------------------------------------
 * Streams, events and a simulated engine
 * ------------------------------------------------------------------------- */
static stub_stream *stream_of(CUstream s, int dev) {
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return &g_default_stream[dev];
    return (stub_stream *)s;
}

STUB_API CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    NEED_CTX(d);
    stub_stream *st = calloc(1, sizeof *st);
    if (!st) return CUDA_ERROR_OUT_OF_MEMORY;
    st->dev = d;
    st->ctx = stub_cur_ctx();
    *s = (CUstream)st;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuStreamGetCtx(CUstream s, CUcontext *ctx) {
    NEED_INIT();
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    CUresult f = stub_fail("cuStreamGetCtx");
    if (f != CUDA_SUCCESS) return f;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        if (!stub_cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
        *ctx = stub_cur_ctx();
    } else {
        *ctx = ((stub_stream *)s)->ctx;
    }
    return CUDA_SUCCESS;
}

STUB_API CUresult cuStreamDestroy_v2(CUstream s) {
    NEED_INIT();
    if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) ((stub_stream *)s)->destroyed = 1;
    return CUDA_SUCCESS;
}

static uint64_t se_key(stub_stream *st) { return (uint64_t)(uintptr_t)st; }

static CUresult capture_unsafe_call(void);

STUB_API CUresult cuStreamSynchronize(CUstream s) {
    NEED_INIT();
    NEED_CTX(d);
    CUresult u = capture_unsafe_call();
    if (u != CUDA_SUCCESS) return u;
    stub_stream *st = stream_of(s, d);
    if (se_on())
        se_wait(g_dev[d].physical, se_key(st), se_last(g_dev[d].physical, se_key(st)));
    else
        stub_sleep_until(st->last_end_ns);
    return CUDA_SUCCESS;
}

STUB_API CUresult cuStreamQuery(CUstream s) {
    NEED_INIT();
    NEED_CTX(d);
    stub_stream *st = stream_of(s, d);
    if (se_on()) {
        int64_t t;
        return se_done(g_dev[d].physical, se_key(st), se_last(g_dev[d].physical, se_key(st)), &t)
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_NOT_READY;
    }
    return stub_now_ns() >= st->last_end_ns ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* Capture: the state and the rule it puts on other calls are modelled; launches during capture
 * still run in the stub. One capture per thread, of mode 0 global, 1 thread-local or 2 relaxed.
 * Event queries and synchronization, and stream synchronization, are "potentially unsafe" calls:
 * prohibited (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) for a thread whose interaction mode
 * (cuThreadExchangeStreamCaptureMode) is not relaxed while it holds a capture of its own that is not
 * relaxed, or, in the global interaction mode, while another thread holds a global-mode capture. A
 * prohibited call invalidates those captures: their end returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. */
#define STUB_CAPTURE_UNSUPPORTED 900
#define STUB_CAPTURE_INVALIDATED 901
static __thread CUstream t_capturing;
static __thread int t_capture_mode, t_interaction, t_capture_broken;
static __thread unsigned t_capture_epoch;
static _Atomic int g_global_captures;
static _Atomic unsigned g_capture_breaks; /* global-mode captures begun before a break are invalid */

static CUresult capture_unsafe_call(void) {
    if (t_interaction == 2) return CUDA_SUCCESS;
    int own = t_capturing != NULL && t_capture_mode != 2;
    int others = hk_atomic_load_acquire(&g_global_captures) - (t_capturing != NULL && t_capture_mode == 0);
    if (t_interaction == 0 && others > 0)
        hk_atomic_add_acq_rel(&g_capture_breaks, 1);
    else if (!own)
        return CUDA_SUCCESS;
    if (own) t_capture_broken = 1;
    return (CUresult)STUB_CAPTURE_UNSUPPORTED;
}

STUB_API CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    NEED_INIT();
    if (!mode || *mode < 0 || *mode > 2) return CUDA_ERROR_INVALID_VALUE;
    int old = t_interaction;
    t_interaction = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
    NEED_INIT();
    if (mode < 0 || mode > 2) return CUDA_ERROR_INVALID_VALUE;
    if (t_capturing) return 401; /* CUDA_ERROR_ILLEGAL_STATE: one capture per thread here */
    t_capturing = s ? s : CU_STREAM_LEGACY;
    t_capture_mode = mode;
    t_capture_broken = 0;
    t_capture_epoch = hk_atomic_load_acquire(&g_capture_breaks);
    if (mode == 0) hk_atomic_add_acq_rel(&g_global_captures, 1);
    return CUDA_SUCCESS;
}
STUB_API CUresult cuStreamBeginCapture(CUstream s) { return cuStreamBeginCapture_v2(s, 0); }
STUB_API CUresult cuStreamEndCapture(CUstream s, void **graph) {
    NEED_INIT();
    if (t_capturing != (s ? s : CU_STREAM_LEGACY)) return 401; /* CUDA_ERROR_ILLEGAL_STATE */
    int broken =
        t_capture_broken || (t_capture_mode == 0 && hk_atomic_load_acquire(&g_capture_breaks) != t_capture_epoch);
    if (t_capture_mode == 0) hk_atomic_add_acq_rel(&g_global_captures, -1);
    t_capturing = NULL;
    if (broken) return (CUresult)STUB_CAPTURE_INVALIDATED;
    if (graph) *graph = (void *)0x1;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuStreamIsCapturing(CUstream s, int *status) {
    NEED_INIT();
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    *status = t_capturing != NULL && t_capturing == (s ? s : CU_STREAM_LEGACY);
    return CUDA_SUCCESS;
}

static _Atomic unsigned long long g_launches;

/* Queue work of `dur_ns` on the stream: it starts when both the engine and the stream are free.
   Returns when it ends (simulated clock), or with the shared engine the op's number. */
static int64_t enqueue(CUstream s, int64_t dur_ns) {
    int d = stub_cur_dev();
    stub_stream *st = stream_of(s, d);
    if (se_on()) {
        hk_atomic_add_seq_cst(&g_launches, 1);
        return (int64_t)se_submit(g_dev[d].physical, se_key(st), dur_ns);
    }
    int64_t now = stub_now_ns();
    int64_t busy = hk_atomic_load_seq_cst(&g_dev[d].busy_until_ns);
    int64_t start, end;
    do {
        start = busy > now ? busy : now;
        if (st->last_end_ns > start) start = st->last_end_ns;
        end = start + dur_ns;
    } while (!hk_atomic_cas_weak_seq_cst(&g_dev[d].busy_until_ns, &busy, end));
    st->last_end_ns = end;
    hk_atomic_add_seq_cst(&g_launches, 1);
    return end;
}

STUB_API CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    stub_event *ev = malloc(sizeof *ev);
    if (!ev) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(ev, 0, sizeof *ev);
    ev->t_ns = -1;
    ev->ctx = stub_cur_ctx();
    ev->serial = ev->ctx ? stub_ctx_serial(ev->ctx) : 0;
    *e = (CUevent)ev;
    return CUDA_SUCCESS;
}

/* An event whose context instance is gone (its handle may name another context now). */
static int dead(CUevent e) {
    const stub_event *ev = (const stub_event *)e;
    return ev->ctx && stub_ctx_serial(ev->ctx) != ev->serial;
}
#define NEED_LIVE(e) \
    if (dead(e)) return CUDA_ERROR_CONTEXT_IS_DESTROYED

STUB_API CUresult cuEventDestroy_v2(CUevent e) {
    NEED_INIT();
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    NEED_LIVE(e); /* went with its context */
    free(e);
    return CUDA_SUCCESS;
}

static _Atomic unsigned long long g_records;

STUB_API CUresult cuEventRecord(CUevent e, CUstream s) {
    NEED_INIT();
    NEED_CTX(d);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    NEED_LIVE(e);
    hk_atomic_add_seq_cst(&g_records, 1);
    stub_stream *st = stream_of(s, d);
    if (st->destroyed) return CUDA_ERROR_INVALID_HANDLE;
    int64_t now = stub_now_ns();
    stub_event *ev = (stub_event *)e;
    if (se_on()) {
        ev->se = 1;
        ev->dev = g_dev[d].physical;
        ev->key = se_key(st);
        ev->op = se_last(ev->dev, ev->key);
        ev->rec_ns = now;
        ev->t_ns = now;
        return CUDA_SUCCESS;
    }
    ev->t_ns = st->last_end_ns > now ? st->last_end_ns : now;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, s); }

/* Shared engine: is the event done, and when (its op's completion, or its record time). */
static int se_event(stub_event *ev, int64_t *t) {
    int64_t done_at;
    if (!se_done(ev->dev, ev->key, ev->op, &done_at)) return 0;
    *t = done_at > ev->rec_ns ? done_at : ev->rec_ns;
    return 1;
}

STUB_API CUresult cuEventQuery(CUevent e) {
    NEED_INIT();
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    NEED_LIVE(e);
    CUresult u = capture_unsafe_call();
    if (u != CUDA_SUCCESS) return u;
    int64_t t = ((stub_event *)e)->t_ns;
    if (((stub_event *)e)->se) return se_event((stub_event *)e, &t) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    return (t < 0 || stub_now_ns() >= t) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

STUB_API CUresult cuEventSynchronize(CUevent e) {
    NEED_INIT();
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    NEED_LIVE(e);
    CUresult u = capture_unsafe_call();
    if (u != CUDA_SUCCESS) return u;
    stub_event *ev = (stub_event *)e;
    if (ev->se)
        se_wait(ev->dev, ev->key, ev->op);
    else
        stub_sleep_until(ev->t_ns);
    return CUDA_SUCCESS;
}

STUB_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    NEED_INIT();
    if (!ms || !a || !b) return CUDA_ERROR_INVALID_HANDLE;
    NEED_LIVE(a);
    NEED_LIVE(b);
    int64_t ta = ((stub_event *)a)->t_ns, tb = ((stub_event *)b)->t_ns;
    if (((stub_event *)a)->se || ((stub_event *)b)->se) {
        if (!((stub_event *)a)->se || !((stub_event *)b)->se) return CUDA_ERROR_INVALID_HANDLE;
        if (!se_event((stub_event *)a, &ta) || !se_event((stub_event *)b, &tb)) return CUDA_ERROR_NOT_READY;
        *ms = (float)(tb - ta) / 1e6f;
        return CUDA_SUCCESS;
    }
    if (ta < 0 || tb < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (stub_now_ns() < tb || stub_now_ns() < ta) return CUDA_ERROR_NOT_READY;
    *ms = (float)(tb - ta) / 1e6f;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { return cuEventElapsedTime(ms, a, b); }

#define KERNEL_ARGS                                                                                             \
    CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, \
        CUstream s

/* The SM clock now: STUB_SM_MHZ is one clock in MHz, or a schedule "1800,1200,..." that moves to the
   next value every STUB_SM_PERIOD_US (default 20000) on the monotonic clock (the virtual one in the
   limiter's tests), as a GPU's clock moves with load. tests/hook/c/nvml_clocks.c reports the same. */
static int64_t sm_mhz_now(void) {
    const char *sm = getenv("STUB_SM_MHZ");
    if (!sm) return 0;
    int64_t vals[16];
    int n = 0;
    for (const char *p = sm; *p && n < 16;) {
        vals[n++] = atoll(p);
        const char *c = strchr(p, ',');
        if (!c) break;
        p = c + 1;
    }
    if (n <= 1) return n ? vals[0] : 0;
    const char *per = getenv("STUB_SM_PERIOD_US");
    int64_t period = per && atoll(per) > 0 ? atoll(per) * 1000 : 20000000;
    return vals[(stub_now_ns() / period) % n];
}

/* A kernel's duration follows the SM clock: with STUB_SM_MHZ and STUB_FULL_LOAD_MHZ set, a kernel
   of F us at the full-load clock takes F * (1 - e + e * full / sm) us at clock sm, where e is
   STUB_ELASTICITY (default 1: compute-bound, F * full / sm; 0: memory-bound, F at any clock), as on
   a GPU that boosts when it is not fully loaded (for the strict cap tests). */
static int64_t kernel_ns(uintptr_t us, CUstream s) {
    const char *full = getenv("STUB_FULL_LOAD_MHZ"), *el = getenv("STUB_ELASTICITY");
    int64_t ns = (int64_t)us * 1000, sm = sm_mhz_now();
    if (sm > 0 && full && atoll(full) > 0) {
        double e = el ? atof(el) : 1.0;
        ns = (int64_t)((double)ns * (1.0 - e + e * (double)atoll(full) / (double)sm));
    }
    /* on a context with fewer SMs than the device (MPS, affinity): slower in proportion */
    CUcontext c = (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) ? NULL : ((stub_stream *)s)->ctx;
    if (!c) c = stub_cur_ctx();
    unsigned sms = c ? stub_ctx_sms(c) : 0, total = stub_cur_dev() >= 0 ? g_dev[stub_cur_dev()].sms : 0;
    if (sms > 0 && sms < total) ns = ns * total / sms;
    return ns;
}

STUB_API CUresult cuLaunchKernel(KERNEL_ARGS, void **params, void **extra) {
    (void)gx;
    (void)gy;
    (void)gz;
    (void)bx;
    (void)by;
    (void)bz;
    (void)shmem;
    (void)params;
    (void)extra;
    NEED_INIT();
    if (stub_cur_dev() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    enqueue(s, kernel_ns((uintptr_t)f, s));
    return CUDA_SUCCESS;
}
STUB_API CUresult cuLaunchKernel_ptsz(KERNEL_ARGS, void **params, void **extra) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s ? s : CU_STREAM_PER_THREAD, params, extra);
}
STUB_API CUresult cuLaunchCooperativeKernel(KERNEL_ARGS, void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}
STUB_API CUresult cuLaunchCooperativeKernel_ptsz(KERNEL_ARGS, void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s ? s : CU_STREAM_PER_THREAD, params, NULL);
}
STUB_API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    return cuLaunchKernel(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                          c->sharedMemBytes, c->hStream, params, extra);
}
STUB_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    return cuLaunchKernelEx(c, f, params, extra);
}
STUB_API CUresult cuLaunch(CUfunction f) { return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL); }
STUB_API CUresult cuLaunchGrid(CUfunction f, int gw, int gh) {
    return cuLaunchKernel(f, (unsigned)gw, (unsigned)gh, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}
STUB_API CUresult cuLaunchGridAsync(CUfunction f, int gw, int gh, CUstream s) {
    return cuLaunchKernel(f, (unsigned)gw, (unsigned)gh, 1, 1, 1, 1, 0, s, NULL, NULL);
}
STUB_API CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    NEED_INIT();
    if (stub_cur_dev() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    enqueue(s, kernel_ns((uintptr_t)g, s));
    return CUDA_SUCCESS;
}
STUB_API CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    return cuGraphLaunch(g, s ? s : CU_STREAM_PER_THREAD);
}

/* Copies and memsets (the table of cuda/copy.h): `bytes` take bytes / STUB_COPY_MBPS (MB/s,
   default 1000, so 1 MB = 1 ms) on the simulated engine; synchronous ones also wait for it. No
   memory is touched (device pointers are fake). */
static _Atomic int64_t g_copy_mbps;
static int64_t copy_ns(uint64_t bytes) {
    int64_t mbps = hk_atomic_load_relaxed(&g_copy_mbps);
    if (mbps == 0) {
        const char *v = getenv("STUB_COPY_MBPS");
        mbps = v && atoll(v) > 0 ? atoll(v) : 1000;
        hk_atomic_store_relaxed(&g_copy_mbps, mbps);
    }
    return (int64_t)(bytes * 1000 / (uint64_t)mbps);
}
static _Atomic unsigned long long g_copies;

/* A synchronous call waits for what enqueue() returned: the end time, or the shared engine's op. */
static void wait_end(CUstream s, int64_t end) {
    if (se_on())
        se_wait(g_dev[stub_cur_dev()].physical, se_key(stream_of(s, stub_cur_dev())), (uint64_t)end);
    else
        stub_sleep_until(end);
}

#define STUB_COPY_DEF(name, params, args, stream, bytes, kind)       \
    STUB_API CUresult name params {                                  \
        NEED_INIT();                                                 \
        if (stub_cur_dev() < 0) return CUDA_ERROR_INVALID_CONTEXT;   \
        int64_t end = enqueue((stream), copy_ns(bytes));             \
        hk_atomic_add_seq_cst(&g_copies, 1);                         \
        if (strstr(#name, "Async") == NULL) wait_end((stream), end); \
        return CUDA_SUCCESS;                                         \
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter" /* the stub does not move the bytes */
HK_COPIES(STUB_COPY_DEF)
#pragma GCC diagnostic pop
#undef STUB_COPY_DEF

/* Test-only extras (the copies' count is kept by the copies above). */
STUB_API unsigned long long stubCudaLaunchCount(void) { return hk_atomic_load_seq_cst(&g_launches); }
STUB_API unsigned long long stubCudaCopyCount(void) { return hk_atomic_load_seq_cst(&g_copies); }
STUB_API unsigned long long stubCudaEventRecordCount(void) { return hk_atomic_load_seq_cst(&g_records); }

/* This file's part of cuGetProcAddress's table (cuda_stub.h). */
#define SYMS(X)                          \
    X(cuStreamGetCtx)                    \
    X(cuLaunch)                          \
    X(cuLaunchGrid)                      \
    X(cuLaunchGridAsync)                 \
    X(cuStreamCreate)                    \
    X(cuStreamDestroy_v2)                \
    X(cuStreamSynchronize)               \
    X(cuStreamQuery)                     \
    X(cuStreamIsCapturing)               \
    X(cuStreamBeginCapture)              \
    X(cuStreamBeginCapture_v2)           \
    X(cuThreadExchangeStreamCaptureMode) \
    X(cuStreamEndCapture)                \
    X(cuEventCreate)                     \
    X(cuEventDestroy_v2)                 \
    X(cuEventRecord)                     \
    X(cuEventRecord_ptsz)                \
    X(cuEventQuery)                      \
    X(cuEventSynchronize)                \
    X(cuEventElapsedTime)                \
    X(cuEventElapsedTime_v2)             \
    X(cuLaunchKernel)                    \
    X(cuLaunchKernel_ptsz)               \
    X(cuLaunchCooperativeKernel)         \
    X(cuLaunchCooperativeKernel_ptsz)    \
    X(cuLaunchKernelEx)                  \
    X(cuLaunchKernelEx_ptsz)             \
    X(cuGraphLaunch)                     \
    X(cuGraphLaunch_ptsz)
SYMS(STUB_ALIAS)
#define COPY_ALIAS(name, params, args, stream, bytes, kind) STUB_ALIAS(name)
#define COPY_SYM(name, params, args, stream, bytes, kind)   STUB_SYM(name)
HK_COPIES(COPY_ALIAS)
const stub_sym stub_syms_engine[] = {SYMS(STUB_SYM) HK_COPIES(COPY_SYM){NULL, NULL}};
#undef SYMS
