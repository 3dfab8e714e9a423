/* cuda_workload.c -- a minimal CUDA program that shows whether a claim's memory quota holds.
 *
 * It reaches the driver the way the CUDA runtime does (dlopen("libcuda.so.1"), then every entry
 * point through cuGetProcAddress_v2), so whatever a preloaded hook library does to a real
 * application it does here: on a GPU node with the real driver, or on a CPU node with the stub
 * libcuda (hookcore/stub). It uses one device (the first visible one, or --device N):
 *
 *   1. cuInit, a context, cuMemGetInfo: prints quota_total_bytes=<total> (under the hook: the
 *      claim's memory quota; without it: the device's memory) and free_bytes=<free>;
 *   2. allocates half of <total>, which must succeed (within_quota_alloc=ok);
 *   3. allocates the rest plus one MiB, one MiB past <total>: prints over_quota_alloc=refused
 *      (CUDA_ERROR_OUT_OF_MEMORY) or over_quota_alloc=allowed.
 *
 * Usage: cuda_workload [--device N] [--hold S]   Output: one key=value per line on stdout.
 * --hold S: keep the half allocated S seconds before exiting (a long-running process to watch).
 * Exit status: 0 the over-quota allocation was refused (the quota holds); 1 it was allowed
 * (not enforced); 2 bad usage; 3 the driver could not be loaded or initialised; 4 an allocation
 * within the quota failed (the quota is smaller than reported, or the device is full).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct {
    unsigned char bytes[16];
} CUuuid;
typedef CUresult (*get_proc_t)(const char *, void **, int, unsigned long long, int *);

enum { OUT_OF_MEMORY = 2, CUDA_VERSION = 12000 };
#define MiB ((size_t)1 << 20)

static get_proc_t get_proc;
static void *libcuda;

static void *entry(const char *name, const char *fallback) {
    void *fn = NULL;
    int status = -1;
    if (get_proc && get_proc(name, &fn, CUDA_VERSION, 0, &status) == 0 && fn && status == 0) return fn;
    fn = dlsym(libcuda, fallback); /* a driver without cuGetProcAddress_v2 */
    if (!fn) {
        printf("error=driver has no %s\n", name);
        exit(3);
    }
    return fn;
}

static void check(CUresult r, const char *what) {
    if (r != 0) {
        printf("error=%s failed with CUresult %d\n", what, r);
        exit(3);
    }
}

int main(int argc, char **argv) {
    int ordinal = 0, hold = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            ordinal = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--hold") == 0 && i + 1 < argc) {
            hold = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--device N] [--hold S]\n", argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!libcuda) {
        printf("error=cannot load libcuda.so.1: %s\n", dlerror());
        return 3;
    }
    get_proc = (get_proc_t)dlsym(libcuda, "cuGetProcAddress_v2");

    CUresult (*cuInit)(unsigned) = (CUresult(*)(unsigned))entry("cuInit", "cuInit");
    CUresult (*cuDeviceGetCount)(int *) = (CUresult(*)(int *))entry("cuDeviceGetCount", "cuDeviceGetCount");
    CUresult (*cuDeviceGet)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))entry("cuDeviceGet", "cuDeviceGet");
    CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice) =
        (CUresult(*)(CUuuid *, CUdevice))entry("cuDeviceGetUuid", "cuDeviceGetUuid");
    CUresult (*cuRetain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))entry("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
    CUresult (*cuCtxSetCurrent)(CUcontext) = (CUresult(*)(CUcontext))entry("cuCtxSetCurrent", "cuCtxSetCurrent");
    CUresult (*cuMemGetInfo)(size_t *, size_t *) =
        (CUresult(*)(size_t *, size_t *))entry("cuMemGetInfo", "cuMemGetInfo_v2");
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) =
        (CUresult(*)(CUdeviceptr *, size_t))entry("cuMemAlloc", "cuMemAlloc_v2");
    CUresult (*cuMemFree)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))entry("cuMemFree", "cuMemFree_v2");

    check(cuInit(0), "cuInit");
    int count = 0;
    check(cuDeviceGetCount(&count), "cuDeviceGetCount");
    printf("devices=%d\n", count);
    if (ordinal < 0 || ordinal >= count) {
        printf("error=device %d is not visible (%d visible)\n", ordinal, count);
        return 3;
    }
    CUdevice dev;
    check(cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    CUuuid u;
    if (cuDeviceGetUuid(&u, dev) == 0) {
        const unsigned char *b = u.bytes;
        printf("uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", b[0], b[1], b[2],
               b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    CUcontext ctx;
    check(cuRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    size_t free_b = 0, total = 0;
    check(cuMemGetInfo(&free_b, &total), "cuMemGetInfo");
    printf("quota_total_bytes=%zu\nfree_bytes=%zu\n", total, free_b);

    CUdeviceptr half = 0, rest = 0;
    CUresult r = cuMemAlloc(&half, total / 2);
    if (r != 0) {
        printf("within_quota_alloc=failed (CUresult %d)\n", r);
        return 4;
    }
    printf("within_quota_alloc=ok\n");
    r = cuMemAlloc(&rest, total - total / 2 + MiB);
    printf("over_quota_alloc=%s\n", r == OUT_OF_MEMORY ? "refused" : r == 0 ? "allowed" : "failed");
    if (r == 0) cuMemFree(rest);
    if (hold > 0) sleep((unsigned)hold);
    cuMemFree(half);
    return r == OUT_OF_MEMORY ? 0 : 1;
}
