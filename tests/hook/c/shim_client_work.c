/* shim_client_work.c - the shim client's work commands: copy, copynames, threads, launch, capture,
 * holdcapture
 * (shim_client.c lists them). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim_client.h"

void cmd_copy(const char *what, size_t bytes, double seconds, int ptds) {
    cuuint64_t fl = ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
    int async = strstr(what, "-async") != NULL;
    char base[64];
    snprintf(base, sizeof base, "%.*s", (int)strcspn(what, "-"), what);
    static const struct {
        const char *what, *name;
    } names[] = {
        {"memcpy", "cuMemcpy"},      {"htod", "cuMemcpyHtoD"},      {"dtoh", "cuMemcpyDtoH"},
        {"dtod", "cuMemcpyDtoD"},    {"peer", "cuMemcpyPeer"},      {"2d", "cuMemcpy2D"},
        {"3d", "cuMemcpy3D"},        {"memset8", "cuMemsetD8"},     {"memset16", "cuMemsetD16"},
        {"memset32", "cuMemsetD32"}, {"memset2d8", "cuMemsetD2D8"},
    };
    const char *fn = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(names[i].what, base)) fn = names[i].name;
    if (!fn) fail("unknown copy %s", what);
    char full[80];
    snprintf(full, sizeof full, "%s%s", fn, async ? "Async" : "");
    void *f = sym(full, V, fl);
    const char *sname;
    const char *preload = getenv("LD_PRELOAD");
    if (strcmp(owner(f, &sname), "libvgpu.so") && preload && strstr(preload, "libvgpu.so"))
        fail("%s not hooked (%s)", full, sname);
    CUresult (*ssync)(CUstream) = sym("cuStreamSynchronize", V, 0);
    CUresult (*screate)(CUstream *, unsigned) = sym("cuStreamCreate", V, 0);
    CUstream st = NULL;
    if (async && !ptds && screate(&st, 0) != CUDA_SUCCESS) fail("stream");
    CUcontext ctx;
    CUresult (*cur)(CUcontext *) = sym("cuCtxGetCurrent", V, 0);
    cur(&ctx);
    static char host[16];
    CUDA_MEMCPY2D p2 = {.WidthInBytes = bytes / 100, .Height = 100};
    CUDA_MEMCPY3D p3 = {.WidthInBytes = bytes / 100, .Height = 10, .Depth = 10};
    double t0 = now_s(), t;
    unsigned long n = 0;
    while ((t = now_s()) - t0 < seconds) {
        for (int i = 0; i < 10; i++) {
            CUresult r;
            CUdeviceptr d = 0x700000000000ULL;
            if (!strcmp(base, "memcpy") || !strcmp(base, "dtod"))
                r = async ? ((CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))f)(d, d, bytes, st)
                          : ((CUresult(*)(CUdeviceptr, CUdeviceptr, size_t))f)(d, d, bytes);
            else if (!strcmp(base, "htod"))
                r = async ? ((CUresult(*)(CUdeviceptr, const void *, size_t, CUstream))f)(d, host, bytes, st)
                          : ((CUresult(*)(CUdeviceptr, const void *, size_t))f)(d, host, bytes);
            else if (!strcmp(base, "dtoh"))
                r = async ? ((CUresult(*)(void *, CUdeviceptr, size_t, CUstream))f)(host, d, bytes, st)
                          : ((CUresult(*)(void *, CUdeviceptr, size_t))f)(host, d, bytes);
            else if (!strcmp(base, "peer"))
                r = async ? ((CUresult(*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream))f)(
                                d, ctx, d, ctx, bytes, st)
                          : ((CUresult(*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t))f)(d, ctx, d, ctx,
                                                                                                     bytes);
            else if (!strcmp(base, "2d"))
                r = async ? ((CUresult(*)(const CUDA_MEMCPY2D *, CUstream))f)(&p2, st)
                          : ((CUresult(*)(const CUDA_MEMCPY2D *))f)(&p2);
            else if (!strcmp(base, "3d"))
                r = async ? ((CUresult(*)(const CUDA_MEMCPY3D *, CUstream))f)(&p3, st)
                          : ((CUresult(*)(const CUDA_MEMCPY3D *))f)(&p3);
            else if (!strcmp(base, "memset8"))
                r = async ? ((CUresult(*)(CUdeviceptr, unsigned char, size_t, CUstream))f)(d, 1, bytes, st)
                          : ((CUresult(*)(CUdeviceptr, unsigned char, size_t))f)(d, 1, bytes);
            else if (!strcmp(base, "memset16"))
                r = async ? ((CUresult(*)(CUdeviceptr, unsigned short, size_t, CUstream))f)(d, 1, bytes / 2, st)
                          : ((CUresult(*)(CUdeviceptr, unsigned short, size_t))f)(d, 1, bytes / 2);
            else if (!strcmp(base, "memset32"))
                r = async ? ((CUresult(*)(CUdeviceptr, unsigned int, size_t, CUstream))f)(d, 1, bytes / 4, st)
                          : ((CUresult(*)(CUdeviceptr, unsigned int, size_t))f)(d, 1, bytes / 4);
            else
                r = async ? ((CUresult(*)(CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream))f)(
                                d, bytes / 100, 1, bytes / 100, 100, st)
                          : ((CUresult(*)(CUdeviceptr, size_t, unsigned char, size_t, size_t))f)(d, bytes / 100, 1,
                                                                                                 bytes / 100, 100);
            if (r != CUDA_SUCCESS) fail("%s = %d", full, r);
        }
        if (async) ssync(ptds ? CU_STREAM_PER_THREAD : st);
        n += 10;
    }
    printf("RATE %.1f\n", n / (t - t0));
    printf("RAN %lu %.0f\n", n, (t - t0) * 1e9);
}

void cmd_copynames(void) {
    static const char *const bases[] = {
        "cuMemcpy",          "cuMemcpyAsync",       "cuMemcpyHtoD",      "cuMemcpyHtoDAsync", "cuMemcpyDtoH",
        "cuMemcpyDtoHAsync", "cuMemcpyDtoD",        "cuMemcpyDtoDAsync", "cuMemcpyPeer",      "cuMemcpyPeerAsync",
        "cuMemcpy2D",        "cuMemcpy2DUnaligned", "cuMemcpy2DAsync",   "cuMemcpy3D",        "cuMemcpy3DAsync",
        "cuMemcpy3DPeer",    "cuMemcpy3DPeerAsync", "cuMemsetD8",        "cuMemsetD8Async",   "cuMemsetD16",
        "cuMemsetD16Async",  "cuMemsetD32",         "cuMemsetD32Async",  "cuMemsetD2D8",      "cuMemsetD2D8Async",
        "cuMemsetD2D16",     "cuMemsetD2D16Async",  "cuMemsetD2D32",     "cuMemsetD2D32Async"};
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        for (int pt = 0; pt < 2; pt++) {
            const char *sname = "?";
            void *f = sym(bases[i], V, pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0);
            const char *lib = owner(f, &sname);
            printf("COPYNAME %s %d %s %s\n", bases[i], pt, lib, sname);
        }
    }
}

static CUcontext g_ctx;
static int g_iters;
static int (*g_nvml_mem)(void *, void *);
static void *g_nvml_dev;
static unsigned long long g_nvml_total; /* THREADS_NVML_TOTAL: what every query must report */

static void *thread_body(void *arg) {
    (void)arg;
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    CUresult (*ssync)(CUstream) = sym("cuStreamSynchronize", V, 0);
    CUresult (*create)(CUcontext *, unsigned, CUdevice) = sym("cuCtxCreate", V, 0);
    CUresult (*destroy)(CUcontext) = sym("cuCtxDestroy", V, 0);
    CUresult (*screate)(CUstream *, unsigned) = sym("cuStreamCreate", V, 0);
    CUresult (*sdestroy)(CUstream) = sym("cuStreamDestroy", V, 0);
    if (cuCtxSetCurrent_(g_ctx) != CUDA_SUCCESS) fail("thread set current");
    for (int i = 0; i < g_iters; i++) {
        if (!dlsym(libcuda, "cuMemAlloc_v2") || !dlsym(libcuda, "cuCtxGetApiVersion")) fail("thread dlsym");
        CUresult (*alloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc", V, 0);
        CUdeviceptr p;
        CUresult r = alloc(&p, MiB);
        if (r == CUDA_SUCCESS)
            cuMemFree_(p);
        else if (r != CUDA_ERROR_OUT_OF_MEMORY)
            fail("thread alloc = %d", r);
        if (launch((CUfunction)(uintptr_t)20, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) fail("launch");
        if (i % 8 == 7) ssync(NULL);
        if (i % 16 == 7) { /* a stream of its own: launched onto, destroyed with its end deferred */
            CUstream st = NULL;
            if (screate(&st, 0) != CUDA_SUCCESS) fail("thread stream");
            for (int k = 0; k < 3; k++)
                if (launch((CUfunction)(uintptr_t)20, 1, 1, 1, 1, 1, 1, 0, st, NULL, NULL) != CUDA_SUCCESS)
                    fail("launch on its stream");
            if (sdestroy(st) != CUDA_SUCCESS) fail("thread stream destroy");
        }
        if (i % 16 == 15) { /* a context of its own comes and goes while the others launch */
            CUcontext own = NULL;
            if (create(&own, 0, 0) != CUDA_SUCCESS) fail("thread create");
            if (launch((CUfunction)(uintptr_t)20, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
                fail("launch in its own context");
            if (destroy(own) != CUDA_SUCCESS || cuCtxSetCurrent_(g_ctx) != CUDA_SUCCESS) fail("thread destroy");
        }
        if (g_nvml_mem) {
            unsigned long long m[3];
            if (g_nvml_mem(g_nvml_dev, m) != 0) fail("thread nvml");
            if (g_nvml_total && m[0] != g_nvml_total) fail("thread nvml total %llu, want %llu", m[0], g_nvml_total);
        }
    }
    ssync(NULL);
    return NULL;
}

void cmd_threads(int n, int iters) {
    pthread_t t[64];
    CUresult (*cur)(CUcontext *) = sym("cuCtxGetCurrent", V, 0);
    cur(&g_ctx);
    g_iters = iters;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    int (*init)(void) = h ? dlsym(h, "nvmlInit_v2") : NULL;
    int (*get)(unsigned, void **) = h ? dlsym(h, "nvmlDeviceGetHandleByIndex_v2") : NULL;
    const char *idx = getenv("THREADS_NVML_INDEX"), *tot = getenv("THREADS_NVML_TOTAL");
    if (tot) g_nvml_total = strtoull(tot, NULL, 10);
    if (init && get && init() == 0 && get(idx ? (unsigned)atoi(idx) : 0, &g_nvml_dev) == 0)
        g_nvml_mem = dlsym(h, "nvmlDeviceGetMemoryInfo");
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, thread_body, NULL) != 0) fail("pthread_create");
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    printf("THREADS ok\n");
}

/* `gap_us` > 0: a host pause of 0..gap_us (varying, deterministic) after each launch, as a
   launch-bound loop's host code leaves the device idle inside its batches.
   `where`: "stream" (a created stream, the default) or "null" (the legacy default stream);
   `wait`: how each 10 launches end: "sync" (cuStreamSynchronize, the default), "ctxsync"
   (cuCtxSynchronize) or "pause:<us>" (no wait for the device: a host pause of <us>). With the stub's
   libcuda it also prints how many events were recorded (RECORDS). */
void cmd_launch(unsigned us, int graph, double seconds, unsigned gap_us, const char *where, const char *wait) {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    CUresult (*glaunch)(CUgraphExec, CUstream) = sym("cuGraphLaunch", V, 0);
    CUresult (*ssync)(CUstream) = sym("cuStreamSynchronize", V, 0);
    CUresult (*csync)(void) = sym("cuCtxSynchronize", V, 0);
    CUresult (*screate)(CUstream *, unsigned) = sym("cuStreamCreate", V, 0);
    CUstream s = NULL;
    if (strcmp(where, "null") && screate(&s, 0) != CUDA_SUCCESS) fail("stream");
    unsigned pause_us = strncmp(wait, "pause:", 6) ? 0 : (unsigned)atoi(wait + 6);
    double t0 = now_s(), t;
    unsigned long n = 0;
    while ((t = now_s()) - t0 < seconds) {
        for (int i = 0; i < 10; i++) {
            CUresult r = graph ? glaunch((CUgraphExec)(uintptr_t)us, s)
                               : launch((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
            if (r != CUDA_SUCCESS) fail("launch = %d", r);
            if (gap_us) usleep((useconds_t)(((n + (unsigned long)i) * 37u) % (gap_us + 1)));
        }
        if (pause_us)
            usleep(pause_us);
        else if (!strcmp(wait, "ctxsync"))
            csync();
        else
            ssync(s);
        n += 10;
    }
    if (pause_us) csync();
    printf("RATE %.1f\n", n / (t - t0));
    printf("RAN %lu %.0f\n", n, (t - t0) * 1e9);
    unsigned long long (*records)(void) = (unsigned long long (*)(void))dlsym(libcuda, "stubCudaEventRecordCount");
    if (records) printf("RECORDS %llu\n", records());
}

/* A thread launches `n` US-microsecond kernels onto the legacy stream and exits without waiting for
   them; then this thread waits for the device and launches one more (which collects the exited
   thread's batch). Prints "RAN <n + 1> 0". */
static unsigned g_exit_us, g_exit_n;
static CUcontext g_exit_ctx;
static void *exit_body(void *arg) {
    (void)arg;
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    if (cuCtxSetCurrent_(g_exit_ctx) != CUDA_SUCCESS) fail("thread set current");
    for (unsigned i = 0; i < g_exit_n; i++)
        if (launch((CUfunction)(uintptr_t)g_exit_us, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
            fail("launch");
    return NULL;
}

void cmd_exitlaunch(unsigned us, unsigned n) {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    CUresult (*csync)(void) = sym("cuCtxSynchronize", V, 0);
    CUresult (*cur)(CUcontext *) = sym("cuCtxGetCurrent", V, 0);
    cur(&g_exit_ctx);
    g_exit_us = us;
    g_exit_n = n;
    pthread_t t;
    if (pthread_create(&t, NULL, exit_body, NULL) != 0) fail("pthread_create");
    pthread_join(t, NULL);
    csync();
    usleep(100);
    if (launch((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) fail("launch");
    csync();
    printf("RAN %u 0\n", n + 1);
}

/* relaunch US SECONDS reset|destroy|other: launch US-microsecond kernels on the legacy stream, 10
   between stream waits, for SECONDS/2 in a context; then 10 more with no wait (a batch open) and the
   context goes: the primary context reset (`reset`: it comes back under the same handle) or a created
   context destroyed and another created (`destroy`: the stub's driver hands the same handle back);
   then the loop again for SECONDS/2 in the new one. `other`: the context stays, and every 10
   launches, before their wait, another context is created and destroyed. Prints "HANDLE same|new"
   and "RAN <launched> <ns>". */
void cmd_relaunch(unsigned us, double seconds, const char *how) {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    CUresult (*ssync)(CUstream) = sym("cuStreamSynchronize", V, 0);
    CUresult (*cur)(CUcontext *) = sym("cuCtxGetCurrent", V, 0);
    CUresult (*reset)(CUdevice) = sym("cuDevicePrimaryCtxReset", V, 0);
    CUresult (*create)(CUcontext *, unsigned, CUdevice) = sym("cuCtxCreate", V, 0);
    CUresult (*destroy)(CUcontext) = sym("cuCtxDestroy", V, 0);
    int by_reset = !strcmp(how, "reset");
    int other = !strcmp(how, "other");
    CUcontext before = NULL, after = NULL;
    if (!by_reset && create(&before, 0, 0) != CUDA_SUCCESS) fail("create");
    cur(&before);
    double t0 = now_s(), t;
    unsigned long n = 0;
    for (int phase = 0; phase < 2; phase++) {
        double end = t0 + seconds * (phase + 1) / 2;
        while ((t = now_s()) < end) {
            for (int i = 0; i < 10; i++)
                if (launch((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
                    fail("launch");
            if (other) {
                CUcontext o = NULL;
                if (create(&o, 0, 0) != CUDA_SUCCESS || destroy(o) != CUDA_SUCCESS) fail("other context");
                if (cuCtxSetCurrent_(before) != CUDA_SUCCESS) fail("set current");
            }
            ssync(NULL);
            n += 10;
        }
        if (phase) break;
        if (other) {
            after = before;
            continue;
        }
        for (int i = 0; i < 10; i++)
            if (launch((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
                fail("launch");
        n += 10;
        if (by_reset) {
            if (reset(0) != CUDA_SUCCESS) fail("reset");
            if (cuPrimaryRetain_(&after, 0) != CUDA_SUCCESS || cuCtxSetCurrent_(after) != CUDA_SUCCESS) fail("retain");
        } else {
            if (destroy(before) != CUDA_SUCCESS) fail("destroy");
            if (create(&after, 0, 0) != CUDA_SUCCESS) fail("create again");
        }
    }
    printf("HANDLE %s\n", after == before ? "same" : "new");
    printf("RAN %lu %.0f\n", n, (t - t0) * 1e9);
}

/* streamgone US: this thread launches 10 US-microsecond kernels onto a stream it created and does
   not wait; another thread destroys that stream; this thread pauses (15 kernels' time), then
   launches one more onto the legacy stream and waits for the device, twice. Prints "RAN 12 0". */
static CUstream g_gone_stream;
static void *destroy_body(void *arg) {
    (void)arg;
    CUresult (*destroy)(CUstream) = sym("cuStreamDestroy", V, 0);
    if (cuCtxSetCurrent_(g_exit_ctx) != CUDA_SUCCESS || destroy(g_gone_stream) != CUDA_SUCCESS)
        fail("destroy the stream");
    return NULL;
}

void cmd_streamgone(unsigned us) {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    CUresult (*csync)(void) = sym("cuCtxSynchronize", V, 0);
    CUresult (*screate)(CUstream *, unsigned) = sym("cuStreamCreate", V, 0);
    CUresult (*cur)(CUcontext *) = sym("cuCtxGetCurrent", V, 0);
    cur(&g_exit_ctx);
    if (screate(&g_gone_stream, 0) != CUDA_SUCCESS) fail("stream");
    for (int i = 0; i < 10; i++)
        if (launch((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, g_gone_stream, NULL, NULL) != CUDA_SUCCESS)
            fail("launch");
    pthread_t t;
    if (pthread_create(&t, NULL, destroy_body, NULL) != 0) fail("pthread_create");
    pthread_join(t, NULL);
    usleep(15 * us);              /* the stream's work is done meanwhile (a host pause, not a wait for the device) */
    for (int i = 0; i < 2; i++) { /* the second collects what the first closed */
        if (launch((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) fail("launch");
        csync();
        usleep(200);
    }
    printf("RAN 12 0\n");
}

void cmd_capture(void) {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    CUresult (*begin)(CUstream, int) = sym("cuStreamBeginCapture", V, 0);
    CUresult (*end)(CUstream, void **) = sym("cuStreamEndCapture", V, 0);
    CUresult (*screate)(CUstream *, unsigned) = sym("cuStreamCreate", V, 0);
    const char *s1;
    if (strcmp(owner((void *)begin, &s1), "libvgpu.so")) fail("cuStreamBeginCapture not hooked");
    CUstream s;
    screate(&s, 0);
    if (begin(s, 0) != CUDA_SUCCESS) fail("begin capture");
    for (int i = 0; i < 100; i++)
        if (launch((CUfunction)(uintptr_t)1000, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) != CUDA_SUCCESS) fail("launch");
    void *g;
    if (end(s, &g) != CUDA_SUCCESS) fail("end capture");
    printf("OK capture\n");
}

/* holdcapture: a stream capture (mode 0 global, 1 thread-local, 2 relaxed) held open on a side
   stream -- by another thread, or by this one (`same`) -- while this thread launches US-microsecond
   kernels on its own stream for SECONDS without waiting for them (a tenant that would have the
   limiter stand aside for captures). Then the capture ends: "CAPTURE <its CUresult>" (0: the meter's
   calls did not break it); then the stream is synchronized: "RAN <launched> <ns>". `query`: this
   thread first makes a prohibited call itself (cuEventQuery in the global interaction mode, the
   capture held by another thread): "QUERY <its CUresult>". */
static struct {
    pthread_mutex_t m;
    pthread_cond_t c;
    int stage; /* 1 capture begun, 2 end it, 3 ended */
    int mode;
    CUresult begin_rc, end_rc;
    CUcontext ctx;
} g_hold = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL};

static void hold_wait(int stage) {
    pthread_mutex_lock(&g_hold.m);
    while (g_hold.stage < stage) pthread_cond_wait(&g_hold.c, &g_hold.m);
    pthread_mutex_unlock(&g_hold.m);
}
static void hold_set(int stage) {
    pthread_mutex_lock(&g_hold.m);
    g_hold.stage = stage;
    pthread_cond_broadcast(&g_hold.c);
    pthread_mutex_unlock(&g_hold.m);
}

static void *hold_body(void *arg) {
    (void)arg;
    CUresult (*begin)(CUstream, int) = sym("cuStreamBeginCapture", V, 0);
    CUresult (*end)(CUstream, void **) = sym("cuStreamEndCapture", V, 0);
    CUresult (*screate)(CUstream *, unsigned) = sym("cuStreamCreate", V, 0);
    cuCtxSetCurrent_(g_hold.ctx);
    CUstream side;
    if (screate(&side, 0) != CUDA_SUCCESS) fail("side stream");
    g_hold.begin_rc = begin(side, g_hold.mode);
    hold_set(1);
    hold_wait(2);
    void *g = NULL;
    g_hold.end_rc = end(side, &g);
    hold_set(3);
    return NULL;
}

void cmd_holdcapture(int mode, unsigned us, double seconds, int same, int query) {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    CUresult (*ssync)(CUstream) = sym("cuStreamSynchronize", V, 0);
    CUresult (*screate)(CUstream *, unsigned) = sym("cuStreamCreate", V, 0);
    CUresult (*cur)(CUcontext *) = sym("cuCtxGetCurrent", V, 0);
    CUresult (*begin)(CUstream, int) = sym("cuStreamBeginCapture", V, 0);
    CUresult (*end)(CUstream, void **) = sym("cuStreamEndCapture", V, 0);
    cur(&g_hold.ctx);
    g_hold.mode = mode;
    CUstream s, side = NULL;
    if (screate(&s, 0) != CUDA_SUCCESS) fail("stream");
    pthread_t t;
    if (same) {
        if (screate(&side, 0) != CUDA_SUCCESS) fail("side stream");
        g_hold.begin_rc = begin(side, mode);
    } else {
        if (pthread_create(&t, NULL, hold_body, NULL) != 0) fail("pthread_create");
        hold_wait(1);
    }
    if (g_hold.begin_rc != CUDA_SUCCESS) fail("begin capture = %d", g_hold.begin_rc);
    if (query) {
        CUresult (*ecreate)(CUevent *, unsigned) = sym("cuEventCreate", V, 0);
        CUresult (*erecord)(CUevent, CUstream) = sym("cuEventRecord", V, 0);
        CUresult (*equery)(CUevent) = sym("cuEventQuery", V, 0);
        CUevent ev;
        if (ecreate(&ev, 0) != CUDA_SUCCESS || erecord(ev, s) != CUDA_SUCCESS) fail("event");
        printf("QUERY %d\n", equery(ev));
    }
    double t0 = now_s();
    unsigned long n = 0;
    while (now_s() - t0 < seconds) {
        CUresult r = launch((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
        if (r != CUDA_SUCCESS) fail("launch = %d", r);
        n++;
    }
    if (same) {
        void *g = NULL;
        g_hold.end_rc = end(side, &g);
    } else {
        hold_set(2);
        pthread_join(t, NULL);
    }
    printf("CAPTURE %d\n", g_hold.end_rc);
    ssync(s);
    printf("RAN %lu %.0f\n", n, (now_s() - t0) * 1e9);
}
