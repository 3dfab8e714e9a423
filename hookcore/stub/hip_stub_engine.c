/* hip_stub_engine.c - the stub HIP runtime's engine (hip_stub.c has the overview): streams, events,
 * stream capture and graphs, kernel launches, copies and memsets, each device one engine timed on
 * CLOCK_MONOTONIC.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "hip_stub.h"

/* ---------------------------------------------------------------------------
 * Streams, events, the engine
 * ------------------------------------------------------------------------- */
static hip_stream *stream_of(hipStream_t s) {
    if (s && s != (hipStream_t)2) return s; /* 2: hipStreamPerThread, served by the null stream here */
    int d = hs_current();
    return d < 0 ? NULL : &g_dev[d].null_stream;
}

/* A stream or event its device's reset took (hipDeviceReset). Every call on such an event is
   counted: using what a reset destroyed is undefined on a real runtime (CUDA's driver crashed). */
static _Atomic unsigned long long g_dead_event_calls;
static int stream_gone(const hip_stream *st) {
    return st != &g_dev[st->dev].null_stream && st->gen != hk_atomic_load_acquire(&g_dev[st->dev].gen);
}
static int event_gone(hipEvent_t e) {
    const hip_event *ev = e;
    if (ev->gen == hk_atomic_load_acquire(&g_dev[ev->dev].gen)) return 0;
    hk_atomic_add_seq_cst(&g_dead_event_calls, 1);
    return 1;
}

HIP_API unsigned long long stubHipDeadEventCalls(void) { return hk_atomic_load_seq_cst(&g_dead_event_calls); }

HIP_API hipError_t hipStreamCreate(hipStream_t *s) {
    int d = hs_current();
    if (!s) return hipErrorInvalidValue;
    if (d < 0) return hipErrorNoDevice;
    hip_stream *st = calloc(1, sizeof *st);
    if (!st) return hipErrorOutOfMemory;
    st->dev = d;
    st->gen = hk_atomic_load_acquire(&g_dev[d].gen);
    *s = st;
    return hipSuccess;
}

HIP_API hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned int flags) {
    (void)flags;
    return hipStreamCreate(s);
}

HIP_API hipError_t hipStreamDestroy(hipStream_t s) {
    if (s && s != (hipStream_t)2) free(s);
    return hipSuccess;
}

HIP_API hipError_t hipStreamSynchronize(hipStream_t s) {
    hip_stream *st = stream_of(s);
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    int64_t end = st->last_end_ns;
    pthread_mutex_unlock(&g_lock);
    hs_sleep_until(end);
    return hipSuccess;
}

HIP_API hipError_t hipDeviceSynchronize(void) {
    int d = hs_current();
    if (d < 0) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    int64_t busy = g_dev[d].busy_until_ns;
    pthread_mutex_unlock(&g_lock);
    hs_sleep_until(busy);
    return hipSuccess;
}

/* The calling thread's device: its work done first, then every stream, event, pointer and array made
   on it gone. */
HIP_API hipError_t hipDeviceReset(void) {
    hipError_t r = hipDeviceSynchronize();
    if (r != hipSuccess) return r;
    int d = hs_current();
    pthread_mutex_lock(&g_lock);
    hk_atomic_add_acq_rel(&g_dev[d].gen, 1);
    g_dev[d].null_stream.capturing = 0;
    g_dev[d].used -= g_dev[d].resettable; /* its pointers and arrays */
    g_dev[d].resettable = 0;
    pthread_mutex_unlock(&g_lock);
    return hipSuccess;
}

/* Queue `ns` of work on the stream; start_out, end_out: when it runs (not set while capturing). */
static hipError_t submit(hipStream_t s, int64_t ns, int copy, int64_t *start_out, int64_t *end_out) {
    hip_stream *st = stream_of(s);
    if (!st) return hipErrorNoDevice;
    if (stream_gone(st)) return hipErrorContextIsDestroyed;
    pthread_mutex_lock(&g_lock);
    if (copy)
        g_copies++;
    else
        g_launches++;
    if (st->capturing) {
        st->captured_ns += ns;
    } else {
        int64_t now = hs_now_ns(), busy = g_dev[st->dev].busy_until_ns;
        int64_t start = busy > now ? busy : now;
        if (st->last_end_ns > start) start = st->last_end_ns;
        g_dev[st->dev].busy_until_ns = st->last_end_ns = start + ns;
        if (start_out) *start_out = start;
        if (end_out) *end_out = start + ns;
    }
    pthread_mutex_unlock(&g_lock);
    return hipSuccess;
}

static hipError_t kernel(const void *handle, hipStream_t s, hipEvent_t start, hipEvent_t stop) {
    int64_t t0 = -1, t1 = -1;
    hipError_t r = submit(s, (int64_t)(uintptr_t)handle * 1000, 0, &t0, &t1);
    if (r == hipSuccess && start && t0 >= 0) ((hip_event *)start)->t_ns = t0;
    if (r == hipSuccess && stop && t1 >= 0) ((hip_event *)stop)->t_ns = t1;
    return r;
}

/* A copy or memset of `bytes`: asynchronous on `s`, or (sync) waited for. */
static hipError_t copy(hipStream_t s, uint64_t bytes, int sync) {
    int64_t end = -1;
    hipError_t r = submit(s, (int64_t)bytes, 1, NULL, &end);
    if (r == hipSuccess && sync && end >= 0) hs_sleep_until(end);
    return r;
}

HIP_API hipError_t hipEventCreate(hipEvent_t *e) {
    if (!e) return hipErrorInvalidValue;
    int d = hs_current();
    if (d < 0) return hipErrorNoDevice;
    hip_event *ev = malloc(sizeof *ev);
    if (!ev) return hipErrorOutOfMemory;
    ev->t_ns = -1;
    ev->dev = d;
    ev->gen = hk_atomic_load_acquire(&g_dev[d].gen);
    *e = ev;
    return hipSuccess;
}

HIP_API hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned int flags) {
    (void)flags;
    return hipEventCreate(e);
}

HIP_API hipError_t hipEventDestroy(hipEvent_t e) {
    if (e && event_gone(e)) return hipErrorContextIsDestroyed; /* the reset freed it (leaked here) */
    free(e);
    return hipSuccess;
}

HIP_API hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
    hip_stream *st = stream_of(s);
    if (!e) return hipErrorInvalidResourceHandle;
    if (!st) return hipErrorNoDevice;
    if (event_gone(e)) return hipErrorContextIsDestroyed;
    if (stream_gone(st)) return hipErrorContextIsDestroyed;
    pthread_mutex_lock(&g_lock);
    int capturing = st->capturing;
    int64_t end = st->last_end_ns;
    pthread_mutex_unlock(&g_lock);
    if (capturing) return hipErrorStreamCaptureUnsupported;
    int64_t now = hs_now_ns();
    ((hip_event *)e)->t_ns = end > now ? end : now;
    return hipSuccess;
}

HIP_API hipError_t hipEventQuery(hipEvent_t e) {
    if (!e) return hipErrorInvalidResourceHandle;
    if (event_gone(e)) return hipErrorContextIsDestroyed;
    int64_t t = ((hip_event *)e)->t_ns;
    return t < 0 || hs_now_ns() >= t ? hipSuccess : hipErrorNotReady;
}

HIP_API hipError_t hipEventSynchronize(hipEvent_t e) {
    if (!e) return hipErrorInvalidResourceHandle;
    if (event_gone(e)) return hipErrorContextIsDestroyed;
    hs_sleep_until(((hip_event *)e)->t_ns);
    return hipSuccess;
}

HIP_API hipError_t hipEventElapsedTime(float *ms, hipEvent_t a, hipEvent_t b) {
    if (!ms || !a || !b) return hipErrorInvalidValue;
    if (event_gone(a) | event_gone(b)) return hipErrorContextIsDestroyed;
    int64_t ta = ((hip_event *)a)->t_ns, tb = ((hip_event *)b)->t_ns;
    if (ta < 0 || tb < 0) return hipErrorInvalidResourceHandle;
    if (hs_now_ns() < ta || hs_now_ns() < tb) return hipErrorNotReady;
    *ms = (float)(tb - ta) / 1e6f;
    return hipSuccess;
}

/* --- capture and graphs: a graph (and its exec) is the captured microseconds --- */
HIP_API hipError_t hipStreamBeginCapture(hipStream_t s, int mode) {
    (void)mode;
    hip_stream *st = stream_of(s);
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    hipError_t r = st->capturing ? hipErrorStreamCaptureUnsupported : hipSuccess;
    if (r == hipSuccess) st->capturing = 1, st->captured_ns = 0;
    pthread_mutex_unlock(&g_lock);
    return r;
}

HIP_API hipError_t hipStreamEndCapture(hipStream_t s, void **graph) {
    hip_stream *st = stream_of(s);
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    hipError_t r = st->capturing ? hipSuccess : hipErrorStreamCaptureUnmatched;
    uint64_t us = (uint64_t)(st->captured_ns / 1000);
    st->capturing = 0;
    pthread_mutex_unlock(&g_lock);
    if (r == hipSuccess && graph) *graph = (void *)(uintptr_t)(us ? us : 1);
    return r;
}

HIP_API hipError_t hipStreamIsCapturing(hipStream_t s, int *status) {
    hip_stream *st = stream_of(s);
    if (!status) return hipErrorInvalidValue;
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    *status = st->capturing;
    pthread_mutex_unlock(&g_lock);
    return hipSuccess;
}

HIP_API hipError_t hipGraphInstantiate(void **exec, void *graph, void *err_node, char *log, size_t log_size) {
    (void)err_node;
    (void)log;
    (void)log_size;
    if (!exec || !graph) return hipErrorInvalidValue;
    *exec = graph;
    return hipSuccess;
}

/* A memory allocation node: a handle and a device address (the stub's graphs run kernels only, so
   the node's memory is never touched). */
HIP_API hipError_t hipGraphAddMemAllocNode(void **node, void *graph, const void *deps, size_t n, void *params) {
    (void)deps;
    (void)n;
    if (!node || !graph || !params) return hipErrorInvalidValue;
    static _Atomic uintptr_t next = 0x7d0000000000ULL;
    *node = (void *)hk_atomic_add_seq_cst(&next, 0x1000);
    return hipSuccess;
}

HIP_API hipError_t hipGraphExecDestroy(void *exec) { return exec ? hipSuccess : hipErrorInvalidValue; }
HIP_API hipError_t hipGraphDestroy(void *graph) { return graph ? hipSuccess : hipErrorInvalidValue; }

/* ---------------------------------------------------------------------------
 * Launches
 * ------------------------------------------------------------------------- */
HIP_API hipError_t hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s) {
    (void)grid;
    (void)block;
    (void)args;
    (void)shmem;
    return kernel(f, s, NULL, NULL);
}

HIP_API hipError_t hipExtLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s,
                                      hipEvent_t start, hipEvent_t stop, int flags) {
    (void)grid;
    (void)block;
    (void)args;
    (void)shmem;
    (void)flags;
    return kernel(f, s, start, stop);
}

HIP_API hipError_t hipLaunchCooperativeKernel(const void *f, dim3 grid, dim3 block, void **args, unsigned int shmem,
                                              hipStream_t s) {
    (void)grid;
    (void)block;
    (void)args;
    (void)shmem;
    return kernel(f, s, NULL, NULL);
}

HIP_API hipError_t hipModuleLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                         unsigned int by, unsigned int bz, unsigned int shmem, hipStream_t s,
                                         void **params, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)params, (void)extra;
    return kernel(f, s, NULL, NULL);
}

HIP_API hipError_t hipExtModuleLaunchKernel(void *f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                                            uint32_t lz, size_t shmem, hipStream_t s, void **params, void **extra,
                                            hipEvent_t start, hipEvent_t stop, uint32_t flags) {
    (void)gx, (void)gy, (void)gz, (void)lx, (void)ly, (void)lz, (void)shmem, (void)params, (void)extra, (void)flags;
    return kernel(f, s, start, stop);
}

HIP_API hipError_t hipGraphLaunch(void *exec, hipStream_t s) {
    if (!exec) return hipErrorInvalidValue;
    return kernel(exec, s, NULL, NULL);
}

HIP_API hipError_t hipModuleLaunchCooperativeKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                    unsigned int bx, unsigned int by, unsigned int bz,
                                                    unsigned int shmem, hipStream_t s, void **params) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)params;
    return kernel(f, s, NULL, NULL);
}

/* The extensible launches: the stream is the configuration's (hip_stub.h lays both out). */
HIP_API hipError_t hipLaunchKernelExC(const hs_launch_config *config, const void *f, void **args) {
    (void)args;
    return config ? kernel(f, config->stream, NULL, NULL) : hipErrorInvalidValue;
}

HIP_API hipError_t hipDrvLaunchKernelEx(const hs_drv_launch_config *config, void *f, void **params, void **extra) {
    (void)params, (void)extra;
    return config ? kernel(f, config->stream, NULL, NULL) : hipErrorInvalidValue;
}

/* ---------------------------------------------------------------------------
 * Copies and memsets: 1 ns per byte on the engine
 * ------------------------------------------------------------------------- */
HIP_API hipError_t hipMemcpy(void *d, const void *s, size_t n, int k) {
    (void)d, (void)s, (void)k;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyAsync(void *d, const void *s, size_t n, int k, hipStream_t st) {
    (void)d, (void)s, (void)k;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemcpyWithStream(void *d, const void *s, size_t n, int k, hipStream_t st) {
    (void)d, (void)s, (void)k;
    return copy(st, n, 1);
}
HIP_API hipError_t hipMemcpyHtoD(void *d, void *s, size_t n) {
    (void)d, (void)s;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyHtoDAsync(void *d, void *s, size_t n, hipStream_t st) {
    (void)d, (void)s;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemcpyDtoH(void *d, void *s, size_t n) {
    (void)d, (void)s;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyDtoHAsync(void *d, void *s, size_t n, hipStream_t st) {
    (void)d, (void)s;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemcpyDtoD(void *d, void *s, size_t n) {
    (void)d, (void)s;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyDtoDAsync(void *d, void *s, size_t n, hipStream_t st) {
    (void)d, (void)s;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemcpy2D(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k) {
    (void)d, (void)dp, (void)s, (void)sp, (void)k;
    return copy(NULL, (uint64_t)w * h, 1);
}
HIP_API hipError_t hipMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k,
                                    hipStream_t st) {
    (void)d, (void)dp, (void)s, (void)sp, (void)k;
    return copy(st, (uint64_t)w * h, 0);
}
HIP_API hipError_t hipMemcpyPeer(void *d, int dd, const void *s, int sd, size_t n) {
    (void)d, (void)dd, (void)s, (void)sd;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, hipStream_t st) {
    (void)d, (void)dd, (void)s, (void)sd;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemset(void *d, int v, size_t n) {
    (void)d, (void)v;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemsetAsync(void *d, int v, size_t n, hipStream_t st) {
    (void)d, (void)v;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemsetD8(void *d, unsigned char v, size_t n) {
    (void)d, (void)v;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemsetD8Async(void *d, unsigned char v, size_t n, hipStream_t st) {
    (void)d, (void)v;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemsetD32(void *d, int v, size_t n) {
    (void)d, (void)v;
    return copy(NULL, 4 * (uint64_t)n, 1);
}
HIP_API hipError_t hipMemcpyToSymbol(const void *sym, const void *s, size_t n, size_t off, int k) {
    (void)sym, (void)s, (void)off, (void)k;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyToSymbolAsync(const void *sym, const void *s, size_t n, size_t off, int k, hipStream_t st) {
    (void)sym, (void)s, (void)off, (void)k;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemcpyFromSymbol(void *d, const void *sym, size_t n, size_t off, int k) {
    (void)d, (void)sym, (void)off, (void)k;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyFromSymbolAsync(void *d, const void *sym, size_t n, size_t off, int k, hipStream_t st) {
    (void)d, (void)sym, (void)off, (void)k;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemset2D(void *d, size_t pitch, int v, size_t w, size_t h) {
    (void)d, (void)pitch, (void)v;
    return copy(NULL, (uint64_t)w * h, 1);
}
HIP_API hipError_t hipMemset2DAsync(void *d, size_t pitch, int v, size_t w, size_t h, hipStream_t st) {
    (void)d, (void)pitch, (void)v;
    return copy(st, (uint64_t)w * h, 0);
}
static uint64_t volume(hipExtent e) { return (uint64_t)e.width * (e.height ? e.height : 1) * (e.depth ? e.depth : 1); }
HIP_API hipError_t hipMemset3D(hipPitchedPtr pp, int v, hipExtent e) {
    (void)pp, (void)v;
    return copy(NULL, volume(e), 1);
}
HIP_API hipError_t hipMemset3DAsync(hipPitchedPtr pp, int v, hipExtent e, hipStream_t st) {
    (void)pp, (void)v;
    return copy(st, volume(e), 0);
}
HIP_API hipError_t hipMemcpy3D(const hs_memcpy3d *p) {
    return p ? copy(NULL, volume(p->extent), 1) : hipErrorInvalidValue;
}
HIP_API hipError_t hipMemcpy3DAsync(const hs_memcpy3d *p, hipStream_t st) {
    return p ? copy(st, volume(p->extent), 0) : hipErrorInvalidValue;
}
HIP_API hipError_t hipMemsetD32Async(void *d, int v, size_t n, hipStream_t st) {
    (void)d, (void)v;
    return copy(st, 4 * (uint64_t)n, 0);
}

/* This file's part of hipGetProcAddress's table (hip_stub.h). */
#define SYMS(X)                   \
    X(hipLaunchKernel)            \
    X(hipLaunchCooperativeKernel) \
    X(hipGraphLaunch)             \
    X(hipStreamBeginCapture)      \
    X(hipStreamEndCapture)        \
    X(hipMemcpy)                  \
    X(hipMemcpyAsync)             \
    X(hipMemcpy2D)                \
    X(hipMemcpy2DAsync)           \
    X(hipMemset)                  \
    X(hipMemsetAsync)             \
    X(hipMemcpyToSymbol)          \
    X(hipMemcpyToSymbolAsync)     \
    X(hipMemcpyFromSymbol)        \
    X(hipMemcpyFromSymbolAsync)   \
    X(hipMemset2D)                \
    X(hipMemset2DAsync)           \
    X(hipMemset3D)                \
    X(hipMemset3DAsync)           \
    X(hipMemcpy3D)                \
    X(hipMemcpy3DAsync)           \
    X(hipStreamSynchronize)
SYMS(HS_ALIAS)
const hs_sym hs_syms_engine[] = {SYMS(HS_SYM){NULL, NULL}};
#undef SYMS

/* ---------------------------------------------------------------------------
 * The per-thread default stream's entry points (_spt): the same work, a null stream meaning
 * hipStreamPerThread (which the stub serves with the null stream); each calls this file's own
 * function, not the exported name a preloaded hook would take.
 * ------------------------------------------------------------------------- */
#define PT(s) ((s) ? (s) : (hipStream_t)2)
HIP_API hipError_t hipLaunchKernel_spt(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s) {
    return hs_local_hipLaunchKernel(f, grid, block, args, shmem, PT(s));
}
HIP_API hipError_t hipLaunchCooperativeKernel_spt(const void *f, dim3 grid, dim3 block, void **args, unsigned int shmem,
                                                  hipStream_t s) {
    return hs_local_hipLaunchCooperativeKernel(f, grid, block, args, shmem, PT(s));
}
HIP_API hipError_t hipGraphLaunch_spt(void *exec, hipStream_t s) { return hs_local_hipGraphLaunch(exec, PT(s)); }
HIP_API hipError_t hipStreamBeginCapture_spt(hipStream_t s, int mode) {
    return hs_local_hipStreamBeginCapture(PT(s), mode);
}
HIP_API hipError_t hipStreamEndCapture_spt(hipStream_t s, void **graph) {
    return hs_local_hipStreamEndCapture(PT(s), graph);
}
HIP_API hipError_t hipMemcpy_spt(void *d, const void *s, size_t n, int k) { return hs_local_hipMemcpy(d, s, n, k); }
HIP_API hipError_t hipMemcpyAsync_spt(void *d, const void *s, size_t n, int k, hipStream_t st) {
    return hs_local_hipMemcpyAsync(d, s, n, k, PT(st));
}
HIP_API hipError_t hipMemcpy2D_spt(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k) {
    return hs_local_hipMemcpy2D(d, dp, s, sp, w, h, k);
}
HIP_API hipError_t hipMemcpy2DAsync_spt(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k,
                                        hipStream_t st) {
    return hs_local_hipMemcpy2DAsync(d, dp, s, sp, w, h, k, PT(st));
}
HIP_API hipError_t hipMemset_spt(void *d, int v, size_t n) { return hs_local_hipMemset(d, v, n); }
HIP_API hipError_t hipMemsetAsync_spt(void *d, int v, size_t n, hipStream_t st) {
    return hs_local_hipMemsetAsync(d, v, n, PT(st));
}
HIP_API hipError_t hipMemcpyToSymbol_spt(const void *sym, const void *s, size_t n, size_t off, int k) {
    return hs_local_hipMemcpyToSymbol(sym, s, n, off, k);
}
HIP_API hipError_t hipMemcpyToSymbolAsync_spt(const void *sym, const void *s, size_t n, size_t off, int k,
                                              hipStream_t st) {
    return hs_local_hipMemcpyToSymbolAsync(sym, s, n, off, k, PT(st));
}
HIP_API hipError_t hipMemcpyFromSymbol_spt(void *d, const void *sym, size_t n, size_t off, int k) {
    return hs_local_hipMemcpyFromSymbol(d, sym, n, off, k);
}
HIP_API hipError_t hipMemcpyFromSymbolAsync_spt(void *d, const void *sym, size_t n, size_t off, int k, hipStream_t st) {
    return hs_local_hipMemcpyFromSymbolAsync(d, sym, n, off, k, PT(st));
}
HIP_API hipError_t hipMemset2D_spt(void *d, size_t pitch, int v, size_t w, size_t h) {
    return hs_local_hipMemset2D(d, pitch, v, w, h);
}
HIP_API hipError_t hipMemset2DAsync_spt(void *d, size_t pitch, int v, size_t w, size_t h, hipStream_t st) {
    return hs_local_hipMemset2DAsync(d, pitch, v, w, h, PT(st));
}
HIP_API hipError_t hipMemset3D_spt(hipPitchedPtr pp, int v, hipExtent e) { return hs_local_hipMemset3D(pp, v, e); }
HIP_API hipError_t hipMemset3DAsync_spt(hipPitchedPtr pp, int v, hipExtent e, hipStream_t st) {
    return hs_local_hipMemset3DAsync(pp, v, e, PT(st));
}
HIP_API hipError_t hipMemcpy3D_spt(const hs_memcpy3d *p) { return hs_local_hipMemcpy3D(p); }
HIP_API hipError_t hipMemcpy3DAsync_spt(const hs_memcpy3d *p, hipStream_t st) {
    return hs_local_hipMemcpy3DAsync(p, PT(st));
}
#undef PT
