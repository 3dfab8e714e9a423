/* shim_client.c - a CUDA "application" for the shim tests, run under LD_PRELOAD=libvgpu.so
 * against the stub libcuda (LD_LIBRARY_PATH). It finds the driver the way the CUDA runtime does:
 * dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then every entry point by base name +
 * cudaVersion + flags through cuGetProcAddress. Built from shim_client*.c: this file (helpers,
 * main, resolve/init/nvml/devices), shim_client_memory.c and shim_client_work.c (shim_client.h).
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
 *   ctxmem reset|destroy CHUNK [array]
 *                            allocate CHUNK (a device pointer, or a 2D array), let its context go
 *                            (primary reset, or destroy of a created one), allocate CHUNK again:
 *                            "GONE <rc>", "AGAIN <rc>"
 *   init                     cuInit + one cuMemAlloc + one launch: print the three CUresults
 *   launch US GRAPH SECONDS [GAP_US [stream|null [sync|ctxsync|pause:US]]]
 *                            launch US-microsecond stub kernels (or graphs) for SECONDS, 10 between
 *                            syncs; print "RATE <completed per second>" and "RAN <completed> <ns>"
 *                            (shim_client_work.c: where they go, how each 10 end)
 *   exitlaunch US N          a thread launches N US-microsecond kernels on the legacy stream and exits
 *                            without a wait; then one more launch here (shim_client_work.c)
 *   relaunch US SECONDS reset|destroy
 *                            launches before and after the context goes (primary reset, or a created
 *                            context destroyed and another made): "HANDLE same|new", "RAN <n> <ns>"
 *   streamgone US            10 launches onto a created stream, not waited for; another thread
 *                            destroys the stream; a launch and a wait, twice: "RAN 12 0"
 *   capture                  launches during stream capture pass through without events
 *   holdcapture MODE US SECONDS [same|query]
 *                            a capture of MODE held open on a side stream (by another thread, or
 *                            this one) while this thread launches US-microsecond kernels for
 *                            SECONDS unsynchronized: "CAPTURE <end's CUresult>", "RAN <n> <ns>";
 *                            query: first an event query of its own, "QUERY <CUresult>"
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
 *                            1 MiB alloc/free, 20 us launches, every 16th iteration a stream and a
 *                            context of its own created, launched into and destroyed, NVML memory
 *                            info of NVML device
 *                            THREADS_NVML_INDEX (must report THREADS_NVML_TOTAL if set); "THREADS ok"
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim_client.h"

gpa_v2_t gpa;
void *libcuda;

void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    exit(1);
}

void *sym(const char *name, int ver, cuuint64_t flags) {
    void *p = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = gpa(name, &p, ver, flags, &st);
    if (r != CUDA_SUCCESS || !p || st != CU_GET_PROC_ADDRESS_SUCCESS) fail("cuGetProcAddress(%s) = %d", name, r);
    return p;
}

/* Which shared object (basename) and symbol a pointer belongs to. */
const char *owner(void *p, const char **sname) {
    Dl_info info;
    if (!dladdr(p, &info) || !info.dli_fname) return "?";
    if (sname) *sname = info.dli_sname ? info.dli_sname : "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

CUresult (*cuInit_)(unsigned);
CUresult (*cuDeviceGet_)(CUdevice *, int);
CUresult (*cuPrimaryRetain_)(CUcontext *, CUdevice);
CUresult (*cuCtxSetCurrent_)(CUcontext);
CUresult (*cuMemAlloc_)(CUdeviceptr *, size_t);
CUresult (*cuMemFree_)(CUdeviceptr);
CUresult (*cuMemGetInfo_)(size_t *, size_t *);
CUresult (*cuDeviceTotalMem_)(size_t *, CUdevice);

void setup(int dev) {
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

void meminfo(size_t *f, size_t *t) {
    CUresult r = cuMemGetInfo_(f, t);
    if (r != CUDA_SUCCESS) fail("cuMemGetInfo = %d", r);
}

size_t parse_size(const char *s) {
    char *end;
    size_t v = strtoull(s, &end, 10);
    if (*end == 'M')
        v *= MiB;
    else if (*end == 'K')
        v <<= 10;
    return v;
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------- */
void cmd_resolve(void) {
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

void cmd_init(void) {
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
void cmd_nvml(unsigned idx) {
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

void cmd_devices(void) {
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
    else if (!strcmp(cmd, "ctxmem"))
        cmd_ctxmem(argv[2], parse_size(argv[3]), argc > 4 && !strcmp(argv[4], "array"));
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
        cmd_launch((unsigned)atoi(argv[2]), atoi(argv[3]), atof(argv[4]), argc > 5 ? (unsigned)atoi(argv[5]) : 0,
                   argc > 6 ? argv[6] : "stream", argc > 7 ? argv[7] : "sync");
    else if (!strcmp(cmd, "exitlaunch"))
        cmd_exitlaunch((unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]));
    else if (!strcmp(cmd, "relaunch"))
        cmd_relaunch((unsigned)atoi(argv[2]), atof(argv[3]), argv[4]);
    else if (!strcmp(cmd, "streamgone"))
        cmd_streamgone((unsigned)atoi(argv[2]));
    else if (!strcmp(cmd, "capture"))
        cmd_capture();
    else if (!strcmp(cmd, "holdcapture"))
        cmd_holdcapture(atoi(argv[2]), (unsigned)atoi(argv[3]), atof(argv[4]), argc > 5 && !strcmp(argv[5], "same"),
                        argc > 5 && !strcmp(argv[5], "query"));
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
