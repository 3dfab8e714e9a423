/* acl_workload.c -- a minimal ACL program that shows whether a claim's NPU quota holds.
 *
 * It reaches CANN the way Python frameworks do (dlopen("libascendcl.so"), every entry point
 * through dlsym), so whatever a preloaded hook library does to a real application it does here:
 * on an Ascend node with CANN, or on a CPU node with the stub libascendcl (hookcore/stub). It
 * uses one NPU (runtime device 0, or --device N):
 *
 *   1. aclrtSetDevice, aclrtGetMemInfo(HBM): prints phy=<physical ID>, quota_total_bytes=<total>
 *      (under the hook: the claim's memory quota; without it: the NPU's memory), free_bytes=<free>;
 *   2. allocates half of <total>, which must succeed (within_quota_alloc=ok);
 *   3. allocates the rest plus one MiB, one MiB past <total>: over_quota_alloc=refused
 *      (ACL_ERROR_RT_MEMORY_ALLOCATION) or over_quota_alloc=allowed;
 *   4. with --compute SECONDS: launches kernels for SECONDS (on the stub, a kernel handle of 1000
 *      runs 1 ms), 16 between syncs, and prints compute_percent=<kernel time / wall time x 100>,
 *      compute_kernels=<kernels completed> and compute_ns=<wall time>.
 *
 * Usage: acl_workload [--device N] [--compute SECONDS]     Output: one key=value per line.
 * Exit status: 0 the over-quota allocation was refused (the quota holds); 1 it was allowed
 * (not enforced); 2 bad usage; 3 ACL could not be loaded or the device set; 4 an allocation
 * within the quota failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int aclError;
enum { OUT_OF_MEMORY = 207001, HBM = 1 };
#define MiB ((size_t)1 << 20)

static void *acl;

static void *fn(const char *name) {
    void *f = dlsym(acl, name);
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
            return fprintf(stderr, "usage: acl_workload [--device N] [--compute SECONDS]\n"), 2;
    }
    acl = dlopen("libascendcl.so", RTLD_NOW);
    if (!acl) return printf("error=%s\n", dlerror()), 3;
    aclError (*set_device)(int32_t) = fn("aclrtSetDevice");
    aclError (*count)(uint32_t *) = fn("aclrtGetDeviceCount");
    aclError (*phy_of)(int32_t, int32_t *) = fn("aclrtGetPhyDevIdByLogicDevId");
    aclError (*mem_info)(int, size_t *, size_t *) = fn("aclrtGetMemInfo");
    aclError (*alloc)(void **, size_t, int) = fn("aclrtMalloc");
    aclError (*release)(void *) = fn("aclrtFree");
    uint32_t n = 0;
    count(&n);
    printf("devices=%u\n", n);
    aclError r = set_device(dev);
    if (r) return printf("error=aclrtSetDevice(%d) = %d\n", dev, r), 3;
    int32_t phy = -1;
    phy_of(dev, &phy);
    size_t free_b = 0, total = 0;
    r = mem_info(HBM, &free_b, &total);
    printf("phy=%d\nquota_total_bytes=%zu\nfree_bytes=%zu\n", phy, total, free_b);
    if (r || total == 0) return printf("error=aclrtGetMemInfo = %d\n", r), 3;
    void *a = NULL, *b = NULL;
    r = alloc(&a, total / 2, 0);
    printf("within_quota_alloc=%s\n", r ? "failed" : "ok");
    if (r) return 4;
    r = alloc(&b, total - total / 2 + MiB, 0);
    printf("over_quota_alloc=%s\n", r == OUT_OF_MEMORY ? "refused" : r == 0 ? "allowed" : "error");
    if (b) release(b);
    release(a);
    if (compute > 0) {
        aclError (*create)(void **) = fn("aclrtCreateStream");
        aclError (*launch)(void *, uint32_t, const void *, size_t, void *) = fn("aclrtLaunchKernel");
        aclError (*sync)(void *) = fn("aclrtSynchronizeStream");
        void *s = NULL;
        create(&s);
        long k = 0;
        double t0 = now();
        while (now() - t0 < compute) {
            if (launch((void *)(uintptr_t)1000, 1, NULL, 0, s)) break;
            if (++k % 16 == 0) sync(s);
        }
        sync(s);
        double took = now() - t0;
        printf("compute_percent=%.1f\ncompute_kernels=%ld\ncompute_ns=%.0f\n", (double)k * 1e-3 / took * 100, k,
               took * 1e9);
    }
    return r == OUT_OF_MEMORY ? 0 : 1;
}
