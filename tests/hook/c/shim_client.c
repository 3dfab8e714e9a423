/* shim_client.c - a CUDA "application" for the shim tests, run under LD_PRELOAD=libvgpu.so
 * against the stub libcuda (LD_LIBRARY_PATH). It finds the driver the way the CUDA runtime does:
 * dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then every entry point by base name +
 * cudaVersion + flags through cuGetProcAddress.
 *
 * Usage: shim_client <command> [args]; prints "OK <what>" lines, exits 1 with "FAIL ..." on the
 * first broken expectation. Commands:
 *   quota CHUNK              cuMemAlloc CHUNK-sized blocks to the quota, expect OOM (2), free
 *   vmm                      cuMemCreate 2 MiB handles to the quota, expect OOM, release
 *   async                    cuMemAllocAsync + cuMemAllocFromPoolAsync to the quota, expect OOM
 *   arrays                   cuArrayCreate/cuArray3DCreate/mipmapped arrays are charged
 *   pitch                    cuMemAllocPitch charged pitch x height
 *   resolve                  variant selection (versions, _ptsz), dlsym path, unpoliced symbols
 *   meminfo                  print "free total" from cuMemGetInfo and cuDeviceTotalMem
 *   grab CHUNK               allocate CHUNK blocks until OOM, print "GOT n", wait for stdin EOF
 *   churn CHUNK N            keep N blocks, free/allocate forever (for kill -9), print "READY"
 *   fork CHUNK               parent and forked child both allocate a block; "FORK ..." lines give
 *                            cuMemGetInfo's free in each before, while and after the child (which
 *                            exits holding its block) and the blocks the parent gets after it
 *   init                     cuInit + one cuMemAlloc + one launch: print the three CUresults
 *   launch US GRAPH SECONDS  launch US-microsecond stub kernels (or graphs) for SECONDS, 10 between
 *                            syncs; print "RATE <completed per second>" and "RAN <completed> <ns>"
 *   capture                  launches during stream capture pass through without events
 *   cuinit                   time dlopen + cuGetProcAddress + cuInit (microseconds)
 *   nvml [IDX]               NVML memory info (v1 and v2) of NVML device IDX
 *   devices                  every visible device: "DEV <ordinal> <uuid> <total bytes> <name>"
 *   copy WHAT BYTES SECONDS [ptds]
 *                            copies or memsets of BYTES for SECONDS, "RATE <ops per second>" and
 *                            "RAN <ops> <ns>"; WHAT
 *                            is memcpy htod dtoh dtod peer 2d 3d memset8 memset16 memset32
 *                            memset2d8, with "-async" for the stream-ordered form (10 per sync);
 *                            ptds resolves the per-thread-default-stream variants
 *   copynames                every copy/memset base name, v12000 with and without the per-thread
 *                            flag, must resolve to libvgpu.so's interposer: "COPYNAME base flag hook"
 *   threads N ITERS          N threads at once: dlsym lookups (policed and not), cuGetProcAddress,
 *                            1 MiB alloc/free, 20 us launches, NVML memory info of NVML device
 *                            THREADS_NVML_INDEX (must report THREADS_NVML_TOTAL if set); "THREADS ok"
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../../hookcore/cuda/cuda_abi.h"

#define MiB ((size_t)1 << 20)

typedef CUresult (*gpa_v2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static gpa_v2_t gpa;
static void *libcuda;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    exit(1);
}

static void *sym(const char *name, int ver, cuuint64_t flags) {
    void *p = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = gpa(name, &p, ver, flags, &st);
    if (r != CUDA_SUCCESS || !p || st != CU_GET_PROC_ADDRESS_SUCCESS) fail("cuGetProcAddress(%s) = %d", name, r);
    return p;
}

/* Which shared object (basename) and symbol a pointer belongs to. */
static const char *owner(void *p, const char **sname) {
    Dl_info info;
    if (!dladdr(p, &info) || !info.dli_fname) return "?";
    if (sname) *sname = info.dli_sname ? info.dli_sname : "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

#define V 12000
static CUresult (*cuInit_)(unsigned);
static CUresult (*cuDeviceGet_)(CUdevice *, int);
static CUresult (*cuPrimaryRetain_)(CUcontext *, CUdevice);
static CUresult (*cuCtxSetCurrent_)(CUcontext);
static CUresult (*cuMemAlloc_)(CUdeviceptr *, size_t);
static CUresult (*cuMemFree_)(CUdeviceptr);
static CUresult (*cuMemGetInfo_)(size_t *, size_t *);
static CUresult (*cuDeviceTotalMem_)(size_t *, CUdevice);

static void setup(int dev) {
    libcuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!libcuda) fail("dlopen libcuda.so.1: %s", dlerror());
    gpa = (gpa_v2_t)dlsym(libcuda, "cuGetProcAddress_v2");
    if (!gpa) fail("no cuGetProcAddress_v2");
    /* The runtime re-resolves cuGetProcAddress through itself; so do we. */
    gpa_v2_t again = (gpa_v2_t)sym("cuGetProcAddress", V, 0);
    if (again != gpa) fail("cuGetProcAddress via itself differs (%s)", owner((void *)again, NULL));
    cuInit_ = sym("cuInit", V, 0);
    cuDeviceGet_ = sym("cuDeviceGet", V, 0);
    cuPrimaryRetain_ = sym("cuDevicePrimaryCtxRetain", V, 0);
    cuCtxSetCurrent_ = sym("cuCtxSetCurrent", V, 0);
    cuMemAlloc_ = sym("cuMemAlloc", V, 0);
    cuMemFree_ = sym("cuMemFree", V, 0);
    cuMemGetInfo_ = sym("cuMemGetInfo", V, 0);
    cuDeviceTotalMem_ = sym("cuDeviceTotalMem", V, 0);
    CUresult r = cuInit_(0);
    if (r != CUDA_SUCCESS) fail("cuInit = %d", r);
    CUdevice d;
    CUcontext ctx;
    if ((r = cuDeviceGet_(&d, dev)) != CUDA_SUCCESS) fail("cuDeviceGet = %d", r);
    if ((r = cuPrimaryRetain_(&ctx, d)) != CUDA_SUCCESS) fail("retain = %d", r);
    if ((r = cuCtxSetCurrent_(ctx)) != CUDA_SUCCESS) fail("set current = %d", r);
}

static void meminfo(size_t *f, size_t *t) {
    CUresult r = cuMemGetInfo_(f, t);
    if (r != CUDA_SUCCESS) fail("cuMemGetInfo = %d", r);
}

static size_t parse_size(const char *s) {
    char *end;
    size_t v = strtoull(s, &end, 10);
    if (*end == 'M')
        v *= MiB;
    else if (*end == 'K')
        v <<= 10;
    return v;
}

/* ------------------------------------------------------------------------- */
static void cmd_quota(size_t chunk) {
    size_t f, t;
    meminfo(&f, &t);
    size_t quota = t;
    if (f != quota) fail("fresh free %zu != total %zu", f, t);
    printf("OK meminfo total=%zu\n", t);
    size_t n = quota / chunk, cap = n + 2;
    CUdeviceptr *p = calloc(cap, sizeof *p);
    for (size_t i = 0; i < n; i++) {
        CUresult r = cuMemAlloc_(&p[i], chunk);
        if (r != CUDA_SUCCESS) fail("alloc %zu of %zu = %d", i, n, r);
    }
    CUdeviceptr extra;
    CUresult r = cuMemAlloc_(&extra, chunk);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) fail("alloc past quota = %d, want 2", r);
    meminfo(&f, &t);
    if (f != quota - n * chunk || t != quota) fail("at quota free=%zu total=%zu", f, t);
    printf("OK oom after %zu allocations\n", n);
    if (cuMemFree_(p[0]) != CUDA_SUCCESS) fail("free");
    if ((r = cuMemAlloc_(&p[0], chunk)) != CUDA_SUCCESS) fail("alloc after free = %d", r);
    printf("OK free gives the quota back\n");
    for (size_t i = 0; i < n; i++) cuMemFree_(p[i]);
    meminfo(&f, &t);
    if (f != quota) fail("after freeing all free=%zu", f);
    size_t tm = 0;
    if (cuDeviceTotalMem_(&tm, 0) != CUDA_SUCCESS || tm != quota) fail("cuDeviceTotalMem = %zu", tm);
    printf("OK all freed\n");
}

static void cmd_vmm(void) {
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) =
        sym("cuMemCreate", V, 0);
    CUresult (*release)(CUmemGenericAllocationHandle) = sym("cuMemRelease", V, 0);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t f, t;
    meminfo(&f, &t);
    size_t n = t / (2 * MiB);
    CUmemGenericAllocationHandle *h = calloc(n + 1, sizeof *h);
    for (size_t i = 0; i < n; i++)
        if (create(&h[i], 2 * MiB, &prop, 0) != CUDA_SUCCESS) fail("cuMemCreate %zu", i);
    CUmemGenericAllocationHandle x;
    CUresult r = create(&x, 2 * MiB, &prop, 0);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) fail("cuMemCreate past quota = %d", r);
    meminfo(&f, &t);
    if (f != 0) fail("vmm at quota free=%zu", f);
    printf("OK vmm oom after %zu handles\n", n);
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    if (create(&x, 2 * MiB, &prop, 0) != CUDA_SUCCESS) fail("host cuMemCreate must not be charged");
    release(x);
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    for (size_t i = 0; i < n; i++) release(h[i]);
    meminfo(&f, &t);
    if (f != t) fail("vmm after release free=%zu total=%zu", f, t);
    printf("OK vmm release gives the quota back\n");
}

static void cmd_async(void) {
    CUresult (*aa)(CUdeviceptr *, size_t, CUstream) = sym("cuMemAllocAsync", V, 0);
    CUresult (*fa)(CUdeviceptr, CUstream) = sym("cuMemFreeAsync", V, 0);
    CUresult (*aa_pt)(CUdeviceptr *, size_t, CUstream) =
        sym("cuMemAllocAsync", V, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CUresult (*ap)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) = sym("cuMemAllocFromPoolAsync", V, 0);
    CUresult (*defpool)(CUmemoryPool *, CUdevice) = sym("cuDeviceGetDefaultMemPool", V, 0);
    const char *s1, *s2;
    if (strcmp(owner((void *)aa_pt, &s1), "libvgpu.so") || strcmp(s1, "cuMemAllocAsync_ptsz"))
        fail("per-thread cuMemAllocAsync -> %s:%s", owner((void *)aa_pt, NULL), s1);
    (void)s2;
    size_t f, t;
    meminfo(&f, &t);
    size_t chunk = 4 * MiB, n = t / chunk;
    CUdeviceptr *p = calloc(n + 1, sizeof *p);
    CUmemoryPool pool;
    if (defpool(&pool, 0) != CUDA_SUCCESS) fail("default pool");
    for (size_t i = 0; i < n; i++) {
        CUresult r = (i % 3 == 0)   ? aa(&p[i], chunk, NULL)
                     : (i % 3 == 1) ? aa_pt(&p[i], chunk, NULL)
                                    : ap(&p[i], chunk, pool, NULL);
        if (r != CUDA_SUCCESS) fail("async alloc %zu = %d", i, r);
    }
    CUdeviceptr x;
    CUresult r1 = aa(&x, chunk, NULL), r2 = ap(&x, chunk, pool, NULL);
    if (r1 != CUDA_ERROR_OUT_OF_MEMORY || r2 != CUDA_ERROR_OUT_OF_MEMORY) fail("async past quota = %d %d", r1, r2);
    printf("OK async oom after %zu allocations\n", n);
    for (size_t i = 0; i < n; i++) fa(p[i], NULL);
    meminfo(&f, &t);
    if (f != t) fail("async after free free=%zu", f);
    printf("OK async free gives the quota back\n");
}

static void cmd_arrays(void) {
    CUresult (*ac)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *) = sym("cuArrayCreate", V, 0);
    CUresult (*a3)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *) = sym("cuArray3DCreate", V, 0);
    CUresult (*ad)(CUarray) = sym("cuArrayDestroy", V, 0);
    CUresult (*mc)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned) = sym("cuMipmappedArrayCreate", V, 0);
    CUresult (*md)(CUmipmappedArray) = sym("cuMipmappedArrayDestroy", V, 0);
    size_t f0, f, t;
    meminfo(&f0, &t);
    CUDA_ARRAY_DESCRIPTOR d = {1024, 1024, 0x20 /* float */, 4}; /* 16 MiB */
    CUarray a, b;
    if (ac(&a, &d) != CUDA_SUCCESS) fail("cuArrayCreate");
    meminfo(&f, &t);
    if (f0 - f != 16 * MiB) fail("2D array charged %zu", f0 - f);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {256, 256, 64, 0x01 /* u8 */, 1, 0}; /* 4 MiB */
    if (a3(&b, &d3) != CUDA_SUCCESS) fail("cuArray3DCreate");
    meminfo(&f, &t);
    if (f0 - f != 20 * MiB) fail("3D array charged %zu", f0 - f - 16 * MiB);
    CUDA_ARRAY3D_DESCRIPTOR big = {t, 1, 1, 0x01, 1, 0}; /* the whole quota */
    CUarray c;
    CUresult r = a3(&c, &big);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) fail("array past quota = %d", r);
    CUmipmappedArray m;
    CUDA_ARRAY3D_DESCRIPTOR dm = {1024, 1024, 0, 0x20, 1, 0}; /* 4 MiB + levels */
    if (mc(&m, &dm, 11) != CUDA_SUCCESS) fail("mipmapped");
    meminfo(&f, &t);
    if (f0 - f < 24 * MiB) fail("mipmapped charged too little");
    ad(a);
    ad(b);
    md(m);
    meminfo(&f, &t);
    if (f != f0) fail("arrays after destroy free=%zu want %zu", f, f0);
    printf("OK arrays charged and given back\n");
}

static void cmd_pitch(void) {
    CUresult (*ap)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) = sym("cuMemAllocPitch", V, 0);
    size_t f0, f, t, pitch = 0;
    meminfo(&f0, &t);
    CUdeviceptr p;
    if (ap(&p, &pitch, 1000, 4096, 4) != CUDA_SUCCESS) fail("pitch alloc");
    meminfo(&f, &t);
    if (pitch != 1024 || f0 - f != 1024 * 4096) fail("pitch %zu charged %zu", pitch, f0 - f);
    cuMemFree_(p);
    meminfo(&f, &t);
    if (f != f0) fail("pitch free");
    printf("OK pitch charged pitch x height\n");
}

static void cmd_resolve(void) {
    const char *s;
    struct {
        const char *name;
        int ver;
        cuuint64_t flags;
        const char *lib, *want;
    } cases[] = {
        {"cuMemAlloc", V, 0, "libvgpu.so", "cuMemAlloc_v2"},
        {"cuMemAlloc", 3000, 0, "libcuda.so.1", "cuMemAlloc"}, /* v1 ABI: not ours to police */
        {"cuLaunchKernel", V, 0, "libvgpu.so", "cuLaunchKernel"},
        {"cuLaunchKernel", V, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "libvgpu.so", "cuLaunchKernel_ptsz"},
        {"cuGraphLaunch", V, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "libvgpu.so", "cuGraphLaunch_ptsz"},
        {"cuGetProcAddress", 11030, 0, "libvgpu.so", "cuGetProcAddress"},
        {"cuGetProcAddress", V, 0, "libvgpu.so", "cuGetProcAddress_v2"},
        {"cuCtxGetApiVersion", V, 0, "libcuda.so.1", "cuCtxGetApiVersion"}, /* unpoliced: real pointer */
        {"cuEventRecord", V, 0, "libcuda.so.1", "cuEventRecord"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *p = sym(cases[i].name, cases[i].ver, cases[i].flags);
        const char *lib = owner(p, &s);
        if (strcmp(lib, cases[i].lib) || strcmp(s, cases[i].want))
            fail("%s v%d flags %llu -> %s:%s, want %s:%s", cases[i].name, cases[i].ver,
                 (unsigned long long)cases[i].flags, lib, s, cases[i].lib, cases[i].want);
    }
    printf("OK cuGetProcAddress variants\n");
    void *p = dlsym(libcuda, "cuMemAlloc_v2");
    if (strcmp(owner(p, &s), "libvgpu.so") || strcmp(s, "cuMemAlloc_v2")) fail("dlsym cuMemAlloc_v2 -> %s", s);
    p = dlsym(libcuda, "cuCtxGetApiVersion");
    if (strcmp(owner(p, &s), "libcuda.so.1")) fail("dlsym unpoliced -> %s", owner(p, NULL));
    p = dlsym(RTLD_DEFAULT, "cuMemFree_v2");
    if (strcmp(owner(p, &s), "libvgpu.so")) fail("RTLD_DEFAULT cuMemFree_v2 -> %s", owner(p, NULL));
    p = dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo_v2");
    if (p && strcmp(owner(p, &s), "libvgpu.so")) fail("nvml via dlsym -> %s", owner(p, NULL));
    p = dlsym(libcuda, "cuNoSuchFunction");
    if (p) fail("unknown symbol resolved");
    /* The dlsym path also works end to end. */
    CUresult (*alloc)(CUdeviceptr *, size_t) = dlsym(libcuda, "cuMemAlloc_v2");
    size_t f0, f, t;
    meminfo(&f0, &t);
    CUdeviceptr d;
    if (alloc(&d, 4 * MiB) != CUDA_SUCCESS) fail("dlsym alloc");
    meminfo(&f, &t);
    if (f0 - f != 4 * MiB) fail("dlsym alloc not charged");
    cuMemFree_(d);
    printf("OK dlsym path\n");
}

static void cmd_grab(size_t chunk) {
    size_t n = 0;
    CUdeviceptr p;
    CUresult r;
    while ((r = cuMemAlloc_(&p, chunk)) == CUDA_SUCCESS) n++;
    if (r != CUDA_ERROR_OUT_OF_MEMORY) fail("grab stopped with %d", r);
    printf("GOT %zu\n", n);
    fflush(stdout);
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {}
}

static void cmd_churn(size_t chunk, size_t n) {
    CUdeviceptr *p = calloc(n, sizeof *p);
    for (size_t i = 0; i < n; i++)
        if (cuMemAlloc_(&p[i], chunk) != CUDA_SUCCESS) fail("churn alloc");
    printf("READY\n");
    fflush(stdout);
    for (size_t i = 0;; i = (i + 1) % n) {
        cuMemFree_(p[i]);
        if (cuMemAlloc_(&p[i], chunk) != CUDA_SUCCESS) fail("churn realloc");
    }
}

static void cmd_fork(size_t chunk) {
    CUdeviceptr a, b;
    if (cuMemAlloc_(&a, chunk) != CUDA_SUCCESS) fail("parent alloc");
    size_t f0, f, t;
    meminfo(&f0, &t);
    printf("FORK parent free=%zu total=%zu\n", f0, t);
    fflush(stdout);
    int up[2], down[2]; /* child -> parent: "allocated"; parent -> child: "exit now" */
    if (pipe(up) || pipe(down)) fail("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        size_t before, after, ct;
        char c = 0;
        meminfo(&before, &ct);
        if (cuMemAlloc_(&b, chunk) != CUDA_SUCCESS) _exit(11);
        meminfo(&after, &ct);
        printf("FORK child free=%zu then=%zu\n", before, after);
        fflush(stdout);
        if (write(up[1], "a", 1) != 1 || read(down[0], &c, 1) != 1) _exit(12);
        _exit(0); /* exits holding the allocation: its slot dies with it */
    }
    char c = 0;
    if (read(up[0], &c, 1) != 1) fail("the child never allocated");
    meminfo(&f, &t);
    printf("FORK parent-while-child free=%zu\n", f);
    fflush(stdout);
    if (write(down[1], "x", 1) != 1) fail("write");
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail("child status %d", WEXITSTATUS(st));
    meminfo(&f, &t);
    printf("FORK parent-after-child free=%zu\n", f);
    /* The dead child's charge is reclaimed: the parent can fill the rest of the quota. */
    size_t n = 0, most = t / chunk;
    CUdeviceptr *p = calloc(most + 1, sizeof *p);
    while (n <= most && cuMemAlloc_(&p[n], chunk) == CUDA_SUCCESS) n++;
    for (size_t i = 0; i < n; i++) cuMemFree_(p[i]);
    free(p);
    printf("FORK refilled %zu\n", n);
    printf("OK fork\n");
}

static void cmd_init(void) {
    libcuda = dlopen("libcuda.so.1", RTLD_NOW);
    gpa = (gpa_v2_t)dlsym(libcuda, "cuGetProcAddress_v2");
    cuInit_ = sym("cuInit", V, 0);
    cuMemAlloc_ = sym("cuMemAlloc", V, 0);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    CUresult r1 = cuInit_(0);
    CUdeviceptr p;
    CUresult r2 = cuMemAlloc_(&p, MiB);
    CUresult r3 = launch((CUfunction)1, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    printf("INIT %d ALLOC %d LAUNCH %d\n", r1, r2, r3);
}

typedef struct {
    unsigned long long total, free, used;
} nvml_mem;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvml_mem2;

/* NVML as a monitoring tool sees it: device `idx` (NVML order), v1 and v2 memory info. */
static void cmd_nvml(unsigned idx) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) fail("dlopen nvml: %s", dlerror());
    int (*init)(void) = dlsym(h, "nvmlInit_v2");
    int (*get)(unsigned, void **) = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    int (*m1)(void *, nvml_mem *) = dlsym(h, "nvmlDeviceGetMemoryInfo");
    int (*m2)(void *, nvml_mem2 *) = dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    if (!init || !get || !m1 || !m2) fail("nvml symbols");
    const char *s;
    if (strcmp(owner((void *)m1, &s), "libvgpu.so") || strcmp(owner((void *)m2, &s), "libvgpu.so"))
        fail("nvml memory info not hooked");
    void *dev;
    if (init() != 0 || get(idx, &dev) != 0) fail("nvml init/handle");
    nvml_mem a;
    nvml_mem2 b = {.version = 2};
    int r1 = m1(dev, &a), r2 = m2(dev, &b);
    printf("NVML %d %llu %llu %llu %d %llu %llu %llu\n", r1, a.total, a.used, a.free, r2, b.total, b.used, b.free);
}

static void cmd_devices(void) {
    libcuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!libcuda) fail("dlopen libcuda.so.1: %s", dlerror());
    gpa = (gpa_v2_t)dlsym(libcuda, "cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = sym("cuInit", V, 0);
    CUresult (*count)(int *) = sym("cuDeviceGetCount", V, 0);
    CUresult (*uuid)(CUuuid *, CUdevice) = sym("cuDeviceGetUuid", V, 0);
    CUresult (*name)(char *, int, CUdevice) = sym("cuDeviceGetName", V, 0);
    CUresult (*total)(size_t *, CUdevice) = sym("cuDeviceTotalMem", V, 0);
    CUresult r = init(0);
    int n = 0;
    if (r != CUDA_SUCCESS || count(&n) != CUDA_SUCCESS) {
        printf("DEVICES 0 (cuInit = %d)\n", r);
        return;
    }
    printf("DEVICES %d\n", n);
    for (int d = 0; d < n; d++) {
        CUuuid u;
        char nm[128];
        size_t t = 0;
        if (uuid(&u, d) != CUDA_SUCCESS || name(nm, sizeof nm, d) != CUDA_SUCCESS || total(&t, d) != CUDA_SUCCESS)
            fail("device %d queries", d);
        const unsigned char *b = (const unsigned char *)u.bytes;
        printf("DEV %d GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x %zu %s\n", d, b[0],
               b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15], t, nm);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void cmd_copy(const char *what, size_t bytes, double seconds, int ptds) {
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

static void cmd_copynames(void) {
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
        if (g_nvml_mem) {
            unsigned long long m[3];
            if (g_nvml_mem(g_nvml_dev, m) != 0) fail("thread nvml");
            if (g_nvml_total && m[0] != g_nvml_total) fail("thread nvml total %llu, want %llu", m[0], g_nvml_total);
        }
    }
    ssync(NULL);
    return NULL;
}

static void cmd_threads(int n, int iters) {
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

static void cmd_launch(unsigned us, int graph, double seconds) {
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel", V, 0);
    CUresult (*glaunch)(CUgraphExec, CUstream) = sym("cuGraphLaunch", V, 0);
    CUresult (*ssync)(CUstream) = sym("cuStreamSynchronize", V, 0);
    CUresult (*screate)(CUstream *, unsigned) = sym("cuStreamCreate", V, 0);
    CUstream s;
    if (screate(&s, 0) != CUDA_SUCCESS) fail("stream");
    double t0 = now_s(), t;
    unsigned long n = 0;
    while ((t = now_s()) - t0 < seconds) {
        for (int i = 0; i < 10; i++) {
            CUresult r = graph ? glaunch((CUgraphExec)(uintptr_t)us, s)
                               : launch((CUfunction)(uintptr_t)us, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
            if (r != CUDA_SUCCESS) fail("launch = %d", r);
        }
        ssync(s);
        n += 10;
    }
    printf("RATE %.1f\n", n / (t - t0));
    printf("RAN %lu %.0f\n", n, (t - t0) * 1e9);
}

static void cmd_capture(void) {
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

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) fail("usage");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "cuinit")) { /* dlopen + cuGetProcAddress + cuInit, timed */
        double t0 = now_s();
        libcuda = dlopen("libcuda.so.1", RTLD_NOW);
        if (!libcuda) fail("dlopen");
        double t1 = now_s();
        gpa = (gpa_v2_t)dlsym(libcuda, "cuGetProcAddress_v2");
        cuInit_ = sym("cuInit", V, 0);
        double t2 = now_s();
        CUresult r = cuInit_(0);
        double t3 = now_s();
        printf("CUINIT %d %.1f dlopen %.1f resolve %.1f cuInit %.1f\n", r, (t3 - t0) * 1e6, (t1 - t0) * 1e6,
               (t2 - t1) * 1e6, (t3 - t2) * 1e6);
        return 0;
    }
    if (!strcmp(cmd, "nvml")) {
        cmd_nvml(argc > 2 ? (unsigned)atoi(argv[2]) : 0);
        return 0;
    }
    if (!strcmp(cmd, "init")) {
        cmd_init();
        return 0;
    }
    if (!strcmp(cmd, "devices")) {
        cmd_devices();
        return 0;
    }
    setup(getenv("CLIENT_DEVICE") ? atoi(getenv("CLIENT_DEVICE")) : 0);
    if (!strcmp(cmd, "quota"))
        cmd_quota(parse_size(argv[2]));
    else if (!strcmp(cmd, "vmm"))
        cmd_vmm();
    else if (!strcmp(cmd, "async"))
        cmd_async();
    else if (!strcmp(cmd, "arrays"))
        cmd_arrays();
    else if (!strcmp(cmd, "pitch"))
        cmd_pitch();
    else if (!strcmp(cmd, "resolve"))
        cmd_resolve();
    else if (!strcmp(cmd, "meminfo")) {
        size_t f, t, tm = 0;
        meminfo(&f, &t);
        cuDeviceTotalMem_(&tm, 0);
        printf("MEM %zu %zu %zu\n", f, t, tm);
    } else if (!strcmp(cmd, "grab"))
        cmd_grab(parse_size(argv[2]));
    else if (!strcmp(cmd, "churn"))
        cmd_churn(parse_size(argv[2]), (size_t)atoi(argv[3]));
    else if (!strcmp(cmd, "fork"))
        cmd_fork(parse_size(argv[2]));
    else if (!strcmp(cmd, "launch"))
        cmd_launch((unsigned)atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
    else if (!strcmp(cmd, "capture"))
        cmd_capture();
    else if (!strcmp(cmd, "threads"))
        cmd_threads(atoi(argv[2]), atoi(argv[3]));
    else if (!strcmp(cmd, "copy"))
        cmd_copy(argv[2], (size_t)atoll(argv[3]), atof(argv[4]), argc > 5 && !strcmp(argv[5], "ptds"));
    else if (!strcmp(cmd, "copynames"))
        cmd_copynames();
    else
        fail("unknown command %s", cmd);
    return 0;
}
