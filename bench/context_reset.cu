// context_reset.cu - a tenant that resets its primary context halfway (bench/context_reset_gpu.py).
//
//   context_reset share SECS US steady|reset   launch 10 spin kernels of US microseconds, wait, again
//                                              for SECS; `reset`: halfway, 10 more are launched and
//                                              not waited for, then cudaDeviceReset() (the primary
//                                              context goes and comes back). Prints
//                                              "RAN <kernels> <ns>" and "SPLIT <kernels before> <ns>".
//   context_reset probe                        what the driver does (no hook needed): prints
//                                              "PROBE <what> <value>" lines.
//
// Build: nvcc -O2 -o context_reset context_reset.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

#if CUDA_VERSION >= 13000 /* cuCtxCreate is _v4 there: (ctx, params, flags, dev) */
#define CTX_CREATE(c, dev) cuCtxCreate((c), NULL, 0, (dev))
#else
#define CTX_CREATE(c, dev) cuCtxCreate((c), 0, (dev))
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static int share(double secs, unsigned us, int reset) {
    check(cudaFree(0), "init");
    double t0 = now_s(), t, split_t = 0;
    long n = 0, split_n = 0;
    while ((t = now_s()) - t0 < secs) {
        for (int i = 0; i < 10; i++) spin<<<1, 1>>>(us * 1000ULL);
        check(cudaGetLastError(), "launch");
        n += 10;
        if (reset && !split_n && t - t0 > secs / 2) {
            split_n = n;
            check(cudaDeviceReset(), "reset");  // the 10 just launched are not waited for first
            split_t = now_s() - t0;
            check(cudaFree(0), "init again");
            continue;
        }
        check(cudaDeviceSynchronize(), "sync");
    }
    check(cudaDeviceSynchronize(), "sync");
    printf("RAN %ld %.0f\n", n, (now_s() - t0) * 1e9);
    printf("SPLIT %ld %.0f\n", split_n, split_t * 1e9);
    return 0;
}

static int probe(void) {
    CUdevice dev;
    CUcontext p1 = NULL, p2 = NULL, a = NULL, b = NULL, c = NULL;
    unsigned flags = 0;
    int active = -1;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return printf("FAIL init\n"), 1;
    // a primary context reset: does the handle come back?
    cuDevicePrimaryCtxRetain(&p1, dev);
    cuCtxSetCurrent(p1);
    check(cudaFree(0), "primary init");
    cuDevicePrimaryCtxReset(dev);
    cuDevicePrimaryCtxRetain(&p2, dev);
    printf("PROBE primary_handle_after_reset %s\n", p1 == p2 ? "same" : "new");
    // a release that leaves a reference: still active?
    cuDevicePrimaryCtxRetain(&p2, dev);
    cuDevicePrimaryCtxRelease(dev);
    cuDevicePrimaryCtxGetState(dev, &flags, &active);
    printf("PROBE primary_active_after_release_with_reference %d\n", active);
    // a created context destroyed: does the next create get its handle?
    int same = 0;
    for (int i = 0; i < 8; i++) {
        CTX_CREATE(&a, dev);
        cuCtxDestroy(a);
        CTX_CREATE(&b, dev);
        same += a == b;
        cuCtxDestroy(b);
    }
    printf("PROBE created_handle_reused_of_8 %d\n", same);
    // does a destruction wait for its context's work? (300 ms of queued work)
    CTX_CREATE(&c, dev);
    check(cudaFree(0), "created init");
    spin<<<1, 1>>>(300000000ULL);
    check(cudaGetLastError(), "launch");
    double t0 = now_s();
    CUresult r = cuCtxDestroy(c);
    printf("PROBE destroy_with_300ms_queued_ms %.1f rc %d\n", (now_s() - t0) * 1e3, (int)r);
    cuCtxSetCurrent(p2);
    check(cudaFree(0), "primary again");
    spin<<<1, 1>>>(300000000ULL);
    t0 = now_s();
    r = cuDevicePrimaryCtxReset(dev);
    printf("PROBE primary_reset_with_300ms_queued_ms %.1f rc %d\n", (now_s() - t0) * 1e3, (int)r);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 5 && !strcmp(argv[1], "share")) return share(atof(argv[2]), (unsigned)atoi(argv[3]), !strcmp(argv[4], "reset"));
    if (argc >= 2 && !strcmp(argv[1], "probe")) return probe();
    fprintf(stderr, "usage: context_reset share SECS US steady|reset | probe\n");
    return 2;
}
