/* launch.c - kernel and graph launches through the compute limiter.
 *
 * Measuring GPU time: a thread's launches onto one stream form a "batch". Before the first launch
 * of a batch a start event is recorded on the stream; after every launch the batch's end event is
 * re-recorded, so it always marks the last launch. elapsed(start, end) is then the GPU time of
 * exactly that work, without idle time before it or after it. A batch is closed (queued for
 * charging) after 32 launches, 2 ms, a 100 us pause of the host, a change of stream or context,
 * or before the thread is throttled. Completed batches are charged to the claim's shared bucket
 * (core/limiter.c) by whichever launching thread of the process sees them done.
 *
 * Throttling: before a launch, if the bucket is in debt the thread first waits for its own
 * in-flight batches (their time is owed too), then sleeps until the debt is repaid. At most
 * HK_MAX_PENDING closed batches may be in flight per process, which bounds how far work can run
 * ahead of its charge. Graph launches are timed the same way, so CUDA graphs are limited too.
 *
 * Contention: with time slicing, another claim's work that runs while ours is queued lands inside
 * our [start, end] window, so elapsed time over-charges a tenant that shares the GPU. Each batch
 * therefore also carries a signature (a hash of the kernels, grids and graphs it launched), and
 * the charge is min(elapsed, the lowest cost seen for that signature, grown by 1/512 per use):
 * repeated work (training and inference loops, CUDA graphs) is charged its uncontended cost, new
 * work its elapsed time. HOOKCORE_LIMITER_CHARGE=elapsed switches the estimate off.
 *
 * Stream capture: while any capture is in progress (cuStreamBeginCapture* .. cuStreamEndCapture*,
 * counted here) the limiter issues no event calls at all: event queries are illegal during a
 * global-mode capture and recorded events would become graph nodes.
 *
 * With no compute limit configured a launch costs one predictable branch on top of the driver.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/limiter.h"
#include "shim.h"

#define HK_BATCH_MAX_LAUNCHES 32
#define HK_BATCH_MAX_AGE_NS 2000000LL
#define HK_BATCH_GAP_NS 100000LL
#define HK_MAX_PENDING 4
#define HK_RING 64
#define HK_POOL 64

typedef struct hk_pair {
    CUevent start, end;
    CUcontext ctx;
} hk_pair;

typedef struct hk_batch {
    int open;
    int ldev;
    uint64_t sig;                      /* hash of what the batch launched */
    CUstream stream;
    CUcontext ctx;
    hk_pair ev;
    unsigned count;
    int64_t opened_ns, last_ns;
} hk_batch;

static __thread hk_batch t_batch;
static pthread_key_t g_exit_key;          /* closes a thread's open batch when the thread exits */
static pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { hk_pair ev; int ldev; uint64_t sig; } g_pending[HK_RING];
static unsigned g_head, g_npending;
static hk_pair g_pool[HK_POOL];
static unsigned g_npool;
static _Atomic int g_captures;

/* Lowest cost seen per batch signature (process-local; open addressing, overwrite on collision). */
#define HK_EST 512
static struct { uint64_t sig; int64_t ns; } g_est[HK_EST];
static int g_charge_elapsed = -1;      /* HOOKCORE_LIMITER_CHARGE=elapsed */

static int64_t charge_for(uint64_t sig, int64_t elapsed) {
    if (g_charge_elapsed < 0) {
        const char *v = getenv("HOOKCORE_LIMITER_CHARGE");
        g_charge_elapsed = v && strcmp(v, "elapsed") == 0;
    }
    if (g_charge_elapsed || sig == 0) return elapsed;
    pthread_mutex_lock(&g_lock);
    unsigned i = (unsigned)(sig ^ (sig >> 29)) % HK_EST;
    int64_t c = elapsed;
    if (g_est[i].sig == sig) {
        int64_t grown = g_est[i].ns + g_est[i].ns / 512 + 1;
        if (grown < c) c = grown;
    }
    g_est[i].sig = sig;
    g_est[i].ns = c;
    pthread_mutex_unlock(&g_lock);
    return c;
}

static inline uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}

static hk_limiter g_lim[HK_MAX_DEVICES];
static _Atomic int g_lim_state[HK_MAX_DEVICES];     /* 0 unknown, 1 attached, 2 unlimited */

static hk_limiter *limiter_for(int ldev) {
    if (ldev < 0 || ldev >= HK_MAX_DEVICES) return NULL;
    int st = atomic_load_explicit(&g_lim_state[ldev], memory_order_acquire);
    if (HK_LIKELY(st == 1)) return &g_lim[ldev];
    if (st == 2) return NULL;
    pthread_mutex_lock(&g_lock);
    if (atomic_load_explicit(&g_lim_state[ldev], memory_order_relaxed) == 0) {
        /* CUDA 12.8 added cuEventElapsedTime_v2 (same signature); prefer it where it exists. */
        if (hk_real.cuEventElapsedTime_v2) hk_real.cuEventElapsedTime = hk_real.cuEventElapsedTime_v2;
        if (!hk_real.cuEventCreate || !hk_real.cuEventDestroy_v2 || !hk_real.cuEventRecord ||
            !hk_real.cuEventQuery || !hk_real.cuEventSynchronize || !hk_real.cuEventElapsedTime ||
            !hk_real.cuCtxGetCurrent) {
            hk_shim_log("the driver lacks the event API; compute limit of device %d not enforced", ldev);
            atomic_store_explicit(&g_lim_state[ldev], 2, memory_order_release);
            pthread_mutex_unlock(&g_lock);
            return NULL;
        }
        hk_limiter_attach(&g_lim[ldev], hk_limiter_area(ldev), hk_sm_limit(ldev));
        if (hk_shim_debug)
            hk_shim_log("limiter for ledger device %d: share %u%% %s", ldev, hk_sm_limit(ldev),
                        g_lim[ldev].shared ? "on" : "off");
        atomic_store_explicit(&g_lim_state[ldev], g_lim[ldev].shared ? 1 : 2, memory_order_release);
    }
    pthread_mutex_unlock(&g_lock);
    return atomic_load_explicit(&g_lim_state[ldev], memory_order_acquire) == 1 ? &g_lim[ldev] : NULL;
}

/* ---------------------------------------------------------------------------
 * Event pairs
 * ------------------------------------------------------------------------- */
static int get_pair(CUcontext ctx, hk_pair *out) {
    pthread_mutex_lock(&g_lock);
    for (unsigned i = g_npool; i-- > 0;) {
        if (g_pool[i].ctx == ctx) {
            *out = g_pool[i];
            g_pool[i] = g_pool[--g_npool];
            pthread_mutex_unlock(&g_lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&g_lock);
    out->ctx = ctx;
    if (hk_real.cuEventCreate(&out->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return -1;
    if (hk_real.cuEventCreate(&out->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        hk_real.cuEventDestroy_v2(out->start);
        return -1;
    }
    return 0;
}

static void put_pair(const hk_pair *p) {
    pthread_mutex_lock(&g_lock);
    if (g_npool < HK_POOL) {
        g_pool[g_npool++] = *p;
        pthread_mutex_unlock(&g_lock);
        return;
    }
    pthread_mutex_unlock(&g_lock);
    hk_real.cuEventDestroy_v2(p->start);
    hk_real.cuEventDestroy_v2(p->end);
}

/* Charge the oldest closed batch if it is done (block = 0) or after waiting for it (block = 1).
   Returns 1 if one was charged, 0 if none was pending (or, non-blocking, not yet done). */
static int collect_one(int block) {
    pthread_mutex_lock(&g_lock);
    if (g_npending == 0) {
        pthread_mutex_unlock(&g_lock);
        return 0;
    }
    unsigned i = g_head;
    if (!block && hk_real.cuEventQuery(g_pending[i].ev.end) == CUDA_ERROR_NOT_READY) {
        pthread_mutex_unlock(&g_lock);
        return 0;
    }
    hk_pair ev = g_pending[i].ev;
    int ldev = g_pending[i].ldev;
    uint64_t sig = g_pending[i].sig;
    g_head = (g_head + 1) % HK_RING;
    g_npending--;
    pthread_mutex_unlock(&g_lock);
    if (block) hk_real.cuEventSynchronize(ev.end);
    float ms = 0;
    if (hk_real.cuEventElapsedTime(&ms, ev.start, ev.end) == CUDA_SUCCESS && ms > 0) {
        hk_limiter *lim = limiter_for(ldev);
        if (lim) hk_limiter_charge(lim, charge_for(sig, (int64_t)((double)ms * 1e6)));
    }
    put_pair(&ev);
    return 1;
}

static unsigned pending_count(void) {
    pthread_mutex_lock(&g_lock);
    unsigned n = g_npending;
    pthread_mutex_unlock(&g_lock);
    return n;
}

static void close_batch(hk_batch *b) {
    if (!b->open) return;
    b->open = 0;
    if (b->count == 0) {            /* start recorded but no launch went through */
        put_pair(&b->ev);
        return;
    }
    for (;;) {
        pthread_mutex_lock(&g_lock);
        if (g_npending < HK_RING) {
            unsigned tail = (g_head + g_npending) % HK_RING;
            g_pending[tail].ev = b->ev;
            g_pending[tail].ldev = b->ldev;
            g_pending[tail].sig = b->sig;
            g_npending++;
            pthread_mutex_unlock(&g_lock);
            return;
        }
        pthread_mutex_unlock(&g_lock);
        collect_one(1);
    }
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    nanosleep(&ts, NULL);
}

/* A thread that exits with an open batch hands it over for charging (its GPU time is owed). */
static void on_thread_exit(void *arg) {
    (void)arg;
    close_batch(&t_batch);
}
static void make_exit_key(void) { pthread_key_create(&g_exit_key, on_thread_exit); }

/* ---------------------------------------------------------------------------
 * The gate
 * ------------------------------------------------------------------------- */

/* Before a launch on stream `s` (already normalised for per-thread default streams).
   Returns the batch to record the end event into after a successful launch, or NULL. */
static hk_batch *gate_before(CUstream s) {
    if (atomic_load_explicit(&g_captures, memory_order_acquire) > 0) return NULL;
    int capturing = 0;
    if (hk_real.cuStreamIsCapturing && hk_real.cuStreamIsCapturing(s, &capturing) == CUDA_SUCCESS && capturing)
        return NULL;
    CUcontext ctx = NULL;
    if (hk_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return NULL;
    hk_batch *b = &t_batch;
    int ldev;
    if (b->open && b->ctx == ctx) {
        ldev = b->ldev;
    } else if (hk_current_dev(&ldev, NULL) != CUDA_SUCCESS) {
        return NULL;
    }
    hk_limiter *lim = limiter_for(ldev);
    if (!lim) return NULL;

    int64_t now = hk_limiter_now_ns();
    if (b->open && (b->stream != s || b->ctx != ctx || b->count >= HK_BATCH_MAX_LAUNCHES ||
                    now - b->opened_ns > HK_BATCH_MAX_AGE_NS || now - b->last_ns > HK_BATCH_GAP_NS))
        close_batch(b);
    while (collect_one(0)) {
    }
    int64_t bal = hk_limiter_balance(lim, now);
    if (bal < 0) {
        close_batch(b);
        int64_t t0 = now;
        while (bal < 0) {
            if (!collect_one(1)) sleep_ns(hk_limiter_wait_ns(lim, bal));
            now = hk_limiter_now_ns();
            bal = hk_limiter_balance(lim, now);
        }
        hk_limiter_note_throttle(lim, now - t0);
    }
    while (pending_count() > HK_MAX_PENDING) collect_one(1);
    if (!b->open) {
        if (HK_UNLIKELY(b->opened_ns == 0)) {      /* first batch of this thread */
            pthread_once(&g_exit_once, make_exit_key);
            pthread_setspecific(g_exit_key, b);
        }
        if (get_pair(ctx, &b->ev) != 0) return NULL;
        if (hk_real.cuEventRecord(b->ev.start, s) != CUDA_SUCCESS) {
            put_pair(&b->ev);
            return NULL;
        }
        b->open = 1;
        b->stream = s;
        b->ctx = ctx;
        b->ldev = ldev;
        b->count = 0;
        b->sig = 0;
        b->opened_ns = now;
    }
    return b;
}

static void gate_after(hk_batch *b, CUstream s, CUresult r, uint64_t sig) {
    if (r != CUDA_SUCCESS) return;
    if (hk_real.cuEventRecord(b->ev.end, s) != CUDA_SUCCESS) return;
    b->sig = mix(b->sig, sig);
    b->count++;
    b->last_ns = hk_limiter_now_ns();
}

void hk_launch_atfork_child(void) {
    /* The parent's events and contexts are not usable here: forget them (leaked, by design). */
    pthread_mutex_init(&g_lock, NULL);
    g_head = g_npending = g_npool = 0;
    memset(g_est, 0, sizeof g_est);
    atomic_store(&g_captures, 0);
    memset(&t_batch, 0, sizeof t_batch);
}

/* ---------------------------------------------------------------------------
 * Interposers. Fast path: state ready and no limiter -> straight to the driver.
 * ------------------------------------------------------------------------- */
static inline int fast_path(void) {
    int s = atomic_load_explicit(&hk_shim_state, memory_order_relaxed);
    return HK_LIKELY((s == HK_SHIM_READY || s == HK_SHIM_DORMANT) && !hk_shim_limiter_on);
}

/* Slow path entry: returns CUDA_SUCCESS to go on (possibly gated), or an error when failed closed. */
static inline CUresult slow_check(void) {
    return hk_shim_ready() == HK_SHIM_FAILCLOSED ? CUDA_ERROR_NOT_INITIALIZED : CUDA_SUCCESS;
}

#define GATED(real_fn, stream, sig, call)                          \
    do {                                                           \
        if (HK_UNLIKELY(!real_fn)) return CUDA_ERROR_NOT_INITIALIZED; \
        if (fast_path()) return call;                              \
        CUresult e_ = slow_check();                                \
        if (e_ != CUDA_SUCCESS) return e_;                         \
        if (!hk_shim_limiter_on) return call;                      \
        CUstream s_ = (stream);                                    \
        hk_batch *b_ = gate_before(s_);                            \
        CUresult r_ = call;                                        \
        if (b_) gate_after(b_, s_, r_, (sig));                     \
        return r_;                                                 \
    } while (0)

#define PTSZ(s) ((s) ? (s) : CU_STREAM_PER_THREAD)
#define KSIG ((uint64_t)(uintptr_t)f * 31 + ((uint64_t)gx << 40 ^ (uint64_t)gy << 20 ^ gz) * 17 + \
              ((uint64_t)bx << 20 ^ (uint64_t)by << 10 ^ bz) + shmem)
#define XSIG (c ? ((uint64_t)(uintptr_t)f * 31 + ((uint64_t)c->gridDimX << 40 ^ (uint64_t)c->gridDimY << 20 ^ \
                   c->gridDimZ) * 17 + ((uint64_t)c->blockDimX << 20 ^ c->blockDimY << 10 ^ c->blockDimZ)) : 1)

HK_EXPORT CUresult cuLaunchKernel(HK_LAUNCH_ARGS, void **params, void **extra) {
    GATED(hk_real.cuLaunchKernel, s, KSIG, hk_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}
HK_EXPORT CUresult cuLaunchKernel_ptsz(HK_LAUNCH_ARGS, void **params, void **extra) {
    GATED(hk_real.cuLaunchKernel_ptsz, PTSZ(s), KSIG,
          hk_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}
HK_EXPORT CUresult cuLaunchCooperativeKernel(HK_LAUNCH_ARGS, void **params) {
    GATED(hk_real.cuLaunchCooperativeKernel, s, KSIG,
          hk_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}
HK_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(HK_LAUNCH_ARGS, void **params) {
    GATED(hk_real.cuLaunchCooperativeKernel_ptsz, PTSZ(s), KSIG,
          hk_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}
HK_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GATED(hk_real.cuLaunchKernelEx, c ? c->hStream : NULL, XSIG, hk_real.cuLaunchKernelEx(c, f, params, extra));
}
HK_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    GATED(hk_real.cuLaunchKernelEx_ptsz, PTSZ(c ? c->hStream : NULL), XSIG,
          hk_real.cuLaunchKernelEx_ptsz(c, f, params, extra));
}
HK_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    GATED(hk_real.cuGraphLaunch, s, (uint64_t)(uintptr_t)g * 0x100000001b3ULL, hk_real.cuGraphLaunch(g, s));
}
HK_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    GATED(hk_real.cuGraphLaunch_ptsz, PTSZ(s), (uint64_t)(uintptr_t)g * 0x100000001b3ULL, hk_real.cuGraphLaunch_ptsz(g, s));
}

/* ---------------------------------------------------------------------------
 * Stream capture bookkeeping
 * ------------------------------------------------------------------------- */
static CUresult begun(CUresult r) {
    if (r == CUDA_SUCCESS) atomic_fetch_add_explicit(&g_captures, 1, memory_order_acq_rel);
    return r;
}

HK_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
    if (!hk_real.cuStreamBeginCapture_v2) return CUDA_ERROR_NOT_INITIALIZED;
    return begun(hk_real.cuStreamBeginCapture_v2(s, mode));
}
HK_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode) {
    if (!hk_real.cuStreamBeginCapture_v2_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return begun(hk_real.cuStreamBeginCapture_v2_ptsz(s, mode));
}
HK_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, void *graph, const void *deps, const void *edata,
                                               size_t n, int mode) {
    if (!hk_real.cuStreamBeginCaptureToGraph) return CUDA_ERROR_NOT_INITIALIZED;
    return begun(hk_real.cuStreamBeginCaptureToGraph(s, graph, deps, edata, n, mode));
}
HK_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, void *graph, const void *deps,
                                                    const void *edata, size_t n, int mode) {
    if (!hk_real.cuStreamBeginCaptureToGraph_ptsz) return CUDA_ERROR_NOT_INITIALIZED;
    return begun(hk_real.cuStreamBeginCaptureToGraph_ptsz(s, graph, deps, edata, n, mode));
}

static CUresult ended(CUstream s, void **graph, __typeof__(hk_real.cuStreamEndCapture) fn) {
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    int capturing = 1;
    if (hk_real.cuStreamIsCapturing) hk_real.cuStreamIsCapturing(s, &capturing);
    CUresult r = fn(s, graph);
    if (capturing) {
        int c = atomic_load_explicit(&g_captures, memory_order_acquire);
        while (c > 0 && !atomic_compare_exchange_weak_explicit(&g_captures, &c, c - 1, memory_order_acq_rel,
                                                               memory_order_acquire)) {
        }
    }
    return r;
}
HK_EXPORT CUresult cuStreamEndCapture(CUstream s, void **graph) {
    return ended(s, graph, hk_real.cuStreamEndCapture);
}
HK_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, void **graph) {
    return ended(s, graph, hk_real.cuStreamEndCapture_ptsz);
}
