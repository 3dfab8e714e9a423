/* hostile.c - a tenant trying to get past the hook: every way around the quota the security
 * review found, as commands. Run under LD_PRELOAD=libvgpu.so against the stub libcuda.
 *
 *   dlroutes BYTES        reach glibc's dlsym through dlvsym (every version), libc's handle,
 *                         RTLD_NEXT; print "ROUTE <how> <library the cuMemAlloc_v2 came from>", then
 *                         allocate BYTES through each route's pointer: "ALLOC <how> <CUresult>"
 *   ctxloop N             cuCtxCreate_v2 up to N times: "CTX created=<n> rc=<CUresult>"
 *   heap BYTES            cuCtxSetLimit(MALLOC_HEAP_SIZE, BYTES), (STACK_SIZE, BYTES/132+1024), then a
 *                         1 MiB cuMemAlloc: "HEAP <rc> STACK <rc> ALLOC <rc>"
 *   graph BYTES           a captured cuMemAllocAsync+cuMemFreeAsync of BYTES, the graph launched 10
 *                         times, then cuMemAlloc(BYTES): "CAPTURED <rc> AFTER <rc>"; then
 *                         cuGraphAddMemAllocNode(BYTES) until it fails: "NODES <n> <rc>"
 *   pools BYTES           4 pools with release threshold UINT64_MAX, each BYTES allocated and freed:
 *                         "POOL <i> <rc>"; then pool 0 trimmed and again: "TRIMMED <rc>", freed,
 *                         pool 0 destroyed; BYTES from a new pool, its threshold set to UINT64_MAX,
 *                         freed, BYTES from another: "LATE <rc>"; new pools given UINT64_MAX until
 *                         one is refused (at most 1024): "OVERFLOW <how many were not> <rc>"
 *   vmm BYTES             create, export, import, map the import, release the original, then
 *                         cuMemCreate(BYTES): "IMPORT <rc> AFTER <rc>"; create, map, retain, release
 *                         twice, cuMemCreate(BYTES): "RETAIN <rc>", unmap, again: "UNMAPPED <rc>"
 *   legacy WHICH US SECONDS  cuLaunch / cuLaunchGrid / cuLaunchGridAsync of US-microsecond stub
 *                         kernels for SECONDS, 10 between syncs: "RATE <completed per second>" and
 *                         "RAN <completed> <ns>"
 *   hold BYTES            allocate BYTES, print "HELD", then per stdin line "alloc N": "RC <rc>"
 *   kernels US SECONDS    cuLaunchKernel of US-microsecond stub kernels onto a stream for SECONDS, 10
 *                         between syncs: "RAN <completed> <ns>"
 *   mixed US BYTES SECONDS  a US-microsecond stub kernel then a BYTES device-to-device async copy, on
 *                         one stream, for SECONDS, 10 pairs between syncs: "RAN <submissions> <ns>"
 *   mpsreset US SECONDS PCT  launch US-microsecond stub kernels for SECONDS on the primary context
 *                         the environment gave it, then set CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=PCT,
 *                         reset the primary context (a new one reads it), launch SECONDS more:
 *                         "PHASE <i> <completed> <ns>" for each, "RESET <rc>"
 *   affinity SMS US SECONDS own|foreign  make a context limited to SMS SMs (cuCtxCreate_v3) current
 *                         and launch onto a stream of its own, or of the primary context (full SMs):
 *                         "CTX <rc>", "RAN <completed> <ns>"
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../../hookcore/cuda/cuda_abi.h"

#define MiB ((size_t)1 << 20)

static void *cuda;
static void *sym(const char *name) {
    void *p = dlsym(cuda, name);
    if (!p) {
        printf("FAIL no %s\n", name);
        exit(1);
    }
    return p;
}
#define F(ret, name, args) ret(*name) args = (ret(*) args)sym(#name)

static size_t size_arg(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == 'G')
        v *= 1 << 30;
    else if (*end == 'M')
        v *= 1 << 20;
    else if (*end == 'K')
        v *= 1 << 10;
    return (size_t)v;
}

static void setup(void) {
    cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        printf("FAIL dlopen: %s\n", dlerror());
        exit(1);
    }
    F(CUresult, cuInit, (unsigned));
    F(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice));
    F(CUresult, cuCtxSetCurrent, (CUcontext));
    CUcontext c;
    CUresult r = cuInit(0);
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&c, 0);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(c);
    printf("SETUP %d\n", r);
}

static const char *where(void *p) {
    Dl_info info;
    if (!p) return "none";
    if (!dladdr(p, &info) || !info.dli_fname) return "unknown";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

typedef void *(*dlsym_t)(void *, const char *);
typedef void *(*dlvsym_t)(void *, const char *, const char *);
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);

static void route(const char *how, dlsym_t real, size_t bytes) {
    alloc_t a = real ? (alloc_t)real(cuda, "cuMemAlloc_v2") : NULL;
    printf("ROUTE %s %s\n", how, where((void *)a));
    if (a) {
        CUdeviceptr p = 0;
        printf("ALLOC %s %d\n", how, a(&p, bytes));
    }
}

static void cmd_dlroutes(size_t bytes) {
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    route("dlvsym-2.34", (dlsym_t)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34"), bytes);
    route("dlvsym-2.2.5", (dlsym_t)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5"), bytes);
    route("dlvsym-next", (dlsym_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"), bytes);
    route("dlvsym-libc", (dlsym_t)dlvsym(libc, "dlsym", "GLIBC_2.34"), bytes);
    route("dlsym-libc", (dlsym_t)dlsym(libc, "dlsym"), bytes);
    route("dlsym-next", (dlsym_t)dlsym(RTLD_NEXT, "dlsym"), bytes);
    dlvsym_t v = (dlvsym_t)dlsym(libc, "dlvsym");
    route("libc-dlvsym", v ? (dlsym_t)v(libc, "dlsym", "GLIBC_2.34") : NULL, bytes);
    v = (dlvsym_t)dlvsym(libc, "dlvsym", "GLIBC_2.34");
    route("dlvsym-dlvsym", v ? (dlsym_t)v(libc, "dlsym", "GLIBC_2.2.5") : NULL, bytes);
    alloc_t direct = (alloc_t)dlvsym(cuda, "cuMemAlloc_v2", "GLIBC_2.34");
    printf("ROUTE dlvsym-cuda %s\n", direct ? where((void *)direct) : "none");
    dlsym_t priv = (dlsym_t)dlsym(libc, "__libc_dlsym");
    printf("ROUTE libc-private %s\n", priv && priv(cuda, "cuMemAlloc_v2") ? "found" : "none");
    /* The driver's own lookup by name (the stub answers from its tables, not through dlsym). */
    F(CUresult, cuGetProcAddress, (const char *, void **, int, cuuint64_t));
    void *byname = NULL;
    cuGetProcAddress("cuMemAlloc", &byname, 12000, 0);
    printf("ROUTE procaddress %s\n", where(byname));
    if (byname) {
        CUdeviceptr p = 0;
        printf("ALLOC procaddress %d\n", ((alloc_t)byname)(&p, bytes));
    }
}

static void cmd_ctxloop(int n) {
    F(CUresult, cuCtxCreate_v2, (CUcontext *, unsigned, CUdevice));
    int i;
    CUresult r = CUDA_SUCCESS;
    for (i = 0; i < n; i++) {
        CUcontext c;
        r = cuCtxCreate_v2(&c, 0, 0);
        if (r != CUDA_SUCCESS) break;
    }
    printf("CTX created=%d rc=%d\n", i, r);
}

static void cmd_heap(size_t bytes) {
    F(CUresult, cuCtxSetLimit, (int, size_t));
    F(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t));
    CUresult h = cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, bytes);
    CUresult s = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, bytes / 132 + 1024);
    CUdeviceptr p;
    printf("HEAP %d STACK %d ALLOC %d\n", h, s, cuMemAlloc_v2(&p, MiB));
}

static void cmd_graph(size_t bytes) {
    F(CUresult, cuStreamCreate, (CUstream *, unsigned));
    F(CUresult, cuStreamBeginCapture_v2, (CUstream, int));
    F(CUresult, cuStreamEndCapture, (CUstream, void **));
    F(CUresult, cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream));
    F(CUresult, cuMemFreeAsync, (CUdeviceptr, CUstream));
    F(CUresult, cuGraphLaunch, (CUgraphExec, CUstream));
    F(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t));
    F(CUresult, cuMemFree_v2, (CUdeviceptr));
    F(CUresult, cuGraphAddMemAllocNode,
      (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *));
    CUstream s;
    cuStreamCreate(&s, 0);
    cuStreamBeginCapture_v2(s, 0);
    CUdeviceptr p = 0;
    CUresult cap = cuMemAllocAsync(&p, bytes, s);
    if (cap == CUDA_SUCCESS) cuMemFreeAsync(p, s);
    void *g;
    cuStreamEndCapture(s, &g);
    for (int i = 0; i < 10; i++) cuGraphLaunch((CUgraphExec)(uintptr_t)1, s);
    CUdeviceptr q = 0;
    CUresult after = cuMemAlloc_v2(&q, bytes);
    printf("CAPTURED %d AFTER %d\n", cap, after);
    if (after == CUDA_SUCCESS) cuMemFree_v2(q);
    int n = 0;
    CUresult r = CUDA_SUCCESS;
    for (; n < 64; n++) {
        CUDA_MEM_ALLOC_NODE_PARAMS prm;
        memset(&prm, 0, sizeof prm);
        prm.poolProps.allocType = 1;
        prm.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prm.poolProps.location.id = 0;
        prm.bytesize = bytes;
        CUgraphNode node;
        r = cuGraphAddMemAllocNode(&node, (CUgraph)(uintptr_t)1, NULL, 0, &prm);
        if (r != CUDA_SUCCESS) break;
    }
    printf("NODES %d %d\n", n, r);
}

static void cmd_pools(size_t bytes) {
    F(CUresult, cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *));
    F(CUresult, cuMemPoolSetAttribute, (CUmemoryPool, int, void *));
    F(CUresult, cuMemPoolTrimTo, (CUmemoryPool, size_t));
    F(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream));
    F(CUresult, cuMemFreeAsync, (CUdeviceptr, CUstream));
    F(CUresult, cuMemPoolDestroy, (CUmemoryPool));
    CUmemoryPool pools[4];
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    for (int i = 0; i < 4; i++) {
        cuMemPoolCreate(&pools[i], &props);
        uint64_t max = UINT64_MAX;
        cuMemPoolSetAttribute(pools[i], CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max);
    }
    for (int i = 0; i < 4; i++) {
        CUdeviceptr p = 0;
        CUresult r = cuMemAllocFromPoolAsync(&p, bytes, pools[i], NULL);
        if (r == CUDA_SUCCESS) cuMemFreeAsync(p, NULL);
        printf("POOL %d %d\n", i, r);
    }
    cuMemPoolTrimTo(pools[0], 0);
    CUdeviceptr p = 0;
    CUresult r = cuMemAllocFromPoolAsync(&p, bytes, pools[0], NULL);
    printf("TRIMMED %d\n", r);
    if (r == CUDA_SUCCESS) cuMemFreeAsync(p, NULL);
    cuMemPoolDestroy(pools[0]); /* what it kept goes back */
    /* A threshold given after the allocation, before its free: the pool keeps it all the same. */
    CUmemoryPool late, other;
    cuMemPoolCreate(&late, &props);
    cuMemPoolCreate(&other, &props);
    r = cuMemAllocFromPoolAsync(&p, bytes, late, NULL);
    uint64_t max = UINT64_MAX;
    cuMemPoolSetAttribute(late, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max);
    if (r == CUDA_SUCCESS) cuMemFreeAsync(p, NULL);
    printf("LATE %d\n", cuMemAllocFromPoolAsync(&p, bytes, other, NULL));
    /* More pools given a threshold than the hook's books follow: the first past them is refused. */
    int n = 0;
    for (; n < 1024; n++) {
        CUmemoryPool more;
        cuMemPoolCreate(&more, &props);
        if ((r = cuMemPoolSetAttribute(more, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max)) != CUDA_SUCCESS) break;
    }
    printf("OVERFLOW %d %d\n", n, r);
}

static void cmd_vmm(size_t bytes) {
    F(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long));
    F(CUresult, cuMemRelease, (CUmemGenericAllocationHandle));
    F(CUresult, cuMemExportToShareableHandle, (void *, CUmemGenericAllocationHandle, int, unsigned long long));
    F(CUresult, cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, int));
    F(CUresult, cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *, void *));
    F(CUresult, cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long));
    F(CUresult, cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long));
    F(CUresult, cuMemUnmap, (CUdeviceptr, size_t));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.requestedHandleTypes = 1; /* POSIX file descriptor */
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    /* export -> import -> map the import -> release the original */
    CUmemGenericAllocationHandle h, imp, probe;
    CUresult r = cuMemCreate(&h, bytes, &prop, 0);
    int fd = -1;
    if (r == CUDA_SUCCESS) r = cuMemExportToShareableHandle(&fd, h, 1, 0);
    if (r == CUDA_SUCCESS) r = cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd, 1);
    CUdeviceptr va = 0;
    if (r == CUDA_SUCCESS) r = cuMemAddressReserve(&va, bytes, 0, 0, 0);
    if (r == CUDA_SUCCESS) r = cuMemMap(va, bytes, 0, imp, 0);
    if (r == CUDA_SUCCESS) r = cuMemRelease(h);
    CUresult after = cuMemCreate(&probe, bytes, &prop, 0);
    printf("IMPORT %d AFTER %d\n", r, after);
    if (after == CUDA_SUCCESS) cuMemRelease(probe);
    cuMemUnmap(va, bytes);
    cuMemRelease(imp);
    /* create -> map -> retain -> release twice: the mapping still holds the memory */
    CUmemGenericAllocationHandle h2, again;
    CUdeviceptr va2 = 0;
    r = cuMemCreate(&h2, bytes, &prop, 0);
    if (r == CUDA_SUCCESS) r = cuMemAddressReserve(&va2, bytes, 0, 0, 0);
    if (r == CUDA_SUCCESS) r = cuMemMap(va2, bytes, 0, h2, 0);
    if (r == CUDA_SUCCESS) r = cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va2);
    if (r == CUDA_SUCCESS) r = cuMemRelease(again);
    if (r == CUDA_SUCCESS) r = cuMemRelease(h2);
    after = cuMemCreate(&probe, bytes, &prop, 0);
    printf("RETAIN %d AFTER %d\n", r, after);
    if (after == CUDA_SUCCESS) cuMemRelease(probe);
    cuMemUnmap(va2, bytes);
    after = cuMemCreate(&probe, bytes, &prop, 0);
    printf("UNMAPPED %d\n", after);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void cmd_legacy(const char *which, unsigned us, double seconds) {
    F(CUresult, cuLaunch, (CUfunction));
    F(CUresult, cuLaunchGrid, (CUfunction, int, int));
    F(CUresult, cuLaunchGridAsync, (CUfunction, int, int, CUstream));
    F(CUresult, cuCtxSynchronize, (void));
    CUfunction f = (CUfunction)(uintptr_t)us;
    double t0 = now_s();
    long n = 0;
    while (now_s() - t0 < seconds) {
        CUresult r = !strcmp(which, "launch") ? cuLaunch(f)
                     : !strcmp(which, "grid") ? cuLaunchGrid(f, 2, 2)
                                              : cuLaunchGridAsync(f, 2, 2, NULL);
        if (r != CUDA_SUCCESS) {
            printf("FAIL launch %d\n", r);
            exit(1);
        }
        if (++n % 10 == 0) cuCtxSynchronize(); /* completed work, not a queue running ahead */
    }
    cuCtxSynchronize();
    double took = now_s() - t0;
    printf("RATE %.1f\n", (double)n / took);
    printf("RAN %ld %.0f\n", n, took * 1e9);
}

/* US-microsecond stub kernels onto `s` for SECONDS, 10 between syncs; completed count and time. */
static void launch_for(CUstream s, unsigned us, double seconds, long *n_out, double *took) {
    F(CUresult, cuLaunchKernel,
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **));
    F(CUresult, cuStreamSynchronize, (CUstream));
    double t0 = now_s();
    long n = 0;
    while (now_s() - t0 < seconds) {
        for (int i = 0; i < 10; i++) {
            CUresult r = cuLaunchKernel((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
            if (r != CUDA_SUCCESS) {
                printf("FAIL launch %d\n", r);
                exit(1);
            }
        }
        cuStreamSynchronize(s);
        n += 10;
    }
    *n_out = n;
    *took = now_s() - t0;
}

static CUstream new_stream(void) {
    F(CUresult, cuStreamCreate, (CUstream *, unsigned));
    CUstream s;
    CUresult r = cuStreamCreate(&s, 0);
    if (r != CUDA_SUCCESS) {
        printf("FAIL stream %d\n", r);
        exit(1);
    }
    return s;
}

static void cmd_kernels(unsigned us, double seconds) {
    long n;
    double took;
    launch_for(new_stream(), us, seconds, &n, &took);
    printf("RAN %ld %.0f\n", n, took * 1e9);
}

static void cmd_mixed(unsigned us, size_t bytes, double seconds) {
    F(CUresult, cuLaunchKernel,
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **));
    F(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, CUstream));
    F(CUresult, cuStreamSynchronize, (CUstream));
    CUstream s = new_stream();
    CUdeviceptr d = 0x700000000000ULL; /* the stub moves no bytes */
    double t0 = now_s();
    long n = 0;
    while (now_s() - t0 < seconds) {
        for (int i = 0; i < 10; i++) {
            CUresult r = cuLaunchKernel((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
            if (r == CUDA_SUCCESS) r = cuMemcpyDtoDAsync_v2(d, d, bytes, s);
            if (r != CUDA_SUCCESS) {
                printf("FAIL mixed %d\n", r);
                exit(1);
            }
        }
        cuStreamSynchronize(s);
        n += 20;
    }
    printf("RAN %ld %.0f\n", n, (now_s() - t0) * 1e9);
}

static void cmd_mpsreset(unsigned us, double seconds, const char *pct) {
    F(CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice));
    F(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice));
    F(CUresult, cuCtxSetCurrent, (CUcontext));
    long n;
    double took;
    launch_for(new_stream(), us, seconds, &n, &took);
    printf("PHASE 1 %ld %.0f\n", n, took * 1e9);
    setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct, 1);
    CUcontext c;
    CUresult r = cuDevicePrimaryCtxReset_v2(0);
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&c, 0);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(c);
    printf("RESET %d\n", r);
    launch_for(new_stream(), us, seconds, &n, &took); /* the old stream went with the old context */
    printf("PHASE 2 %ld %.0f\n", n, took * 1e9);
}

static void cmd_affinity(unsigned sms, unsigned us, double seconds, const char *which) {
    F(CUresult, cuCtxCreate_v3, (CUcontext *, CUexecAffinityParam *, int, unsigned, CUdevice));
    CUstream primary = new_stream(); /* in the primary context, which has every SM */
    CUexecAffinityParam a = {.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT, .param.smCount.val = sms};
    CUcontext c;
    CUresult r = cuCtxCreate_v3(&c, &a, 1, 0, 0); /* current now */
    printf("CTX %d\n", r);
    if (r != CUDA_SUCCESS) exit(1);
    long n;
    double took;
    launch_for(!strcmp(which, "own") ? new_stream() : primary, us, seconds, &n, &took);
    printf("RAN %ld %.0f\n", n, took * 1e9);
}

static void cmd_hold(size_t bytes) {
    F(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t));
    CUdeviceptr p;
    CUresult r = cuMemAlloc_v2(&p, bytes);
    printf("HELD %d\n", r);
    fflush(stdout);
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "alloc ", 6) != 0) break;
        CUdeviceptr q;
        printf("RC %d\n", cuMemAlloc_v2(&q, size_arg(line + 6)));
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: hostile COMMAND ...\n");
        return 2;
    }
    setup();
    const char *cmd = argv[1];
    if (!strcmp(cmd, "dlroutes") && argc > 2)
        cmd_dlroutes(size_arg(argv[2]));
    else if (!strcmp(cmd, "ctxloop") && argc > 2)
        cmd_ctxloop(atoi(argv[2]));
    else if (!strcmp(cmd, "heap") && argc > 2)
        cmd_heap(size_arg(argv[2]));
    else if (!strcmp(cmd, "graph") && argc > 2)
        cmd_graph(size_arg(argv[2]));
    else if (!strcmp(cmd, "pools") && argc > 2)
        cmd_pools(size_arg(argv[2]));
    else if (!strcmp(cmd, "vmm") && argc > 2)
        cmd_vmm(size_arg(argv[2]));
    else if (!strcmp(cmd, "legacy") && argc > 4)
        cmd_legacy(argv[2], (unsigned)atoi(argv[3]), atof(argv[4]));
    else if (!strcmp(cmd, "hold") && argc > 2)
        cmd_hold(size_arg(argv[2]));
    else if (!strcmp(cmd, "kernels") && argc > 3)
        cmd_kernels((unsigned)atoi(argv[2]), atof(argv[3]));
    else if (!strcmp(cmd, "mixed") && argc > 4)
        cmd_mixed((unsigned)atoi(argv[2]), size_arg(argv[3]), atof(argv[4]));
    else if (!strcmp(cmd, "mpsreset") && argc > 4)
        cmd_mpsreset((unsigned)atoi(argv[2]), atof(argv[3]), argv[4]);
    else if (!strcmp(cmd, "affinity") && argc > 5)
        cmd_affinity((unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]), atof(argv[4]), argv[5]);
    else {
        fprintf(stderr, "unknown command %s\n", cmd);
        return 2;
    }
    return 0;
}
