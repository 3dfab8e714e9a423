/* hip_stub.c - a stub HIP runtime (libamdhip64.so): the HIP calls libvhip polices or uses, on
 * simulated devices with timed kernels and copies.
 *
 * For machines without a DCU or an AMD GPU: hookcore's HIP shim (libvhip.so) and the Hygon DCU
 * driver's workloads run against this library. Prototypes are those of AMD's public HIP API
 * reference (hip_runtime_api.h); no AMD or Hygon code is used.
 *
 * Devices: HOOKCORE_STUB_HIP_DEVICES (hip_devices.h), in container order (the driver writes only
 * the claim's devices). HIP_VISIBLE_DEVICES, or when it is unset CUDA_VISIBLE_DEVICES (HIP reads
 * both, the former first), selects and orders them as the real runtime does: a comma list of
 * indices into that list (the first bad or repeated entry ends it). hipDeviceGetPCIBusId answers
 * each device's `pci` key.
 *
 * Memory: each device has `memory` bytes; allocations are counted and refused past it with
 * hipErrorOutOfMemory. A device pointer (or array, or physical handle) is a small host block
 * carrying its size and device, never dereferenced. Pitched allocations round the row up to 256
 * bytes. Stream-ordered frees take effect at once. Physical memory (hipMemCreate) lives while a
 * handle reference is held or a range maps it (hipMemMap/Unmap, hipMemRetainAllocationHandle,
 * hipMemRelease), as HIP documents.
 *
 * Time: each device is one engine. A kernel runs for the microseconds its handle names (the
 * function address of hipLaunchKernel and friends, the hipFunction_t of hipModuleLaunchKernel,
 * the hipGraphExec_t of hipGraphLaunch); a copy or memset for one nanosecond per byte (1 GB/s).
 * Work starts when both the engine and its stream are free; events complete when the clock
 * (CLOCK_MONOTONIC: the tests' virtual clock when libfakeclock.so is preloaded) passes their
 * time, and hipEventElapsedTime reports that time. Synchronous copies and memsets return when
 * their work is done. Stream capture: work submitted to a capturing stream is recorded, not run;
 * hipStreamEndCapture's graph, and the hipGraphExec_t instantiated from it, is the captured
 * microseconds. Recording an event on a capturing stream is refused (hipErrorStreamCaptureUnsupported,
 * a stub's choice: a limiter that recorded one would fail the launch visibly).
 *
 * Files: hip_stub.h (what they share), this one (devices, clock, test extras), hip_stub_memory.c,
 * hip_stub_engine.c.
 *
 * Reset: hipDeviceReset waits for the calling thread's device, then takes every stream and event made
 * on it: each later call on one returns hipErrorContextIsDestroyed (the null stream lives on). Its
 * pointers and arrays go too (their memory is free again; freeing one later is hipErrorInvalidValue);
 * physical memory (hipMemCreate) stays.
 *
 * Test-only extras (not HIP API): stubHipUsedBytes(dev), stubHipLaunchCount(), stubHipCopyCount(),
 * stubHipDeadEventCalls() (calls on an event a reset took).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hip_stub.h"

hd_device g_desc[HD_MAX_DEVICES];
static int g_ndesc;
int g_map[HD_MAX_DEVICES];
int g_ndev;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
hip_engine g_dev[HD_MAX_DEVICES];
uint64_t g_launches, g_copies;
__thread int t_dev;

int64_t hs_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Wait for the clock to reach t: sleep, then spin (yielding) the last 200 us, so a synchronous
   call returns when its work is done, as a device's completion does. */
void hs_sleep_until(int64_t t) {
    for (;;) {
        int64_t d = t - hs_now_ns();
        if (d <= 0) return;
        if (d <= 200000) {
            sched_yield();
            continue;
        }
        d -= 200000;
        struct timespec ts = {d / 1000000000LL, d % 1000000000LL};
        if (nanosleep(&ts, NULL) != 0 && errno != EINTR) return;
    }
}

static void load(void) {
    g_ndesc = hd_from_env(g_desc, HD_MAX_DEVICES);
    const char *vis = getenv("HIP_VISIBLE_DEVICES");
    if (!vis) vis = getenv("CUDA_VISIBLE_DEVICES");
    g_ndev = 0;
    if (!vis) {
        for (int i = 0; i < g_ndesc; i++) g_map[g_ndev++] = i;
    } else {
        const char *p = vis;
        while (*p && g_ndev < g_ndesc) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 0 || v >= g_ndesc) break;
            int dup = 0;
            for (int k = 0; k < g_ndev; k++) dup |= g_map[k] == (int)v;
            if (dup) break;
            g_map[g_ndev++] = (int)v;
            if (*end != ',') break;
            p = end + 1;
        }
    }
    for (int i = 0; i < g_ndev; i++) g_dev[i].null_stream.dev = i;
}

void hs_ready(void) { pthread_once(&g_once, load); }

int hs_current(void) {
    hs_ready();
    return t_dev < g_ndev ? t_dev : -1;
}

/* ---------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------- */
HIP_API hipError_t hipInit(unsigned int flags) {
    (void)flags;
    hs_ready();
    return g_ndev ? hipSuccess : hipErrorNoDevice;
}

HIP_API hipError_t hipGetDeviceCount(int *n) {
    hs_ready();
    if (!n) return hipErrorInvalidValue;
    *n = g_ndev;
    return g_ndev ? hipSuccess : hipErrorNoDevice;
}

HIP_API hipError_t hipSetDevice(int dev) {
    hs_ready();
    if (dev < 0 || dev >= g_ndev) return hipErrorInvalidDevice;
    t_dev = dev;
    return hipSuccess;
}

HIP_API hipError_t hipGetDevice(int *dev) {
    if (!dev) return hipErrorInvalidValue;
    if (hs_current() < 0) return hipErrorNoDevice;
    *dev = t_dev;
    return hipSuccess;
}

HIP_API hipError_t hipDeviceGetPCIBusId(char *out, int len, int dev) {
    hs_ready();
    if (!out || len <= 0) return hipErrorInvalidValue;
    if (dev < 0 || dev >= g_ndev) return hipErrorInvalidDevice;
    snprintf(out, (size_t)len, "%s", g_desc[g_map[dev]].pci);
    return hipSuccess;
}

HIP_API hipError_t hipDeviceGetName(char *out, int len, int dev) {
    hs_ready();
    if (!out || len <= 0) return hipErrorInvalidValue;
    if (dev < 0 || dev >= g_ndev) return hipErrorInvalidDevice;
    snprintf(out, (size_t)len, "%s", g_desc[g_map[dev]].name);
    return hipSuccess;
}

/* The entry point named `symbol` from the stub's own tables (hip_stub.h), never through dlsym;
   version and flags are not read (the stub has one variant of each). */
HIP_API hipError_t hipGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    (void)version;
    (void)flags;
    if (!symbol || !pfn) return hipErrorInvalidValue;
    static const hs_sym *const tables[] = {hs_syms_memory, hs_syms_engine};
    void *found = NULL;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0] && !found; t++)
        for (const hs_sym *e = tables[t]; e->name && !found; e++)
            if (!strcmp(e->name, symbol)) found = e->fn;
    *pfn = found;
    if (status) *status = found ? 0 : 1; /* HIP_GET_PROC_ADDRESS_SUCCESS, _SYMBOL_NOT_FOUND */
    return found ? hipSuccess : hipErrorInvalidValue;
}

HIP_API hipError_t hipRuntimeGetVersion(int *v) {
    if (!v) return hipErrorInvalidValue;
    *v = 60300000; /* HIP 6.3 */
    return hipSuccess;
}

HIP_API const char *hipGetErrorString(hipError_t e) {
    switch (e) {
        case hipSuccess: return "no error";
        case hipErrorOutOfMemory: return "out of memory";
        case hipErrorNotReady: return "device not ready";
        default: return "stub HIP error";
    }
}

/* ---------------------------------------------------------------------------
 * Test-only extras
 * ------------------------------------------------------------------------- */
HIP_API unsigned long long stubHipUsedBytes(int dev) {
    hs_ready();
    pthread_mutex_lock(&g_lock);
    unsigned long long used = dev >= 0 && dev < g_ndev ? g_dev[dev].used : 0;
    pthread_mutex_unlock(&g_lock);
    return used;
}
HIP_API unsigned long long stubHipLaunchCount(void) {
    pthread_mutex_lock(&g_lock);
    unsigned long long n = g_launches;
    pthread_mutex_unlock(&g_lock);
    return n;
}
HIP_API unsigned long long stubHipCopyCount(void) {
    pthread_mutex_lock(&g_lock);
    unsigned long long n = g_copies;
    pthread_mutex_unlock(&g_lock);
    return n;
}
