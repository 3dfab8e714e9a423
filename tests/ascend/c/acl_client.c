/* acl_client.c - an ACL workload for libvnpu.so's tests, linked with -lascendcl -lruntime (PLT calls,
 * as a C/C++ application is built; ctypes tests cover dlopen + dlsym).
 *
 *   alloc [-d DEV] [-a acl|rt|phys|cfg|cached] SIZE...   allocate each size on runtime device DEV,
 *                      print "ALLOC <size> <rc>"; then "INFO <free> <total>"; then "READY" and hold
 *                      the allocations until stdin closes; then free them: "FREE <rc>..."
 *   info [-d DEV] [-r]                 memory info (ACL, or rtMemGetInfoEx with -r): "INFO <free> <total>"
 *   phy [-d DEV]                       "PHY <physical id>"
 *   rate MODE US SECONDS               submit US-microsecond work for SECONDS (at most 16 queued), then
 *                                      "RATE <completed per second>" and "RAN <completed> <ns>";
 *                                      MODE: kernel (aclrtLaunchKernel), v2, cfg, model (aclmdlExecuteAsync),
 *                                      sync (aclmdlExecute), ri (an aclmdlRI captured from 1 kernel,
 *                                      aclmdlRIExecuteAsync), rt (rtKernelLaunch), rth
 *                                      (rtKernelLaunchWithHandleV2), rtm (rtModelExecute), reset
 *                                      (aclrtLaunchKernel; halfway, with work queued, aclrtResetDevice,
 *                                      then the device set and a stream made again)
 *   capture                            launches during an aclmdlRI capture: "CAPTURE <rc begin> <rc launch> <rc end> <ri>"
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int aclError;
aclError aclrtSetDevice(int32_t dev);
aclError aclrtResetDevice(int32_t dev);
aclError aclrtMalloc(void **p, size_t size, int policy);
aclError aclrtMallocCached(void **p, size_t size, int policy);
aclError aclrtMallocWithCfg(void **p, size_t size, int policy, void *cfg);
aclError aclrtMallocPhysical(void **h, size_t size, const void *prop, uint64_t flags);
aclError aclrtFree(void *p);
aclError aclrtFreePhysical(void *h);
aclError aclrtGetMemInfo(int attr, size_t *free_b, size_t *total_b);
aclError aclrtGetPhyDevIdByLogicDevId(int32_t logic, int32_t *phy);
aclError aclrtLaunchKernel(void *f, uint32_t blocks, const void *args, size_t n, void *s);
aclError aclrtLaunchKernelV2(void *f, uint32_t blocks, const void *args, size_t n, void *cfg, void *s);
aclError aclrtLaunchKernelWithConfig(void *f, uint32_t blocks, void *s, void *cfg, void *args, void *reserve);
aclError aclrtSynchronizeDevice(void);
aclError aclrtSynchronizeStream(void *s);
aclError aclrtCreateStream(void **s);
aclError aclmdlExecute(uint32_t model, const void *in, void *out);
aclError aclmdlExecuteAsync(uint32_t model, const void *in, void *out, void *s);
aclError aclmdlRICaptureBegin(void *s, int mode);
aclError aclmdlRICaptureEnd(void *s, void **ri);
aclError aclmdlRIExecuteAsync(void *ri, void *s);
int32_t rtMalloc(void **p, uint64_t size, int type, uint16_t module);
int32_t rtFree(void *p);
int32_t rtMemGetInfoEx(int type, size_t *free_b, size_t *total_b);
int32_t rtKernelLaunch(const void *f, uint32_t blocks, void *args, uint32_t n, void *sm, void *s);
int32_t rtKernelLaunchWithHandleV2(void *h, uint64_t key, uint32_t blocks, void *args, void *sm, void *s,
                                   const void *cfg);
int32_t rtModelExecute(void *m, void *s, uint32_t flag);

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
    int r = aclrtSetDevice(dev);
    if (r) {
        printf("SETDEVICE %d\n", r);
        exit(3);
    }
    return dev;
}

static void info(int rt) {
    size_t f = 0, t = 0;
    int r = rt ? rtMemGetInfoEx(1, &f, &t) : aclrtGetMemInfo(1, &f, &t);
    printf("INFO %zu %zu %d\n", f, t, r);
}

static int cmd_alloc(int argc, char **argv) {
    device(&argc, &argv);
    const char *api = "acl";
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
        int r;
        if (!strcmp(api, "rt"))
            r = rtMalloc(&p, size, 0, 0);
        else if (!strcmp(api, "phys"))
            r = aclrtMallocPhysical(&p, size, NULL, 0);
        else if (!strcmp(api, "cfg"))
            r = aclrtMallocWithCfg(&p, size, 0, NULL);
        else if (!strcmp(api, "cached"))
            r = aclrtMallocCached(&p, size, 0);
        else
            r = aclrtMalloc(&p, size, 0);
        printf("ALLOC %zu %d\n", size, r);
        if (r == 0) ptrs[n++] = p;
    }
    info(0);
    printf("READY\n");
    fflush(stdout);
    char buf[16];
    while (fgets(buf, sizeof buf, stdin)) {}
    printf("FREE");
    for (int i = 0; i < n; i++)
        printf(" %d", !strcmp(api, "rt")     ? rtFree(ptrs[i])
                      : !strcmp(api, "phys") ? aclrtFreePhysical(ptrs[i])
                                             : aclrtFree(ptrs[i]));
    printf("\n");
    info(0);
    return 0;
}

static int cmd_rate(const char *mode, unsigned us, double secs) {
    aclrtSetDevice(0);
    void *f = (void *)(uintptr_t)us, *s = NULL, *ri = NULL;
    aclrtCreateStream(&s);
    if (!strcmp(mode, "ri")) {
        aclmdlRICaptureBegin(s, 0);
        aclrtLaunchKernel(f, 1, NULL, 0, s);
        aclmdlRICaptureEnd(s, &ri);
    }
    long n = 0;
    int reset = !strcmp(mode, "reset");
    double t0 = now();
    while (now() - t0 < secs) {
        int r;
        if (reset && now() - t0 > secs / 2 && n % 16 == 8) { /* 8 submissions queued, not waited for */
            if (aclrtResetDevice(0) || aclrtSetDevice(0) || aclrtCreateStream(&s)) return printf("RESET failed\n"), 4;
            printf("RESET after %ld\n", n);
            reset = 0;
        }
        if (!strcmp(mode, "kernel") || !strcmp(mode, "reset"))
            r = aclrtLaunchKernel(f, 1, NULL, 0, s);
        else if (!strcmp(mode, "v2"))
            r = aclrtLaunchKernelV2(f, 1, NULL, 0, NULL, s);
        else if (!strcmp(mode, "cfg"))
            r = aclrtLaunchKernelWithConfig(f, 1, s, NULL, NULL, NULL);
        else if (!strcmp(mode, "model"))
            r = aclmdlExecuteAsync(us, NULL, NULL, s);
        else if (!strcmp(mode, "sync"))
            r = aclmdlExecute(us, NULL, NULL);
        else if (!strcmp(mode, "ri"))
            r = aclmdlRIExecuteAsync(ri, s);
        else if (!strcmp(mode, "rt"))
            r = rtKernelLaunch(f, 1, NULL, 0, NULL, s);
        else if (!strcmp(mode, "rth"))
            r = rtKernelLaunchWithHandleV2(f, 7, 1, NULL, NULL, s, NULL);
        else if (!strcmp(mode, "rtm"))
            r = rtModelExecute(f, s, 0);
        else
            return fprintf(stderr, "unknown mode %s\n", mode), 2;
        if (r) return printf("SUBMIT %d\n", r), 4;
        if (++n % 16 == 0) aclrtSynchronizeStream(s); /* keep the queue short: count what completes */
    }
    aclrtSynchronizeDevice();
    double took = now() - t0;
    printf("RATE %.1f\n", (double)n / took);
    printf("RAN %ld %.0f\n", n, took * 1e9);
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
        device(&argc, &argv);
        info(argc > 0 && !strcmp(argv[0], "-r"));
        return 0;
    }
    if (!strcmp(cmd, "phy")) {
        int dev = device(&argc, &argv);
        int32_t phy = -1;
        aclrtGetPhyDevIdByLogicDevId(dev, &phy);
        printf("PHY %d\n", phy);
        return 0;
    }
    if (!strcmp(cmd, "rate") && argc == 3) return cmd_rate(argv[0], (unsigned)atoi(argv[1]), atof(argv[2]));
    if (!strcmp(cmd, "capture")) {
        aclrtSetDevice(0);
        void *s = NULL, *ri = NULL;
        aclrtCreateStream(&s);
        int a = aclmdlRICaptureBegin(s, 0);
        int b = aclrtLaunchKernel((void *)(uintptr_t)500, 1, NULL, 0, s);
        int c = aclmdlRICaptureEnd(s, &ri);
        printf("CAPTURE %d %d %d %lu\n", a, b, c, (unsigned long)(uintptr_t)ri);
        return 0;
    }
    return 2;
}
