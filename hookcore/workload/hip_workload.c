/* hip_workload.c -- a minimal HIP program that shows whether a claim's quota holds.
 *
 * It reaches HIP the way Python frameworks do (dlopen("libamdhip64.so"), every entry point through
 * dlsym), so whatever a preloaded hook library does to a real application it does here: on a DCU
 * or AMD GPU node with the vendor's runtime, or on a CPU node with the stub libamdhip64 (hookcore/
 * stub). It uses one device (ordinal 0, or --device N):
 *
 *   1. hipSetDevice, hipDeviceGetPCIBusId, hipMemGetInfo: prints pci=<bus ID>,
 *      quota_total_bytes=<total> (under the hook: the claim's memory quota; without it: the
 *      device's memory), free_bytes=<free>;
 *   2. allocates half of <total>, which must succeed (within_quota_alloc=ok);
 *   3. allocates the rest plus one MiB, one MiB past <total>: over_quota_alloc=refused
 *      (hipErrorOutOfMemory) or over_quota_alloc=allowed;
 *   4. with --compute SECONDS: launches kernels for SECONDS (on the stub, a kernel whose function
 *      address is 1000 runs 1 ms), 16 between syncs, and prints compute_percent=<kernel time /
 *      wall time x 100>, compute_kernels=<kernels completed> and compute_ns=<wall time>.
 *
 * Usage: hip_workload [--device N] [--compute SECONDS]     Output: one key=value per line.
 * Exit status: 0 the over-quota allocation was refused (the quota holds); 1 it was allowed
 * (not enforced); 2 bad usage; 3 HIP could not be loaded or the device set; 4 an allocation
 * within the quota failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int hipError_t;
typedef struct {
    uint32_t x, y, z;
} dim3;
enum { OUT_OF_MEMORY = 2 };
#define MiB ((size_t)1 << 20)

static void *hip;

static void *fn(const char *name) {
    void *f = dlsym(hip, name);
    if (!f) {
        printf("error=missing %s\n", name);
        exit(3);
    }
    return f;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int dev = 0;
    double compute = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            dev = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--compute") && i + 1 < argc)
            compute = atof(argv[++i]);
        else
            return fprintf(stderr, "usage: hip_workload [--device N] [--compute SECONDS]\n"), 2;
    }
    hip = dlopen("libamdhip64.so", RTLD_NOW);
    if (!hip) return printf("error=%s\n", dlerror()), 3;
    hipError_t (*set_device)(int) = fn("hipSetDevice");
    hipError_t (*count)(int *) = fn("hipGetDeviceCount");
    hipError_t (*bus_id)(char *, int, int) = fn("hipDeviceGetPCIBusId");
    hipError_t (*mem_info)(size_t *, size_t *) = fn("hipMemGetInfo");
    hipError_t (*alloc)(void **, size_t) = fn("hipMalloc");
    hipError_t (*release)(void *) = fn("hipFree");
    int n = 0;
    count(&n);
    printf("devices=%d\n", n);
    hipError_t r = set_device(dev);
    if (r) return printf("error=hipSetDevice(%d) = %d\n", dev, r), 3;
    char pci[64] = "";
    bus_id(pci, (int)sizeof pci, dev);
    size_t free_b = 0, total = 0;
    r = mem_info(&free_b, &total);
    printf("pci=%s\nquota_total_bytes=%zu\nfree_bytes=%zu\n", pci, total, free_b);
    if (r || total == 0) return printf("error=hipMemGetInfo = %d\n", r), 3;
    void *a = NULL, *b = NULL;
    r = alloc(&a, total / 2);
    printf("within_quota_alloc=%s\n", r ? "failed" : "ok");
    if (r) return 4;
    r = alloc(&b, total - total / 2 + MiB);
    printf("over_quota_alloc=%s\n", r == OUT_OF_MEMORY ? "refused" : r == 0 ? "allowed" : "error");
    if (b) release(b);
    release(a);
    if (compute > 0) {
        hipError_t (*create)(void **) = fn("hipStreamCreate");
        hipError_t (*launch)(const void *, dim3, dim3, void **, size_t, void *) = fn("hipLaunchKernel");
        hipError_t (*sync)(void *) = fn("hipStreamSynchronize");
        void *s = NULL;
        create(&s);
        dim3 one = {1, 1, 1};
        long k = 0;
        double t0 = now();
        while (now() - t0 < compute) {
            if (launch((const void *)(uintptr_t)1000, one, one, NULL, 0, s)) break;
            if (++k % 16 == 0) sync(s);
        }
        sync(s);
        double took = now() - t0;
        printf("compute_percent=%.1f\ncompute_kernels=%ld\ncompute_ns=%.0f\n", (double)k * 1e-3 / took * 100, k,
               took * 1e9);
    }
    return r == OUT_OF_MEMORY ? 0 : 1;
}
