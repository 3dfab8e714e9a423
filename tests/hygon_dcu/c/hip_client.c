/* hip_client.c - a HIP workload for libvhip.so's tests, linked with -lamdhip64 (PLT calls, as a
 * C/C++ HIP application is built; ctypes tests cover dlopen + dlsym).
 *
 *   alloc [-d DEV] [-a API] SIZE...   allocate each size on device DEV through API, print
 *                      "ALLOC <size> <rc>"; then "INFO <free> <total> <rc>"; then "READY" and hold
 *                      the allocations until stdin closes; then free them: "FREE <rc>..." and INFO
 *                      again. API: malloc (default), pitch, mempitch, 3d (rows of 4096 bytes),
 *                      managed, async, pool, ext (hipExtMallocWithFlags), array, array3d (8-bit
 *                      elements, rows of 4096), vmm (hipMemCreate on DEV; freed by hipMemRelease)
 *   info [-d DEV]                      "INFO <free> <total> <rc>" (hipMemGetInfo), "TOTAL <bytes> <rc>"
 *                                      (hipDeviceTotalMem)
 *   pci [-d DEV]                       "PCI <bus ID>"
 *   rate MODE US SECONDS               submit US-microsecond work for SECONDS (16 between syncs), then
 *                                      "RATE <completed per second>" and "RAN <completed> <ns>"; MODE:
 *                                      kernel (hipLaunchKernel), ext (hipExtLaunchKernel), coop
 *                                      (hipLaunchCooperativeKernel), module (hipModuleLaunchKernel),
 *                                      extmodule (hipExtModuleLaunchKernel), graph (hipGraphLaunch of a
 *                                      graph captured from one kernel), copy (hipMemcpyAsync), h2d
 *                                      (hipMemcpyHtoDAsync), memset (hipMemsetAsync), sync (hipMemcpy:
 *                                      each waits), d32 (hipMemsetD32Async); a copy of US x 1000 bytes
 *                                      takes US microseconds on the stub; reset: kernel, and halfway
 *                                      through hipDeviceReset (work still queued) and a new stream,
 *                                      then "DEAD <calls on events the reset took>" (the stub's count);
 *                                      tosymbol (hipMemcpyToSymbolAsync), memset2d, memset3d, copy3d
 *                                      (hipMemset2DAsync, hipMemset3DAsync, hipMemcpy3DAsync of the same
 *                                      bytes); modcoop (hipModuleLaunchCooperativeKernel), kernelex
 *                                      (hipLaunchKernelExC), drvex (hipDrvLaunchKernelEx);
 *                                      kernel_spt, coop_spt, graph_spt, copy_spt, memset_spt, sync_spt,
 *                                      memset2d_spt, copy3d_spt:
 *                                      the per-thread default stream's entry points on the null stream
 *   resetmem [-d DEV] [-a API] [-r RDEV] SIZE
 *                                      allocate SIZE on DEV through API, reset device RDEV (default DEV):
 *                                      "GONE <rc>"; on DEV allocate SIZE again: "AGAIN <rc>", free the
 *                                      first: "STALE <rc>", allocate SIZE a third time: "THIRD <rc>"
 *   capture                            a launch during a stream capture: "CAPTURE <rc begin> <rc launch>
 *                                      <rc end> <graph>"
 *   vmm SIZE                           create SIZE on device 0, map it, release the handle (still mapped):
 *                                      "MAPPED <rc of a second hipMemCreate(SIZE)>"; retain + release it,
 *                                      unmap: "UNMAPPED <rc of hipMemCreate(SIZE)>"; a 2 MiB handle mapped
 *                                      4096 times (the hook's table), then SIZE mapped: "MAPFULL <rc>",
 *                                      released, created again: "AFTERFULL <rc>"
 *   graphmem SIZE                      SIZE allocated and freed on a captured stream, then hipMalloc(SIZE):
 *                                      "CAPTURED <rc> <rc>"; allocation nodes of SIZE added to that graph
 *                                      until one is refused (at most 16): "NODES <n> <rc>"
 *   share SIZE                         create SIZE on device 0, export it, import it, map the import,
 *                                      release the original: "IMPORT <rc of the map> <rc of
 *                                      hipMemCreate(SIZE)>"
 *   pools SIZE                         on device 0: 4 created pools with release threshold UINT64_MAX,
 *                                      each SIZE allocated and freed (stream-ordered): "POOL <i> <rc>";
 *                                      pool 0 trimmed, pool 1 again: "TRIMMED <rc>"; pool 1 destroyed,
 *                                      hipMalloc(SIZE): "DESTROYED <rc>"; the device's current pool at
 *                                      UINT64_MAX, hipMallocAsync + hipFreeAsync, hipMalloc(SIZE):
 *                                      "DEFAULT <rc>", hipMallocAsync(SIZE) again: "REUSED <rc>"; its
 *                                      threshold back to 0, hipMalloc(SIZE): "LOWERED <rc>"; at UINT64_MAX
 *                                      again, SIZE freed into it, hipDeviceReset, hipMalloc(SIZE):
 *                                      "RESET <rc>" (each hipMalloc freed after); SIZE from a new pool,
 *                                      its threshold set, freed, SIZE from another: "LATE <rc>"; new
 *                                      pools given UINT64_MAX until one is refused (at most 1024):
 *                                      "OVERFLOW <how many were not> <rc>"
 *   hold SIZE                          "SETUP 0", allocate SIZE: "HELD <rc>", then per stdin line
 *                                      "alloc N": "RC <rc>" (tests/security's tenant protocol)
 *   dlroutes SIZE                      "SETUP 0"; reach glibc's dlsym through dlvsym (every version),
 *                                      libc's handle, RTLD_NEXT; "ROUTE <how> <library its hipMalloc came
 *                                      from>", then allocate SIZE through it: "ALLOC <how> <rc>"; the same
 *                                      for hipGetProcAddress("hipMalloc") ("procaddress")
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hip_api.h"

#define ROW 4096

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int device(int *argc, char ***argv) {
    int dev = 0;
    if (*argc >= 2 && strcmp((*argv)[0], "-d") == 0) {
        dev = atoi((*argv)[1]);
        *argc -= 2;
        *argv += 2;
    }
    int r = hipSetDevice(dev);
    if (r) {
        printf("SETDEVICE %d\n", r);
        exit(3);
    }
    return dev;
}

static void info(void) {
    size_t f = 0, t = 0;
    int r = hipMemGetInfo(&f, &t);
    printf("INFO %zu %zu %d\n", f, t, r);
}

static hipMemAllocationProp vmm_prop(int dev) {
    hipMemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = 1;          /* pinned */
    p.location.type = 1; /* device */
    p.location.id = dev;
    return p;
}

static int alloc_one(const char *api, int dev, size_t size, void **out) {
    static const hipChannelFormatDesc u8 = {8, 0, 0, 0, 0};
    size_t pitch = 0;
    if (!strcmp(api, "pitch")) return hipMallocPitch(out, &pitch, ROW, size / ROW);
    if (!strcmp(api, "mempitch")) return hipMemAllocPitch(out, &pitch, ROW, size / ROW, 4);
    if (!strcmp(api, "3d")) {
        hipPitchedPtr pp = {0};
        int r = hipMalloc3D(&pp, (hipExtent){ROW, size / ROW / 2, 2});
        *out = pp.ptr;
        return r;
    }
    if (!strcmp(api, "managed")) return hipMallocManaged(out, size, 1);
    if (!strcmp(api, "async")) return hipMallocAsync(out, size, NULL);
    if (!strcmp(api, "pool")) return hipMallocFromPoolAsync(out, size, NULL, NULL);
    if (!strcmp(api, "ext")) return hipExtMallocWithFlags(out, size, 0);
    if (!strcmp(api, "array")) return hipMallocArray(out, &u8, ROW, size / ROW, 0);
    if (!strcmp(api, "array3d")) return hipMalloc3DArray(out, &u8, (hipExtent){ROW, size / ROW, 1}, 0);
    if (!strcmp(api, "drvarray")) {
        array_desc d = {ROW, size / ROW, U8, 1};
        return hipArrayCreate(out, &d);
    }
    if (!strcmp(api, "drvarray3d")) {
        array3d_desc d = {ROW, size / ROW, 1, U8, 1, 0};
        return hipArray3DCreate(out, &d);
    }
    if (!strcmp(api, "mipmap")) return hipMallocMipmappedArray(out, &u8, (hipExtent){ROW, size / ROW, 0}, 1, 0);
    if (!strcmp(api, "mipmap4")) return hipMallocMipmappedArray(out, &u8, (hipExtent){ROW, size / ROW, 0}, 4, 0);
    if (!strcmp(api, "vmm")) {
        hipMemAllocationProp p = vmm_prop(dev);
        return hipMemCreate(out, size, &p, 0);
    }
    return hipMalloc(out, size);
}

static int free_one(const char *api, void *p) {
    if (!strcmp(api, "async")) return hipFreeAsync(p, NULL);
    if (!strcmp(api, "array") || !strcmp(api, "array3d")) return hipFreeArray(p);
    if (!strncmp(api, "mipmap", 6)) return hipFreeMipmappedArray(p);
    if (!strncmp(api, "drvarray", 8)) return hipArrayDestroy(p);
    if (!strcmp(api, "vmm")) return hipMemRelease(p);
    return hipFree(p);
}

static int cmd_alloc(int argc, char **argv) {
    int dev = device(&argc, &argv);
    const char *api = "malloc";
    if (argc >= 2 && strcmp(argv[0], "-a") == 0) {
        api = argv[1];
        argc -= 2;
        argv += 2;
    }
    void *ptrs[64];
    int n = 0;
    for (int i = 0; i < argc && n < 64; i++) {
        size_t size = strtoull(argv[i], NULL, 10);
        void *p = NULL;
        int r = alloc_one(api, dev, size, &p);
        printf("ALLOC %zu %d\n", size, r);
        if (r == 0) ptrs[n++] = p;
    }
    info();
    printf("READY\n");
    fflush(stdout);
    char buf[64];
    while (fgets(buf, sizeof buf, stdin)) {}
    printf("FREE");
    for (int i = 0; i < n; i++) printf(" %d", free_one(api, ptrs[i]));
    printf("\n");
    info();
    return 0;
}

static int cmd_resetmem(int argc, char **argv) {
    int dev = device(&argc, &argv), rdev = dev;
    const char *api = "malloc";
    for (; argc >= 3 && argv[0][0] == '-'; argc -= 2, argv += 2) {
        if (!strcmp(argv[0], "-a")) api = argv[1];
        if (!strcmp(argv[0], "-r")) rdev = atoi(argv[1]);
    }
    if (argc != 1) return 2;
    size_t size = strtoull(argv[0], NULL, 10);
    void *first = NULL, *again = NULL, *third = NULL;
    int r = alloc_one(api, dev, size, &first);
    if (r) {
        printf("FIRST %d\n", r);
        return 1;
    }
    hipSetDevice(rdev);
    printf("GONE %d\n", hipDeviceReset());
    hipSetDevice(dev);
    printf("AGAIN %d\n", alloc_one(api, dev, size, &again));
    printf("STALE %d\n", free_one(api, first));
    printf("THIRD %d\n", alloc_one(api, dev, size, &third));
    return 0;
}

static void *graph_of(unsigned us, void *s) {
    void *g = NULL, *exec = NULL;
    dim3 one = {1, 1, 1};
    hipStreamBeginCapture(s, 0);
    hipLaunchKernel((const void *)(uintptr_t)us, one, one, NULL, 0, s);
    hipStreamEndCapture(s, &g);
    hipGraphInstantiate(&exec, g, NULL, NULL, 0);
    return exec;
}

static int cmd_rate(const char *mode, unsigned us, double secs) {
    hipSetDevice(0);
    void *s = NULL, *dst = NULL, *e0 = NULL, *e1 = NULL, *exec = NULL;
    void *f = (void *)(uintptr_t)us;
    size_t bytes = (size_t)us * 1000;
    dim3 one = {1, 1, 1};
    hipStreamCreate(&s);
    hipMalloc(&dst, bytes);
    hipEventCreate(&e0);
    hipEventCreate(&e1);
    if (!strcmp(mode, "graph") || !strcmp(mode, "graph_spt")) exec = graph_of(us, s);
    int spt = strstr(mode, "_spt") != NULL; /* the per-thread default stream's entry points, null stream */
    int reset = !strcmp(mode, "reset");
    if (reset) mode = "kernel";
    long n = 0;
    double t0 = now();
    while (now() - t0 < secs) {
        int r;
        if (reset && now() - t0 >= secs / 2) {
            reset = 0;
            if ((r = hipDeviceReset()) != 0) return printf("RESET %d\n", r), 4;
            if ((r = hipStreamCreate(&s)) != 0) return printf("STREAM %d\n", r), 4;
        }
        if (!strcmp(mode, "kernel"))
            r = hipLaunchKernel(f, one, one, NULL, 0, s);
        else if (!strcmp(mode, "ext"))
            r = hipExtLaunchKernel(f, one, one, NULL, 0, s, e0, e1, 0);
        else if (!strcmp(mode, "coop"))
            r = hipLaunchCooperativeKernel(f, one, one, NULL, 0, s);
        else if (!strcmp(mode, "module"))
            r = hipModuleLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
        else if (!strcmp(mode, "extmodule"))
            r = hipExtModuleLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL, NULL, NULL, 0);
        else if (!strcmp(mode, "graph"))
            r = hipGraphLaunch(exec, s);
        else if (!strcmp(mode, "copy"))
            r = hipMemcpyAsync(dst, dst, bytes, 3, s);
        else if (!strcmp(mode, "h2d"))
            r = hipMemcpyHtoDAsync(dst, &n, bytes, s);
        else if (!strcmp(mode, "memset"))
            r = hipMemsetAsync(dst, 0, bytes, s);
        else if (!strcmp(mode, "d32"))
            r = hipMemsetD32Async(dst, 0, bytes / 4, s);
        else if (!strcmp(mode, "sync"))
            r = hipMemcpy(dst, dst, bytes, 3);
        else if (!strcmp(mode, "tosymbol"))
            r = hipMemcpyToSymbolAsync(dst, dst, bytes, 0, 1, s);
        else if (!strcmp(mode, "memset2d"))
            r = hipMemset2DAsync(dst, ROW, 0, bytes / us, us, s);
        else if (!strcmp(mode, "memset3d"))
            r = hipMemset3DAsync((hipPitchedPtr){dst, bytes, bytes, 1}, 0, (hipExtent){bytes, 1, 1}, s);
        else if (!strcmp(mode, "memset2d_spt"))
            r = hipMemset2DAsync_spt(dst, ROW, 0, bytes / us, us, NULL);
        else if (!strcmp(mode, "copy3d_spt")) {
            memcpy3d_params p3 = {.extent = {bytes, 1, 1}, .kind = 3};
            r = hipMemcpy3DAsync_spt(&p3, NULL);
        } else if (!strcmp(mode, "copy3d")) {
            memcpy3d_params p3 = {.extent = {bytes, 1, 1}, .kind = 3};
            r = hipMemcpy3DAsync(&p3, s);
        } else if (!strcmp(mode, "modcoop"))
            r = hipModuleLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL);
        else if (!strcmp(mode, "kernelex")) {
            launch_config c = {one, one, 0, s, NULL, 0};
            r = hipLaunchKernelExC(&c, f, NULL);
        } else if (!strcmp(mode, "drvex")) {
            drv_launch_config c = {1, 1, 1, 1, 1, 1, 0, s, NULL, 0};
            r = hipDrvLaunchKernelEx(&c, f, NULL, NULL);
        } else if (!strcmp(mode, "kernel_spt"))
            r = hipLaunchKernel_spt(f, one, one, NULL, 0, NULL);
        else if (!strcmp(mode, "coop_spt"))
            r = hipLaunchCooperativeKernel_spt(f, one, one, NULL, 0, NULL);
        else if (!strcmp(mode, "graph_spt"))
            r = hipGraphLaunch_spt(exec, NULL);
        else if (!strcmp(mode, "copy_spt"))
            r = hipMemcpyAsync_spt(dst, dst, bytes, 3, NULL);
        else if (!strcmp(mode, "memset_spt"))
            r = hipMemsetAsync_spt(dst, 0, bytes, NULL);
        else if (!strcmp(mode, "sync_spt"))
            r = hipMemcpy_spt(dst, dst, bytes, 3);
        else
            return fprintf(stderr, "unknown mode %s\n", mode), 2;
        if (r) return printf("SUBMIT %d\n", r), 4;
        if (++n % 16 == 0) hipStreamSynchronize(spt ? PER_THREAD : s); /* keep the queue short: count what completes */
    }
    hipDeviceSynchronize();
    double took = now() - t0;
    printf("RATE %.1f\n", (double)n / took);
    printf("RAN %ld %.0f\n", n, took * 1e9);
    unsigned long long (*dead)(void) = (unsigned long long (*)(void))dlsym(RTLD_DEFAULT, "stubHipDeadEventCalls");
    if (dead) printf("DEAD %llu\n", dead());
    return 0;
}

/* Create SIZE on device 0, export it, import it, map the import, release the original:
   "IMPORT <rc of the map> <rc of hipMemCreate(SIZE)>". */
static int cmd_share(size_t size) {
    hipSetDevice(0);
    hipMemAllocationProp p = vmm_prop(0);
    void *h = NULL, *imported = NULL, *va = NULL, *again = NULL;
    int fd = -1, r = hipMemCreate(&h, size, &p, 0);
    if (r) return printf("CREATE %d\n", r), 4;
    if ((r = hipMemExportToShareableHandle(&fd, h, POSIX_FD, 0)) != 0) return printf("EXPORT %d\n", r), 4;
    if ((r = hipMemImportFromShareableHandle(&imported, (void *)(intptr_t)fd, POSIX_FD)) != 0)
        return printf("IMPORTED %d\n", r), 4;
    hipMemAddressReserve(&va, size, 0, NULL, 0);
    r = hipMemMap(va, size, 0, imported, 0);
    hipMemRelease(h); /* the original goes; the exported memory lives on in the import */
    printf("IMPORT %d %d\n", r, hipMemCreate(&again, size, &p, 0));
    return 0;
}

/* SIZE allocated and freed on a captured stream, then hipMalloc(SIZE): "CAPTURED <rc> <rc>"; then
   allocation nodes of SIZE added to that graph until one is refused (at most 16): "NODES <n> <rc>". */
static int cmd_graphmem(size_t size) {
    hipSetDevice(0);
    void *s = NULL, *p = NULL, *graph = NULL, *q = NULL, *node = NULL;
    hipStreamCreate(&s);
    hipStreamBeginCapture(s, 0);
    int r = hipMallocAsync(&p, size, s);
    if (!r) hipFreeAsync(p, s);
    hipStreamEndCapture(s, &graph);
    int after = hipMalloc(&q, size);
    if (!after) hipFree(q);
    printf("CAPTURED %d %d\n", r, after);
    alloc_node_params params;
    memset(&params, 0, sizeof params);
    params.alloc_type = 1;    /* pinned */
    params.location.type = 1; /* device 0 */
    params.bytesize = size;
    int n = 0;
    for (; n < 16; n++)
        if ((r = hipGraphAddMemAllocNode(&node, graph, NULL, 0, &params)) != 0) break;
    printf("NODES %d %d\n", n, r);
    return 0;
}

#define MAPS 4096 /* libvhip's mapping table */

static int cmd_vmm(size_t size) {
    hipSetDevice(0);
    hipMemAllocationProp p = vmm_prop(0);
    void *h = NULL, *h2 = NULL, *again = NULL, *va = NULL;
    int r = hipMemCreate(&h, size, &p, 0);
    if (r) return printf("CREATE %d\n", r), 4;
    hipMemAddressReserve(&va, size, 0, NULL, 0);
    hipMemMap(va, size, 0, h, 0);
    hipMemRelease(h); /* still mapped: the memory stays */
    printf("MAPPED %d\n", hipMemCreate(&again, size, &p, 0));
    if (again) hipMemRelease(again), again = NULL;
    hipMemRetainAllocationHandle(&h2, va);
    hipMemRelease(h2);
    hipMemUnmap(va, size); /* the last mapping: the memory goes */
    r = hipMemCreate(&again, size, &p, 0);
    printf("UNMAPPED %d\n", r);
    if (!r) hipMemRelease(again);
    /* Fill the hook's mapping table with one small handle, then map SIZE: an uncounted mapping
       would let the release below give the charge back while the memory stays mapped. */
    void *small = NULL, *big = NULL, *many = NULL, *one = NULL;
    size_t piece = 2 << 20;
    hipMemCreate(&small, piece, &p, 0);
    hipMemAddressReserve(&many, piece * MAPS, 0, NULL, 0);
    for (int i = 0; i < MAPS; i++) hipMemMap((char *)many + (size_t)i * piece, piece, 0, small, 0);
    hipMemCreate(&big, size, &p, 0);
    hipMemAddressReserve(&one, size, 0, NULL, 0);
    r = hipMemMap(one, size, 0, big, 0);
    printf("MAPFULL %d\n", r);
    hipMemRelease(big);
    printf("AFTERFULL %d\n", hipMemCreate(&again, size, &p, 0));
    return 0;
}

#define RELEASE_THRESHOLD 4 /* hipMemPoolAttrReleaseThreshold */

/* hipMalloc(size), freed at once: its rc. */
static int fits(size_t size) {
    void *p = NULL;
    int r = hipMalloc(&p, size);
    if (!r) hipFree(p);
    return r;
}

/* SIZE allocated from `pool` (NULL: the device's current one) and freed, stream-ordered: the rc. */
static int through(void *pool, size_t size) {
    void *p = NULL;
    int r = pool ? hipMallocFromPoolAsync(&p, size, pool, NULL) : hipMallocAsync(&p, size, NULL);
    if (!r) hipFreeAsync(p, NULL);
    return r;
}

static void threshold(void *pool, uint64_t bytes) { hipMemPoolSetAttribute(pool, RELEASE_THRESHOLD, &bytes); }

static int cmd_pools(size_t size) {
    hipSetDevice(0);
    hipMemAllocationProp props = vmm_prop(0); /* a pool's props begin as an allocation's: type, handles, location */
    void *pools[4], *current = NULL;
    for (int i = 0; i < 4; i++) {
        hipMemPoolCreate(&pools[i], &props);
        threshold(pools[i], UINT64_MAX);
    }
    for (int i = 0; i < 4; i++) printf("POOL %d %d\n", i, through(pools[i], size));
    hipMemPoolTrimTo(pools[0], 0);
    printf("TRIMMED %d\n", through(pools[1], size));
    hipMemPoolDestroy(pools[1]);
    printf("DESTROYED %d\n", fits(size));
    hipDeviceGetMemPool(&current, 0);
    threshold(current, UINT64_MAX);
    through(NULL, size);
    printf("DEFAULT %d\n", fits(size));
    void *p = NULL;
    int r = hipMallocAsync(&p, size, NULL);
    printf("REUSED %d\n", r);
    if (!r) hipFreeAsync(p, NULL);
    threshold(current, 0);
    printf("LOWERED %d\n", fits(size));
    threshold(current, UINT64_MAX);
    through(NULL, size);
    hipDeviceReset();
    printf("RESET %d\n", fits(size));
    void *late = NULL, *other = NULL;
    hipMemPoolCreate(&late, &props);
    hipMemPoolCreate(&other, &props);
    r = hipMallocFromPoolAsync(&p, size, late, NULL);
    threshold(late, UINT64_MAX); /* after the allocation, before its free */
    if (!r) hipFreeAsync(p, NULL);
    printf("LATE %d\n", through(other, size));
    int n = 0;
    for (; n < 1024; n++) {
        void *more = NULL;
        uint64_t max = UINT64_MAX;
        hipMemPoolCreate(&more, &props);
        if ((r = hipMemPoolSetAttribute(more, RELEASE_THRESHOLD, &max)) != 0) break;
    }
    printf("OVERFLOW %d %d\n", n, r);
    return 0;
}

static size_t size_arg(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == 'G')
        v *= 1 << 30;
    else if (*end == 'M')
        v *= 1 << 20;
    return (size_t)v;
}

static int cmd_hold(size_t size) {
    printf("SETUP 0\n");
    void *p = NULL;
    printf("HELD %d\n", hipMalloc(&p, size));
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "alloc ", 6) == 0) {
            void *q = NULL;
            printf("RC %d\n", hipMalloc(&q, size_arg(line + 6)));
            fflush(stdout);
        }
    }
    return 0;
}

typedef void *(*dlsym_t)(void *, const char *);
typedef void *(*dlvsym_t)(void *, const char *, const char *);
typedef hipError_t (*alloc_t)(void **, size_t);
static void *g_hip;

static const char *where(void *p) {
    Dl_info info;
    if (!p) return "none";
    if (!dladdr(p, &info) || !info.dli_fname) return "unknown";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

static void route(const char *how, dlsym_t real, size_t bytes) {
    alloc_t a = real ? (alloc_t)real(g_hip, "hipMalloc") : NULL;
    printf("ROUTE %s %s\n", how, where((void *)a));
    if (a) {
        void *p = NULL;
        printf("ALLOC %s %d\n", how, a(&p, bytes));
    }
}

static int cmd_dlroutes(size_t bytes) {
    g_hip = dlopen("libamdhip64.so", RTLD_NOW);
    printf("SETUP %d\n", g_hip ? 0 : 1);
    if (!g_hip) return 1;
    hipSetDevice(0);
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
    alloc_t direct = (alloc_t)dlvsym(g_hip, "hipMalloc", "GLIBC_2.34");
    printf("ROUTE dlvsym-hip %s\n", direct ? where((void *)direct) : "none");
    dlsym_t priv = (dlsym_t)dlsym(libc, "__libc_dlsym");
    printf("ROUTE libc-private %s\n", priv && priv(g_hip, "hipMalloc") ? "found" : "none");
    /* The runtime's own lookup by name (the stub answers from its tables, not through dlsym). */
    void *byname = NULL;
    hipGetProcAddress("hipMalloc", &byname, 600, 0, NULL);
    printf("ROUTE procaddress %s\n", where(byname));
    if (byname) {
        void *p = NULL;
        printf("ALLOC procaddress %d\n", ((alloc_t)byname)(&p, bytes));
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return 2;
    const char *cmd = argv[1];
    argc -= 2;
    argv += 2;
    if (!strcmp(cmd, "alloc")) return cmd_alloc(argc, argv);
    if (!strcmp(cmd, "info")) {
        int dev = device(&argc, &argv);
        info();
        size_t total = 0;
        int r = hipDeviceTotalMem(&total, dev);
        printf("TOTAL %zu %d\n", total, r);
        return 0;
    }
    if (!strcmp(cmd, "pci")) {
        int dev = device(&argc, &argv);
        char bus[64] = "";
        hipDeviceGetPCIBusId(bus, (int)sizeof bus, dev);
        printf("PCI %s\n", bus);
        return 0;
    }
    if (!strcmp(cmd, "resetmem")) return cmd_resetmem(argc, argv);
    if (!strcmp(cmd, "rate") && argc == 3) return cmd_rate(argv[0], (unsigned)atoi(argv[1]), atof(argv[2]));
    if (!strcmp(cmd, "capture")) {
        hipSetDevice(0);
        void *s = NULL, *g = NULL;
        dim3 one = {1, 1, 1};
        hipStreamCreate(&s);
        int a = hipStreamBeginCapture(s, 0);
        int b = hipLaunchKernel((const void *)(uintptr_t)500, one, one, NULL, 0, s);
        int c = hipStreamEndCapture(s, &g);
        printf("CAPTURE %d %d %d %lu\n", a, b, c, (unsigned long)(uintptr_t)g);
        return 0;
    }
    if (!strcmp(cmd, "vmm") && argc == 1) return cmd_vmm(size_arg(argv[0]));
    if (!strcmp(cmd, "pools") && argc == 1) return cmd_pools(size_arg(argv[0]));
    if (!strcmp(cmd, "share") && argc == 1) return cmd_share(size_arg(argv[0]));
    if (!strcmp(cmd, "graphmem") && argc == 1) return cmd_graphmem(size_arg(argv[0]));
    if (!strcmp(cmd, "hold") && argc == 1) return cmd_hold(size_arg(argv[0]));
    if (!strcmp(cmd, "dlroutes") && argc == 1) return cmd_dlroutes(size_arg(argv[0]));
    return 2;
}
