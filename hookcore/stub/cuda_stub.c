/* cuda_stub.c - a stub libcuda.so.1 for testing hookcore without a GPU.
 *
 * Fake devices come from the environment (stub_devices.h has the grammar):
 *   HOOKCORE_STUB_DEVICES  "uuid=GPU-...,memory=141Gi,name=...;uuid=..." (shared with the NVML stub)
 *   STUB_CUDA_DEVICES, STUB_CUDA_MEMORY  the legacy form when it is unset: N devices of one size,
 *                          device i with UUID GPU-57554201-0000-4000-8000-0000000000ii
 *   CUDA_VISIBLE_DEVICES   comma-separated indexes into that list or UUIDs (full, or a unique prefix,
 *                          "GPU-" optional), honoured like the real driver: the first entry that
 *                          names no device (or one already listed) ends the list
 * so tests can check that a quota follows the UUID when CUDA_VISIBLE_DEVICES reorders devices.
 *
 * Memory: allocations return fake addresses from a per-device counter and are tracked,
 * so the stub runs out of memory at the device size like a real GPU would.
 *
 * Time: each device is simulated as one engine. A kernel's duration in microseconds is
 * the value of its CUfunction handle (tests pass (CUfunction)(uintptr_t)us); a graph's
 * is the value of its CUgraphExec handle. Launches queue behind each other on the
 * device; events complete when the simulated clock passes their time, and
 * cuEventElapsedTime reports simulated time. That is enough to test the compute limiter.
 *
 * Contexts: cuCtxCreate_v2/v3/v4 make a context of their own (current, as the driver does), each
 * taking STUB_CONTEXT_MEMORY bytes of device memory (default 0); cuCtxSetLimit/GetLimit remember
 * values.
 *
 * SMs: a device has `sms` SMs (HOOKCORE_STUB_DEVICES key, default 132, the H200's; the NVML stub's
 * nvmlDeviceGetAttributes reports the same), which cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)
 * reports outside an MPS client. A context may be limited to fewer, and
 * cuCtxGetExecAffinity(CU_EXEC_AFFINITY_TYPE_SM_COUNT) reports how many: an affinity context
 * (cuCtxCreate_v3 with an SM count) the count it asked for; any other context, when the process
 * acts as an MPS client -- CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE both set
 * in its environment when the context is made -- ceil(sms x percentage / 100). That mimics the
 * driver's documented behaviour: an MPS client's active-thread percentage limits the SMs each of its
 * contexts may use, read when the context is created (a primary context reset or released, then
 * used again, is a new context and reads it again), and cuCtxGetExecAffinity reports "the number of
 * SMs the context is limited to use". In an MPS client cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)
 * answers the provisioned count too, not the device's, as the real driver does (measured on an
 * H200 under MPS at 30%: both calls 38 of 132, bench/results/h200-2026-12-04-round2/mps-mounts.md;
 * the real driver rounds to its own SM granularity, the stub rounds up). Otherwise a context
 * has every SM. A kernel or graph of F us on a context with s of the device's S SMs runs F x S / s
 * us (compute-bound work spread over fewer SMs), so an MPS client is slower, as on a GPU.
 * Test knobs: HOOKCORE_STUB_CUDA_FAIL=call=code[,call=code...] makes cuCtxGetExecAffinity,
 * cuDeviceGetAttribute or cuStreamGetCtx return that CUresult; HOOKCORE_STUB_EXEC_AFFINITY_SMS=<n>
 * makes cuCtxGetExecAffinity report n SMs whatever the context has (a driver answering 0, or more
 * than the device). VMM export/import/retain, pool attributes and graph memory nodes are answered without
 * modelling the memory behind them (what the shim charges is what the tests check).
 *
 * Test-only extras (not CUDA API): stubCudaUsedBytes(dev) and stubCudaLaunchCount().
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/atomic.h"
#include "../cuda/cuda_abi.h"
#include "../cuda/copy.h"
#include "cuda_engine.h"
#include "stub_devices.h"

#define STUB_API        __attribute__((visibility("default")))
#define STUB_MAX_ALLOCS 65536

/* ---------------------------------------------------------------------------
 * State
 * ------------------------------------------------------------------------- */
typedef struct stub_device {
    int physical;          /* index before CUDA_VISIBLE_DEVICES */
    stub_device_desc desc; /* uuid, name, memory */
    size_t total;
    _Atomic size_t used;
    _Atomic int64_t busy_until_ns; /* simulated engine: end of the last queued work */
    int ctx_tag;                   /* primary context is &devices[i] */
    unsigned sms;                  /* the device's SMs (key `sms`, default 132) */
    unsigned primary_sms;          /* SMs of the primary context; 0 = not made yet (reads the env then) */
} stub_device;

typedef struct stub_alloc {
    unsigned long long key; /* device pointer, VMM handle or array handle; 0 = free */
    size_t size;
    int dev;
} stub_alloc;

typedef struct stub_event {
    int64_t t_ns; /* completion time on the simulated clock; -1 = never recorded */
    /* shared engine (cuda_engine.h): the op it waits for on its stream, and when it was recorded */
    int se, dev;
    uint64_t key, op;
    int64_t rec_ns;
} stub_event;

typedef struct stub_stream {
    int dev;
    int64_t last_end_ns;
    CUcontext ctx; /* the context it was created in (NULL: a default stream, the current one's) */
} stub_stream;

static int g_ndev = -1;
static stub_device g_dev[STUB_MAX_DEVICES];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static stub_alloc g_alloc[STUB_MAX_ALLOCS];
static unsigned long long g_next_addr[STUB_MAX_DEVICES];
static unsigned long long g_next_handle = 0x10000;
static _Atomic unsigned long long g_launches;
static __thread int t_cur_dev = -1;  /* current context's device, -1 = none */
static __thread CUcontext t_cur_ctx; /* the current context's handle (primary: &g_dev[i]) */

/* A context made by cuCtxCreate: its own handle, on a device. */
#define STUB_CTX_MAGIC 0x43545831
typedef struct stub_ctx {
    int magic;
    int dev;
    unsigned sms; /* the SMs it may use */
} stub_ctx;
static stub_stream g_default_stream[STUB_MAX_DEVICES];

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(int64_t t_ns) {
    for (;;) {
        int64_t d = t_ns - now_ns();
        if (d <= 0) return;
        struct timespec ts = {d / 1000000000LL, d % 1000000000LL};
        nanosleep(&ts, NULL);
    }
}

static void stub_setup(void) {
    pthread_mutex_lock(&g_lock);
    if (g_ndev >= 0) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    static stub_device_desc all[STUB_MAX_DEVICES];
    int phys = stub_devices_from_env(all, STUB_MAX_DEVICES);
    int order[STUB_MAX_DEVICES], count = 0;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis) {
        for (const char *p = vis; *p && count < STUB_MAX_DEVICES;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            int idx = stub_device_lookup(all, phys, p, len);
            int dup = 0;
            for (int i = 0; i < count; i++) dup |= order[i] == idx;
            if (idx < 0 || dup) break; /* like the driver: stop at the first bad entry */
            order[count++] = idx;
            if (!comma) break;
            p = comma + 1;
        }
    } else {
        for (int i = 0; i < phys; i++) order[count++] = i;
    }
    for (int i = 0; i < count; i++) {
        g_dev[i].physical = order[i];
        g_dev[i].desc = all[order[i]];
        g_dev[i].total = (size_t)all[order[i]].memory;
        hk_atomic_store_seq_cst(&g_dev[i].used, 0);
        hk_atomic_store_seq_cst(&g_dev[i].busy_until_ns, 0);
        g_next_addr[i] = 0x700000000000ULL + ((unsigned long long)order[i] << 36);
        g_dev[i].sms = all[order[i]].sms;
        g_dev[i].primary_sms = 0;
        g_default_stream[i].dev = i;
    }
    g_ndev = count;
    pthread_mutex_unlock(&g_lock);
}

/* ---------------------------------------------------------------------------
 * Allocation bookkeeping (a mutex is fine: this is a test double)
 * ------------------------------------------------------------------------- */
static CUresult take(int dev, size_t size, unsigned long long *key_out, int is_handle) {
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_CONTEXT;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t rounded = (size + 511) & ~(size_t)511;
    pthread_mutex_lock(&g_lock);
    size_t used = hk_atomic_load_seq_cst(&g_dev[dev].used);
    if (used + rounded > g_dev[dev].total) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int slot = -1;
    for (int i = 0; i < STUB_MAX_ALLOCS; i++)
        if (g_alloc[i].key == 0) {
            slot = i;
            break;
        }
    if (slot < 0) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    unsigned long long key;
    if (is_handle)
        key = g_next_handle++;
    else {
        key = g_next_addr[dev];
        g_next_addr[dev] += rounded;
    }
    g_alloc[slot] = (stub_alloc){key, rounded, dev};
    hk_atomic_store_seq_cst(&g_dev[dev].used, used + rounded);
    pthread_mutex_unlock(&g_lock);
    *key_out = key;
    return CUDA_SUCCESS;
}

static CUresult give(unsigned long long key) {
    if (key == 0) return CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < STUB_MAX_ALLOCS; i++) {
        if (g_alloc[i].key == key) {
            hk_atomic_sub_seq_cst(&g_dev[g_alloc[i].dev].used, g_alloc[i].size);
            g_alloc[i].key = 0;
            pthread_mutex_unlock(&g_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

static int cur_dev(void) {
    if (g_ndev < 0) return -1;
    return t_cur_dev;
}

#define NEED_INIT()                                        \
    do {                                                   \
        if (g_ndev < 0) return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)
#define NEED_CTX(d)    \
    int d = cur_dev(); \
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT

/* HOOKCORE_STUB_CUDA_FAIL=call=code,...: the CUresult `call` is told to return, or 0. */
static CUresult stub_fail(const char *call) {
    const char *v = getenv("HOOKCORE_STUB_CUDA_FAIL");
    size_t n = strlen(call);
    for (const char *p = v; p && *p;) {
        if (!strncmp(p, call, n) && p[n] == '=') return (CUresult)atoi(p + n + 1);
        p = strchr(p, ',');
        if (p) p++;
    }
    return CUDA_SUCCESS;
}

/* SMs a context made now on device `dev` may use: the MPS client's share when the environment
   makes this process one (see the header), else all of them. */
static unsigned mps_sms(int dev) {
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY"), *pct = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    unsigned total = g_dev[dev].sms;
    if (!pipe || !pct) return total;
    double p = atof(pct);
    if (!(p > 0) || p >= 100) return total;
    unsigned sms = (unsigned)((double)total * p / 100.0);
    if ((double)sms * 100.0 < (double)total * p) sms++; /* ceil */
    return sms < 1 ? 1 : sms > total ? total : sms;
}

/* The device's SM count as CUDA reports it to this process: the device's, or, in an MPS client,
   its primary context's provisioned count (read now if the primary context is not made yet). */
static unsigned client_sms(int dev) {
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY"), *pct = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    if (!pipe || !pct) return g_dev[dev].sms;
    return g_dev[dev].primary_sms ? g_dev[dev].primary_sms : mps_sms(dev);
}

/* SMs of context `c` (a primary context is made, reading the environment, on first use). */
static unsigned ctx_sms(CUcontext c) {
    stub_device *d = (stub_device *)c;
    if (d >= g_dev && d < g_dev + g_ndev) {
        if (d->primary_sms == 0) d->primary_sms = mps_sms((int)(d - g_dev));
        return d->primary_sms;
    }
    return ((stub_ctx *)c)->sms;
}

static CUcontext cur_ctx(void) {
    if (t_cur_dev < 0) return NULL;
    return t_cur_ctx ? t_cur_ctx : (CUcontext)&g_dev[t_cur_dev];
}

/* ---------------------------------------------------------------------------
 * Init, devices, contexts
 * ------------------------------------------------------------------------- */
STUB_API CUresult cuInit(unsigned int flags) {
    (void)flags;
    stub_setup();
    return g_ndev > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

STUB_API CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuDeviceGetCount(int *count) {
    NEED_INIT();
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = g_ndev;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    NEED_INIT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", g_dev[dev].desc.name);
    return CUDA_SUCCESS;
}

STUB_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    NEED_INIT();
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    memcpy(uuid->bytes, g_dev[dev].desc.uuid_bytes, 16);
    return CUDA_SUCCESS;
}

STUB_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

STUB_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    NEED_INIT();
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = g_dev[dev].total;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
    NEED_INIT();
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    CUresult f = stub_fail("cuDeviceGetAttribute");
    if (f != CUDA_SUCCESS) return f;
    /* An MPS client is told its provisioned SMs here too, as the real driver tells it (H200, 30%: 38) */
    *value = attrib == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? (int)client_sms(dev) : 1;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    NEED_INIT();
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    *ctx = (CUcontext)&g_dev[dev];
    ctx_sms(*ctx); /* made now, if it was not */
    return CUDA_SUCCESS;
}

/* Released (the stub keeps no count: as the last reference) or reset: the next use makes a new
   primary context, which reads the environment again. */
STUB_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    g_dev[dev].primary_sms = 0;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
STUB_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
STUB_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

STUB_API CUresult cuCtxGetExecAffinity(CUexecAffinityParam *p, CUexecAffinityType type) {
    NEED_INIT();
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUcontext c = cur_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    CUresult f = stub_fail("cuCtxGetExecAffinity");
    if (f != CUDA_SUCCESS) return f;
    const char *forced = getenv("HOOKCORE_STUB_EXEC_AFFINITY_SMS");
    p->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    p->param.smCount.val = forced ? (unsigned)strtoul(forced, NULL, 10) : ctx_sms(c);
    return CUDA_SUCCESS;
}

STUB_API CUresult cuCtxSetCurrent(CUcontext ctx) {
    NEED_INIT();
    if (!ctx) {
        t_cur_dev = -1;
        t_cur_ctx = NULL;
        return CUDA_SUCCESS;
    }
    stub_device *d = (stub_device *)ctx;
    if (d >= g_dev && d < g_dev + g_ndev) {
        t_cur_dev = (int)(d - g_dev);
    } else if (((stub_ctx *)ctx)->magic == STUB_CTX_MAGIC) {
        t_cur_dev = ((stub_ctx *)ctx)->dev;
    } else {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    t_cur_ctx = ctx;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuCtxGetCurrent(CUcontext *ctx) {
    NEED_INIT();
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = t_cur_dev < 0 ? NULL : t_cur_ctx ? t_cur_ctx : (CUcontext)&g_dev[t_cur_dev];
    return CUDA_SUCCESS;
}

/* Created contexts (made current, as the driver does). Each takes STUB_CONTEXT_MEMORY bytes of
   device memory (default 0), like a real context's own allocations. */
static size_t ctx_memory(void) {
    const char *v = getenv("STUB_CONTEXT_MEMORY");
    return v ? (size_t)strtoull(v, NULL, 0) : 0;
}

static CUresult create_ctx(CUcontext *ctx, CUdevice dev, unsigned sms);
STUB_API CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev) {
    (void)flags;
    NEED_INIT();
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    return create_ctx(ctx, dev, mps_sms(dev));
}

static CUresult create_ctx(CUcontext *ctx, CUdevice dev, unsigned sms) {
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    size_t cm = ctx_memory();
    pthread_mutex_lock(&g_lock);
    size_t used = hk_atomic_load_seq_cst(&g_dev[dev].used);
    if (used + cm > g_dev[dev].total) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    hk_atomic_store_seq_cst(&g_dev[dev].used, used + cm);
    pthread_mutex_unlock(&g_lock);
    stub_ctx *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = STUB_CTX_MAGIC;
    c->dev = dev;
    c->sms = sms;
    *ctx = (CUcontext)c;
    t_cur_dev = dev;
    t_cur_ctx = *ctx;
    return CUDA_SUCCESS;
}
/* An affinity context: limited to the SM count it asks for (at most the device's). */
STUB_API CUresult cuCtxCreate_v3(CUcontext *ctx, void *affinity, int n, unsigned int flags, CUdevice dev) {
    (void)flags;
    NEED_INIT();
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    unsigned sms = mps_sms(dev);
    const CUexecAffinityParam *a = affinity;
    for (int i = 0; a && i < n; i++) {
        if (a[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
        if (a[i].param.smCount.val == 0) return CUDA_ERROR_INVALID_VALUE;
        if (a[i].param.smCount.val < sms) sms = a[i].param.smCount.val;
    }
    return create_ctx(ctx, dev, sms);
}
STUB_API CUresult cuCtxCreate_v4(CUcontext *ctx, void *params, unsigned int flags, CUdevice dev) {
    (void)params;
    return cuCtxCreate_v2(ctx, flags, dev);
}

STUB_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
    NEED_INIT();
    stub_ctx *c = (stub_ctx *)ctx;
    if (!c || c->magic != STUB_CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
    hk_atomic_sub_seq_cst(&g_dev[c->dev].used, ctx_memory());
    c->magic = 0;
    if (t_cur_ctx == ctx) {
        t_cur_ctx = NULL;
        t_cur_dev = -1;
    }
    free(c);
    return CUDA_SUCCESS;
}

/* Context limits: remembered per device (the stub has no per-thread stacks or heap). */
static size_t g_limits[STUB_MAX_DEVICES][3];
STUB_API CUresult cuCtxSetLimit(int limit, size_t value) {
    NEED_INIT();
    NEED_CTX(d);
    if (limit < 0 || limit > 2) return CUDA_ERROR_INVALID_VALUE;
    g_limits[d][limit] = value;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuCtxGetLimit(size_t *value, int limit) {
    NEED_INIT();
    NEED_CTX(d);
    if (!value || limit < 0 || limit > 2) return CUDA_ERROR_INVALID_VALUE;
    *value = g_limits[d][limit];
    return CUDA_SUCCESS;
}

STUB_API CUresult cuCtxGetDevice(CUdevice *dev) {
    NEED_INIT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (t_cur_dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = t_cur_dev;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuCtxSynchronize(void) {
    NEED_INIT();
    NEED_CTX(d);
    if (se_on())
        se_wait_all(g_dev[d].physical);
    else
        sleep_until(hk_atomic_load_seq_cst(&g_dev[d].busy_until_ns));
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------- */
STUB_API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) {
    NEED_INIT();
    NEED_CTX(d);
    if (!free_b || !total_b) return CUDA_ERROR_INVALID_VALUE;
    *total_b = g_dev[d].total;
    *free_b = g_dev[d].total - hk_atomic_load_seq_cst(&g_dev[d].used);
    return CUDA_SUCCESS;
}

STUB_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    NEED_INIT();
    NEED_CTX(d);
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    return take(d, size, dptr, 0);
}

/* The CUDA 3.1 ABI (32-bit sizes): a caller asking cuGetProcAddress for version < 3020 gets it. */
STUB_API CUresult cuMemAlloc(unsigned int *dptr, unsigned int size) {
    NEED_INIT();
    NEED_CTX(d);
    (void)d;
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    (void)size;
    return CUDA_ERROR_NOT_SUPPORTED;
}

STUB_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem) {
    NEED_INIT();
    NEED_CTX(d);
    if (!dptr || !pitch || (elem != 4 && elem != 8 && elem != 16)) return CUDA_ERROR_INVALID_VALUE;
    size_t p = (width + 511) & ~(size_t)511;
    CUresult r = take(d, p * height, dptr, 0);
    if (r == CUDA_SUCCESS) *pitch = p;
    return r;
}

STUB_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    NEED_CTX(d);
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    return take(d, size, dptr, 0);
}

STUB_API CUresult cuMemFree_v2(CUdeviceptr p) {
    NEED_INIT();
    return give(p);
}

STUB_API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int flags) {
    (void)flags;
    NEED_INIT();
    if (!g || !prop) return CUDA_ERROR_INVALID_VALUE;
    *g = (size_t)2 << 20;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                              unsigned long long flags) {
    (void)flags;
    NEED_INIT();
    if (!h || !prop) return CUDA_ERROR_INVALID_VALUE;
    if (size % ((size_t)2 << 20)) return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
        pthread_mutex_lock(&g_lock); /* host memory: not device usage, not tracked */
        *h = ++g_next_handle;
        pthread_mutex_unlock(&g_lock);
        return CUDA_SUCCESS;
    }
    return take(prop->location.id, size, h, 1);
}

STUB_API CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    NEED_INIT();
    CUresult r = give(h);
    return r == CUDA_ERROR_INVALID_VALUE ? CUDA_SUCCESS : r; /* host handles are not tracked */
}

STUB_API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                      unsigned long long flags) {
    (void)align;
    (void)addr;
    (void)flags;
    NEED_INIT();
    static _Atomic unsigned long long next = 0x600000000000ULL;
    *p = hk_atomic_add_seq_cst(&next, (size + 0xfffff) & ~0xfffffULL);
    return CUDA_SUCCESS;
}
STUB_API CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
    (void)p;
    (void)size;
    return CUDA_SUCCESS;
}
/* Mappings are remembered (address -> handle) for cuMemRetainAllocationHandle. */
#define STUB_MAX_MAPS 1024
static struct {
    CUdeviceptr p;
    CUmemGenericAllocationHandle h;
} g_maps[STUB_MAX_MAPS];
STUB_API CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,
                           unsigned long long flags) {
    (void)size;
    (void)off;
    (void)flags;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < STUB_MAX_MAPS; i++)
        if (g_maps[i].p == 0) {
            g_maps[i].p = p;
            g_maps[i].h = h;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}
STUB_API CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
    (void)size;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < STUB_MAX_MAPS; i++)
        if (g_maps[i].p == p) {
            g_maps[i].p = 0;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}
STUB_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    NEED_INIT();
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < STUB_MAX_MAPS; i++) {
        if (g_maps[i].p && g_maps[i].p == (CUdeviceptr)(uintptr_t)addr) {
            *h = g_maps[i].h;
            pthread_mutex_unlock(&g_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return CUDA_ERROR_INVALID_VALUE;
}
/* Export writes the handle as a POSIX "file descriptor"; import returns a new handle naming the
   same memory (the stub does not count the sharing: the shim's charges are what tests check). */
STUB_API CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h, int type,
                                               unsigned long long flags) {
    (void)type;
    (void)flags;
    NEED_INIT();
    if (!shareable) return CUDA_ERROR_INVALID_VALUE;
    *(int *)shareable = (int)(h & 0x7fffffff);
    return CUDA_SUCCESS;
}
STUB_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type) {
    (void)type;
    NEED_INIT();
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    *h = 0x40000000ULL + (unsigned long long)(uintptr_t)os_handle;
    return CUDA_SUCCESS;
}

/* Stream-ordered allocator: the memory is taken at once (no pool caching in the stub). */
STUB_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s) {
    (void)s;
    NEED_INIT();
    NEED_CTX(d);
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    return take(d, size, dptr, 0);
}
STUB_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s) {
    return cuMemAllocAsync(dptr, size, s);
}
STUB_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    (void)s;
    NEED_INIT();
    return give(p);
}
STUB_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }

/* Pool handles: 0x1000 + device for a device's default pool, 0x10000 + (n << 8) + device for
   the n-th created one. */
static int pool_dev(CUmemoryPool pool) {
    uintptr_t v = (uintptr_t)pool;
    return v >= 0x10000 ? (int)(v & 0xff) : (int)(v - 0x1000);
}
STUB_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const void *props) {
    (void)props;
    NEED_INIT();
    NEED_CTX(d);
    static _Atomic unsigned long long created;
    *pool = (CUmemoryPool)(uintptr_t)(0x10000 + ((hk_atomic_add_seq_cst(&created, 1) + 1) << 8) + (unsigned)d);
    return CUDA_SUCCESS;
}
STUB_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    (void)pool;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
    NEED_INIT();
    if (!pool || dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_VALUE;
    *pool = (CUmemoryPool)(uintptr_t)(0x1000 + dev);
    return CUDA_SUCCESS;
}
/* Pool attributes are stored and read back (the stub keeps no freed memory itself). */
static uint64_t g_pool_attr[STUB_MAX_DEVICES][8];
STUB_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value) {
    int d = pool_dev(pool);
    if (!value || d < 0 || d >= STUB_MAX_DEVICES || attr < 0 || attr >= 8) return CUDA_ERROR_INVALID_VALUE;
    g_pool_attr[d][attr] = *(uint64_t *)value;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value) {
    int d = pool_dev(pool);
    if (!value || d < 0 || d >= STUB_MAX_DEVICES || attr < 0 || attr >= 8) return CUDA_ERROR_INVALID_VALUE;
    *(uint64_t *)value = g_pool_attr[d][attr];
    return CUDA_SUCCESS;
}
STUB_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    (void)pool;
    (void)keep;
    return CUDA_SUCCESS;
}

/* Graph memory nodes: the node's address is made up; the memory is not modelled. */
STUB_API CUresult cuGraphAddMemAllocNode(void **node, void *graph, const void *deps, size_t n,
                                         CUDA_MEM_ALLOC_NODE_PARAMS *params) {
    (void)graph;
    (void)deps;
    (void)n;
    NEED_INIT();
    if (!node || !params) return CUDA_ERROR_INVALID_VALUE;
    static _Atomic unsigned long long next = 0x500000000000ULL;
    params->dptr = hk_atomic_add_seq_cst(&next, (params->bytesize + 0xfffff) & ~0xfffffULL);
    *node = (void *)(uintptr_t)params->dptr;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuGraphAddNode(void **node, void *graph, const void *deps, size_t n, CUgraphNodeParams *params) {
    if (!params) return CUDA_ERROR_INVALID_VALUE;
    if (params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return cuGraphAddMemAllocNode(node, graph, deps, n, &params->u.alloc);
    NEED_INIT();
    if (node) *node = (void *)0x1;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuGraphAddNode_v2(void **node, void *graph, const void *deps, const void *edata, size_t n,
                                    CUgraphNodeParams *params) {
    (void)edata;
    return cuGraphAddNode(node, graph, deps, n, params);
}
STUB_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    *pool = (CUmemoryPool)(uintptr_t)(0x1000 + dev);
    return CUDA_SUCCESS;
}
STUB_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    (void)s;
    NEED_INIT();
    int d = pool_dev(pool);
    if (!dptr || d < 0 || d >= g_ndev) return CUDA_ERROR_INVALID_VALUE;
    return take(d, size, dptr, 0);
}
STUB_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s) {
    return cuMemAllocFromPoolAsync(dptr, size, pool, s);
}

static size_t format_bytes(CUarray_format f) {
    switch (f) {
        case 0x01:
        case 0x08: return 1;
        case 0x02:
        case 0x09:
        case 0x10: return 2;
        default: return 4;
    }
}

STUB_API CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *d) {
    NEED_INIT();
    NEED_CTX(dev);
    if (!arr || !d) return CUDA_ERROR_INVALID_VALUE;
    size_t bytes = d->Width * (d->Height ? d->Height : 1) * d->NumChannels * format_bytes(d->Format);
    unsigned long long h;
    CUresult r = take(dev, bytes, &h, 1);
    if (r == CUDA_SUCCESS) *arr = (CUarray)(uintptr_t)h;
    return r;
}

STUB_API CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    NEED_INIT();
    NEED_CTX(dev);
    if (!arr || !d) return CUDA_ERROR_INVALID_VALUE;
    size_t bytes =
        d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * d->NumChannels * format_bytes(d->Format);
    unsigned long long h;
    CUresult r = take(dev, bytes, &h, 1);
    if (r == CUDA_SUCCESS) *arr = (CUarray)(uintptr_t)h;
    return r;
}

STUB_API CUresult cuArrayDestroy(CUarray arr) {
    NEED_INIT();
    return give((uintptr_t)arr);
}

STUB_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels) {
    NEED_INIT();
    NEED_CTX(dev);
    if (!arr || !d || levels == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t bytes =
        d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * d->NumChannels * format_bytes(d->Format);
    bytes = bytes * 4 / 3 + 1;
    unsigned long long h;
    CUresult r = take(dev, bytes, &h, 1);
    if (r == CUDA_SUCCESS) *arr = (CUmipmappedArray)(uintptr_t)h;
    return r;
}

STUB_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr) {
    NEED_INIT();
    return give((uintptr_t)arr);
}

/* ---------------------------------------------------------------------------
 * Streams, events and a simulated engine
 * ------------------------------------------------------------------------- */
static stub_stream *stream_of(CUstream s, int dev) {
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return &g_default_stream[dev];
    return (stub_stream *)s;
}

STUB_API CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    NEED_CTX(d);
    stub_stream *st = calloc(1, sizeof *st);
    if (!st) return CUDA_ERROR_OUT_OF_MEMORY;
    st->dev = d;
    st->ctx = cur_ctx();
    *s = (CUstream)st;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuStreamGetCtx(CUstream s, CUcontext *ctx) {
    NEED_INIT();
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    CUresult f = stub_fail("cuStreamGetCtx");
    if (f != CUDA_SUCCESS) return f;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
        *ctx = cur_ctx();
    } else {
        *ctx = ((stub_stream *)s)->ctx;
    }
    return CUDA_SUCCESS;
}

STUB_API CUresult cuStreamDestroy_v2(CUstream s) {
    NEED_INIT();
    if (s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) free(s);
    return CUDA_SUCCESS;
}

static uint64_t se_key(stub_stream *st) { return (uint64_t)(uintptr_t)st; }

STUB_API CUresult cuStreamSynchronize(CUstream s) {
    NEED_INIT();
    NEED_CTX(d);
    stub_stream *st = stream_of(s, d);
    if (se_on())
        se_wait(g_dev[d].physical, se_key(st), se_last(g_dev[d].physical, se_key(st)));
    else
        sleep_until(st->last_end_ns);
    return CUDA_SUCCESS;
}

STUB_API CUresult cuStreamQuery(CUstream s) {
    NEED_INIT();
    NEED_CTX(d);
    stub_stream *st = stream_of(s, d);
    if (se_on()) {
        int64_t t;
        return se_done(g_dev[d].physical, se_key(st), se_last(g_dev[d].physical, se_key(st)), &t)
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_NOT_READY;
    }
    return now_ns() >= st->last_end_ns ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* Capture: only the state is modelled (launches during capture still run in the stub). */
static __thread CUstream t_capturing;
STUB_API CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
    (void)mode;
    NEED_INIT();
    t_capturing = s ? s : CU_STREAM_LEGACY;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuStreamEndCapture(CUstream s, void **graph) {
    NEED_INIT();
    if (t_capturing != (s ? s : CU_STREAM_LEGACY)) return 401; /* CUDA_ERROR_ILLEGAL_STATE */
    t_capturing = NULL;
    if (graph) *graph = (void *)0x1;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuStreamIsCapturing(CUstream s, int *status) {
    NEED_INIT();
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    *status = t_capturing != NULL && t_capturing == (s ? s : CU_STREAM_LEGACY);
    return CUDA_SUCCESS;
}

/* Queue work of `dur_ns` on the stream: it starts when both the engine and the stream are free.
   Returns when it ends (simulated clock). */
static int64_t enqueue(CUstream s, int64_t dur_ns) {
    int d = cur_dev();
    stub_stream *st = stream_of(s, d);
    if (se_on()) { /* the shared engine: returns the op's number */
        hk_atomic_add_seq_cst(&g_launches, 1);
        return (int64_t)se_submit(g_dev[d].physical, se_key(st), dur_ns);
    }
    int64_t now = now_ns();
    int64_t busy = hk_atomic_load_seq_cst(&g_dev[d].busy_until_ns);
    int64_t start, end;
    do {
        start = busy > now ? busy : now;
        if (st->last_end_ns > start) start = st->last_end_ns;
        end = start + dur_ns;
    } while (!hk_atomic_cas_weak_seq_cst(&g_dev[d].busy_until_ns, &busy, end));
    st->last_end_ns = end;
    hk_atomic_add_seq_cst(&g_launches, 1);
    return end;
}

STUB_API CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    stub_event *ev = malloc(sizeof *ev);
    if (!ev) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(ev, 0, sizeof *ev);
    ev->t_ns = -1;
    *e = (CUevent)ev;
    return CUDA_SUCCESS;
}

STUB_API CUresult cuEventDestroy_v2(CUevent e) {
    NEED_INIT();
    free(e);
    return CUDA_SUCCESS;
}

STUB_API CUresult cuEventRecord(CUevent e, CUstream s) {
    NEED_INIT();
    NEED_CTX(d);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    stub_stream *st = stream_of(s, d);
    int64_t now = now_ns();
    stub_event *ev = (stub_event *)e;
    if (se_on()) {
        ev->se = 1;
        ev->dev = g_dev[d].physical;
        ev->key = se_key(st);
        ev->op = se_last(ev->dev, ev->key);
        ev->rec_ns = now;
        ev->t_ns = now;
        return CUDA_SUCCESS;
    }
    ev->t_ns = st->last_end_ns > now ? st->last_end_ns : now;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, s); }

/* Shared engine: is the event done, and when (its op's completion, or its record time). */
static int se_event(stub_event *ev, int64_t *t) {
    int64_t done_at;
    if (!se_done(ev->dev, ev->key, ev->op, &done_at)) return 0;
    *t = done_at > ev->rec_ns ? done_at : ev->rec_ns;
    return 1;
}

STUB_API CUresult cuEventQuery(CUevent e) {
    NEED_INIT();
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    int64_t t = ((stub_event *)e)->t_ns;
    if (((stub_event *)e)->se) return se_event((stub_event *)e, &t) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    return (t < 0 || now_ns() >= t) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

STUB_API CUresult cuEventSynchronize(CUevent e) {
    NEED_INIT();
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    stub_event *ev = (stub_event *)e;
    if (ev->se)
        se_wait(ev->dev, ev->key, ev->op);
    else
        sleep_until(ev->t_ns);
    return CUDA_SUCCESS;
}

STUB_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    NEED_INIT();
    if (!ms || !a || !b) return CUDA_ERROR_INVALID_HANDLE;
    int64_t ta = ((stub_event *)a)->t_ns, tb = ((stub_event *)b)->t_ns;
    if (((stub_event *)a)->se || ((stub_event *)b)->se) {
        if (!((stub_event *)a)->se || !((stub_event *)b)->se) return CUDA_ERROR_INVALID_HANDLE;
        if (!se_event((stub_event *)a, &ta) || !se_event((stub_event *)b, &tb)) return CUDA_ERROR_NOT_READY;
        *ms = (float)(tb - ta) / 1e6f;
        return CUDA_SUCCESS;
    }
    if (ta < 0 || tb < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (now_ns() < tb || now_ns() < ta) return CUDA_ERROR_NOT_READY;
    *ms = (float)(tb - ta) / 1e6f;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { return cuEventElapsedTime(ms, a, b); }

#define KERNEL_ARGS                                                                                             \
    CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, \
        CUstream s

/* The SM clock now: STUB_SM_MHZ is one clock in MHz, or a schedule "1800,1200,..." that moves to the
   next value every STUB_SM_PERIOD_US (default 20000) on the monotonic clock (the virtual one in the
   limiter's tests), as a GPU's clock moves with load. tests/hook/c/nvml_clocks.c reports the same. */
static int64_t sm_mhz_now(void) {
    const char *sm = getenv("STUB_SM_MHZ");
    if (!sm) return 0;
    int64_t vals[16];
    int n = 0;
    for (const char *p = sm; *p && n < 16;) {
        vals[n++] = atoll(p);
        const char *c = strchr(p, ',');
        if (!c) break;
        p = c + 1;
    }
    if (n <= 1) return n ? vals[0] : 0;
    const char *per = getenv("STUB_SM_PERIOD_US");
    int64_t period = per && atoll(per) > 0 ? atoll(per) * 1000 : 20000000;
    return vals[(now_ns() / period) % n];
}

/* A kernel's duration follows the SM clock: with STUB_SM_MHZ and STUB_FULL_LOAD_MHZ set, a kernel
   of F us at the full-load clock takes F * (1 - e + e * full / sm) us at clock sm, where e is
   STUB_ELASTICITY (default 1: compute-bound, F * full / sm; 0: memory-bound, F at any clock), as on
   a GPU that boosts when it is not fully loaded (for the strict cap tests). */
static int64_t kernel_ns(uintptr_t us, CUstream s) {
    const char *full = getenv("STUB_FULL_LOAD_MHZ"), *el = getenv("STUB_ELASTICITY");
    int64_t ns = (int64_t)us * 1000, sm = sm_mhz_now();
    if (sm > 0 && full && atoll(full) > 0) {
        double e = el ? atof(el) : 1.0;
        ns = (int64_t)((double)ns * (1.0 - e + e * (double)atoll(full) / (double)sm));
    }
    /* on a context with fewer SMs than the device (MPS, affinity): slower in proportion */
    CUcontext c = (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) ? NULL : ((stub_stream *)s)->ctx;
    if (!c) c = cur_ctx();
    unsigned sms = c ? ctx_sms(c) : 0, total = cur_dev() >= 0 ? g_dev[cur_dev()].sms : 0;
    if (sms > 0 && sms < total) ns = ns * total / sms;
    return ns;
}

STUB_API CUresult cuLaunchKernel(KERNEL_ARGS, void **params, void **extra) {
    (void)gx;
    (void)gy;
    (void)gz;
    (void)bx;
    (void)by;
    (void)bz;
    (void)shmem;
    (void)params;
    (void)extra;
    NEED_INIT();
    if (cur_dev() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    enqueue(s, kernel_ns((uintptr_t)f, s));
    return CUDA_SUCCESS;
}
STUB_API CUresult cuLaunchKernel_ptsz(KERNEL_ARGS, void **params, void **extra) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s ? s : CU_STREAM_PER_THREAD, params, extra);
}
STUB_API CUresult cuLaunchCooperativeKernel(KERNEL_ARGS, void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}
STUB_API CUresult cuLaunchCooperativeKernel_ptsz(KERNEL_ARGS, void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s ? s : CU_STREAM_PER_THREAD, params, NULL);
}
STUB_API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    return cuLaunchKernel(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                          c->sharedMemBytes, c->hStream, params, extra);
}
STUB_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    return cuLaunchKernelEx(c, f, params, extra);
}
STUB_API CUresult cuLaunch(CUfunction f) { return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL); }
STUB_API CUresult cuLaunchGrid(CUfunction f, int gw, int gh) {
    return cuLaunchKernel(f, (unsigned)gw, (unsigned)gh, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}
STUB_API CUresult cuLaunchGridAsync(CUfunction f, int gw, int gh, CUstream s) {
    return cuLaunchKernel(f, (unsigned)gw, (unsigned)gh, 1, 1, 1, 1, 0, s, NULL, NULL);
}
STUB_API CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    NEED_INIT();
    if (cur_dev() < 0) return CUDA_ERROR_INVALID_CONTEXT;
    enqueue(s, kernel_ns((uintptr_t)g, s));
    return CUDA_SUCCESS;
}
STUB_API CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    return cuGraphLaunch(g, s ? s : CU_STREAM_PER_THREAD);
}

/* Copies and memsets (the table of cuda/copy.h): `bytes` take bytes / STUB_COPY_MBPS (MB/s,
   default 1000, so 1 MB = 1 ms) on the simulated engine; synchronous ones also wait for it. No
   memory is touched (device pointers are fake). */
static _Atomic int64_t g_copy_mbps;
static int64_t copy_ns(uint64_t bytes) {
    int64_t mbps = hk_atomic_load_relaxed(&g_copy_mbps);
    if (mbps == 0) {
        const char *v = getenv("STUB_COPY_MBPS");
        mbps = v && atoll(v) > 0 ? atoll(v) : 1000;
        hk_atomic_store_relaxed(&g_copy_mbps, mbps);
    }
    return (int64_t)(bytes * 1000 / (uint64_t)mbps);
}
static _Atomic unsigned long long g_copies;

/* A synchronous call waits for what enqueue() returned: the end time, or the shared engine's op. */
static void wait_end(CUstream s, int64_t end) {
    if (se_on())
        se_wait(g_dev[cur_dev()].physical, se_key(stream_of(s, cur_dev())), (uint64_t)end);
    else
        sleep_until(end);
}

#define STUB_COPY_DEF(name, params, args, stream, bytes, kind)       \
    STUB_API CUresult name params {                                  \
        NEED_INIT();                                                 \
        if (cur_dev() < 0) return CUDA_ERROR_INVALID_CONTEXT;        \
        int64_t end = enqueue((stream), copy_ns(bytes));             \
        hk_atomic_add_seq_cst(&g_copies, 1);                         \
        if (strstr(#name, "Async") == NULL) wait_end((stream), end); \
        return CUDA_SUCCESS;                                         \
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter" /* the stub does not move the bytes */
HK_COPIES(STUB_COPY_DEF)
#pragma GCC diagnostic pop
#undef STUB_COPY_DEF

STUB_API CUresult cuGetErrorString(CUresult r, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    *s = r == CUDA_SUCCESS ? "no error" : r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "stub error";
    return CUDA_SUCCESS;
}

/* Not policed by the shim: used by tests to check that the real pointer is handed out. */
STUB_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *v) {
    (void)ctx;
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 12040;
    return CUDA_SUCCESS;
}

/* Test-only extras. */
STUB_API size_t stubCudaUsedBytes(int dev) {
    return (dev >= 0 && dev < g_ndev) ? hk_atomic_load_seq_cst(&g_dev[dev].used) : 0;
}
STUB_API unsigned long long stubCudaLaunchCount(void) { return hk_atomic_load_seq_cst(&g_launches); }
STUB_API unsigned long long stubCudaCopyCount(void) { return hk_atomic_load_seq_cst(&g_copies); }

/* ---------------------------------------------------------------------------
 * cuGetProcAddress: base name + version + flags -> variant, like the driver
 * ------------------------------------------------------------------------- */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);

typedef struct {
    const char *name;
    void *fn;
} stub_sym;

/* The table must hold the stub's own functions even when a preloaded library interposes the same
   names (as the shim does): taking the address of an exported function in a shared object goes
   through the GOT and would yield the interposer. Hidden aliases bind locally. */
#define STUB_SYMS(X)                  \
    X(cuInit)                         \
    X(cuDriverGetVersion)             \
    X(cuDeviceGetCount)               \
    X(cuDeviceGet)                    \
    X(cuDeviceGetName)                \
    X(cuDeviceGetUuid)                \
    X(cuDeviceGetUuid_v2)             \
    X(cuDeviceTotalMem_v2)            \
    X(cuDeviceGetAttribute)           \
    X(cuDevicePrimaryCtxRetain)       \
    X(cuDevicePrimaryCtxRelease_v2)   \
    X(cuDevicePrimaryCtxRelease)      \
    X(cuDevicePrimaryCtxReset_v2)     \
    X(cuDevicePrimaryCtxReset)        \
    X(cuCtxGetExecAffinity)           \
    X(cuStreamGetCtx)                 \
    X(cuCtxSetCurrent)                \
    X(cuCtxGetCurrent)                \
    X(cuCtxGetDevice)                 \
    X(cuCtxSynchronize)               \
    X(cuCtxCreate_v2)                 \
    X(cuCtxCreate_v3)                 \
    X(cuCtxCreate_v4)                 \
    X(cuCtxDestroy_v2)                \
    X(cuCtxSetLimit)                  \
    X(cuCtxGetLimit)                  \
    X(cuMemRetainAllocationHandle)    \
    X(cuMemExportToShareableHandle)   \
    X(cuMemImportFromShareableHandle) \
    X(cuDeviceGetMemPool)             \
    X(cuMemPoolSetAttribute)          \
    X(cuMemPoolGetAttribute)          \
    X(cuMemPoolTrimTo)                \
    X(cuGraphAddMemAllocNode)         \
    X(cuLaunch)                       \
    X(cuLaunchGrid)                   \
    X(cuLaunchGridAsync)              \
    X(cuMemGetInfo_v2)                \
    X(cuMemAlloc)                     \
    X(cuMemAlloc_v2)                  \
    X(cuMemAllocPitch_v2)             \
    X(cuMemAllocManaged)              \
    X(cuMemFree_v2)                   \
    X(cuMemGetAllocationGranularity)  \
    X(cuMemCreate)                    \
    X(cuMemRelease)                   \
    X(cuMemAddressReserve)            \
    X(cuMemAddressFree)               \
    X(cuMemMap)                       \
    X(cuMemUnmap)                     \
    X(cuMemAllocAsync)                \
    X(cuMemAllocAsync_ptsz)           \
    X(cuMemFreeAsync)                 \
    X(cuMemFreeAsync_ptsz)            \
    X(cuMemPoolCreate)                \
    X(cuMemPoolDestroy)               \
    X(cuDeviceGetDefaultMemPool)      \
    X(cuMemAllocFromPoolAsync)        \
    X(cuMemAllocFromPoolAsync_ptsz)   \
    X(cuArrayCreate_v2)               \
    X(cuArray3DCreate_v2)             \
    X(cuArrayDestroy)                 \
    X(cuMipmappedArrayCreate)         \
    X(cuMipmappedArrayDestroy)        \
    X(cuStreamCreate)                 \
    X(cuStreamDestroy_v2)             \
    X(cuStreamSynchronize)            \
    X(cuStreamQuery)                  \
    X(cuStreamIsCapturing)            \
    X(cuStreamBeginCapture_v2)        \
    X(cuStreamEndCapture)             \
    X(cuEventCreate)                  \
    X(cuEventDestroy_v2)              \
    X(cuEventRecord)                  \
    X(cuEventRecord_ptsz)             \
    X(cuEventQuery)                   \
    X(cuEventSynchronize)             \
    X(cuEventElapsedTime)             \
    X(cuEventElapsedTime_v2)          \
    X(cuLaunchKernel)                 \
    X(cuLaunchKernel_ptsz)            \
    X(cuLaunchCooperativeKernel)      \
    X(cuLaunchCooperativeKernel_ptsz) \
    X(cuLaunchKernelEx)               \
    X(cuLaunchKernelEx_ptsz)          \
    X(cuGraphLaunch)                  \
    X(cuGraphLaunch_ptsz)             \
    X(cuGetErrorString)               \
    X(cuCtxGetApiVersion)             \
    X(cuGetProcAddress)               \
    X(cuGetProcAddress_v2)
#define ALIAS(n) extern __typeof__(n) stub_local_##n __attribute__((alias(#n), visibility("hidden")));
STUB_SYMS(ALIAS)
#undef ALIAS
#define COPY_ALIAS(name, params, args, stream, bytes, kind) ALIAS(name)
#define ALIAS(n)                                            extern __typeof__(n) stub_local_##n __attribute__((alias(#n), visibility("hidden")));
HK_COPIES(COPY_ALIAS)
#undef ALIAS
#define S(n)                                            {#n, (void *)&stub_local_##n},
#define COPY_S(name, params, args, stream, bytes, kind) S(name)
static const stub_sym g_syms[] = {STUB_SYMS(S) HK_COPIES(COPY_S)};
#undef S
#undef COPY_S
#undef COPY_ALIAS

static void *find_sym(const char *name) {
    for (size_t i = 0; i < sizeof g_syms / sizeof g_syms[0]; i++)
        if (!strcmp(g_syms[i].name, name)) return g_syms[i].fn;
    return NULL;
}

/* The variant a caller built against `ver` gets: _ptsz for per-thread default stream,
 * the newest _vN that existed in `ver` (v2 of the 3.2-era APIs; a few are newer). */
static void *resolve(const char *symbol, int ver, cuuint64_t flags) {
    char buf[128];
    int v2_since = 3020;
    if (!strcmp(symbol, "cuGetProcAddress"))
        v2_since = 12000;
    else if (!strcmp(symbol, "cuDeviceGetUuid"))
        v2_since = 11040;
    else if (!strcmp(symbol, "cuEventElapsedTime"))
        v2_since = 12080;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        /* synchronous calls have _ptds variants, stream-taking ones _ptsz, after any _v2 */
        static const char *const forms[] = {"%s_v2_ptds", "%s_v2_ptsz", "%s_ptds", "%s_ptsz"};
        for (int i = ver >= v2_since ? 0 : 2; i < 4; i++) {
            snprintf(buf, sizeof buf, forms[i], symbol);
            void *p = find_sym(buf);
            if (p) return p;
        }
    }
    if (ver >= v2_since) {
        snprintf(buf, sizeof buf, "%s_v2", symbol);
        void *p = find_sym(buf);
        if (p) return p;
    }
    return find_sym(symbol);
}

STUB_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    void *p = resolve(symbol, ver, flags);
    *pfn = p;
    if (status) *status = p ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return p ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

STUB_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, ver, flags, NULL);
}
