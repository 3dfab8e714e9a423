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
 * so the stub runs out of memory at the device size like a real GPU would. Device pointers of
 * cuMemAlloc, pitch and managed belong to the context current when they were made: a destroyed
 * context, or a primary context released or reset, takes them (pools, VMM and arrays stay).
 *
 * Time: each device is simulated as one engine. A kernel's duration in microseconds is
 * the value of its CUfunction handle (tests pass (CUfunction)(uintptr_t)us); a graph's
 * is the value of its CUgraphExec handle. Launches queue behind each other on the
 * device; events complete when the simulated clock passes their time, and
 * cuEventElapsedTime reports simulated time. That is enough to test the compute limiter.
 *
 * Contexts: cuCtxCreate_v2/v3/v4 make a context of their own (current, as the driver does), each
 * taking STUB_CONTEXT_MEMORY bytes of device memory (default 0); cuCtxSetLimit/GetLimit remember
 * values. A destroyed context's handle is handed out again by the next create, and a primary context
 * reset or released comes back under its handle, as a real driver's may: an event belongs to the
 * context instance current when it was made, and once that instance is gone every call on the event
 * returns CUDA_ERROR_CONTEXT_IS_DESTROYED, whatever context the handle names now. A destroyed stream
 * is kept (its handle is not handed out again), and an event recorded on it is refused with
 * CUDA_ERROR_INVALID_HANDLE.
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
 * cuDeviceGetAttribute, cuStreamGetCtx or cuCtxDestroy_v2 return that CUresult; HOOKCORE_STUB_EXEC_AFFINITY_SMS=<n>
 * makes cuCtxGetExecAffinity report n SMs whatever the context has (a driver answering 0, or more
 * than the device). VMM export/import/retain, pool attributes and graph memory nodes are answered without
 * modelling the memory behind them (what the shim charges is what the tests check).
 *
 * Test-only extras (not CUDA API): stubCudaUsedBytes(dev) and stubCudaLaunchCount().
 *
 * This file holds the state, devices and contexts; cuda_stub.h lists the stub's other files.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cuda_stub.h"

#define STUB_MAX_ALLOCS 65536

/* ---------------------------------------------------------------------------
 * State
 * ------------------------------------------------------------------------- */
typedef struct stub_alloc {
    unsigned long long key; /* device pointer, VMM handle or array handle; 0 = free */
    size_t size;
    int dev;
    CUcontext ctx; /* stub_take_in_context: the context it dies with */
} stub_alloc;

int g_ndev = -1;
stub_device g_dev[STUB_MAX_DEVICES];
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static stub_alloc g_alloc[STUB_MAX_ALLOCS];
static unsigned long long g_next_addr[STUB_MAX_DEVICES];
unsigned long long g_next_handle = 0x10000;
static __thread int t_cur_dev = -1;  /* current context's device, -1 = none */
static __thread CUcontext t_cur_ctx; /* the current context's handle (primary: &g_dev[i]) */
static _Atomic unsigned g_serial;    /* context instances made */
static stub_ctx *g_free_ctx;         /* destroyed contexts' handles, handed out again (g_lock) */

stub_stream g_default_stream[STUB_MAX_DEVICES];

int64_t stub_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void stub_sleep_until(int64_t t_ns) {
    for (;;) {
        int64_t d = t_ns - stub_now_ns();
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
static CUresult take(int dev, size_t size, unsigned long long *key_out, int is_handle, CUcontext ctx) {
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
    g_alloc[slot] = (stub_alloc){key, rounded, dev, ctx};
    hk_atomic_store_seq_cst(&g_dev[dev].used, used + rounded);
    pthread_mutex_unlock(&g_lock);
    *key_out = key;
    return CUDA_SUCCESS;
}

CUresult stub_take(int dev, size_t size, unsigned long long *key_out, int is_handle) {
    return take(dev, size, key_out, is_handle, NULL);
}
CUresult stub_take_in_context(int dev, size_t size, unsigned long long *key_out, int is_handle) {
    return take(dev, size, key_out, is_handle, stub_cur_ctx());
}

void stub_context_memory_gone(CUcontext ctx) {
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < STUB_MAX_ALLOCS; i++)
        if (g_alloc[i].key && g_alloc[i].ctx == ctx) {
            hk_atomic_sub_seq_cst(&g_dev[g_alloc[i].dev].used, g_alloc[i].size);
            g_alloc[i].key = 0;
        }
    pthread_mutex_unlock(&g_lock);
}

CUresult stub_give(unsigned long long key) {
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

int stub_cur_dev(void) {
    if (g_ndev < 0) return -1;
    return t_cur_dev;
}

/* HOOKCORE_STUB_CUDA_FAIL=call=code,...: the CUresult `call` is told to return, or 0. */
CUresult stub_fail(const char *call) {
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
unsigned stub_ctx_sms(CUcontext c) {
    stub_device *d = (stub_device *)c;
    if (d >= g_dev && d < g_dev + g_ndev) {
        if (d->primary_sms == 0) d->primary_sms = mps_sms((int)(d - g_dev));
        return d->primary_sms;
    }
    return ((stub_ctx *)c)->sms;
}

unsigned stub_ctx_serial(CUcontext c) {
    stub_device *d = (stub_device *)c;
    if (d >= g_dev && d < g_dev + g_ndev) return d->primary_serial;
    return ((stub_ctx *)c)->serial; /* destroyed handles are kept (free list): always readable */
}

CUcontext stub_cur_ctx(void) {
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
    stub_ctx_sms(*ctx); /* made now, if it was not */
    return CUDA_SUCCESS;
}

/* Released (the stub keeps no count: as the last reference) or reset: the next use makes a new
   primary context, which reads the environment again. */
STUB_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    stub_context_memory_gone((CUcontext)&g_dev[dev]);
    g_dev[dev].primary_sms = 0;
    g_dev[dev].primary_serial = hk_atomic_add_seq_cst(&g_serial, 1) + 1;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
/* Active once made (retained or used) and until released or reset (the stub keeps no count). */
STUB_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    NEED_INIT();
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = g_dev[dev].primary_sms != 0;
    return CUDA_SUCCESS;
}
STUB_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
STUB_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

STUB_API CUresult cuCtxGetExecAffinity(CUexecAffinityParam *p, CUexecAffinityType type) {
    NEED_INIT();
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUcontext c = stub_cur_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    CUresult f = stub_fail("cuCtxGetExecAffinity");
    if (f != CUDA_SUCCESS) return f;
    const char *forced = getenv("HOOKCORE_STUB_EXEC_AFFINITY_SMS");
    p->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    p->param.smCount.val = forced ? (unsigned)strtoul(forced, NULL, 10) : stub_ctx_sms(c);
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

/* The context stack, as deep as the tests need. */
static __thread CUcontext t_ctx_stack[8];
static __thread int t_ctx_depth;

STUB_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    NEED_INIT();
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    if (t_ctx_depth == (int)(sizeof t_ctx_stack / sizeof t_ctx_stack[0])) return CUDA_ERROR_OUT_OF_MEMORY;
    CUcontext prev = t_cur_ctx;
    CUresult r = cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS) t_ctx_stack[t_ctx_depth++] = prev;
    return r;
}

STUB_API CUresult cuCtxPopCurrent_v2(CUcontext *ctx) {
    NEED_INIT();
    if (!t_cur_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx) *ctx = t_cur_ctx;
    return cuCtxSetCurrent(t_ctx_depth ? t_ctx_stack[--t_ctx_depth] : NULL);
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
    pthread_mutex_lock(&g_lock);
    stub_ctx *c = g_free_ctx;
    if (c) g_free_ctx = c->next;
    pthread_mutex_unlock(&g_lock);
    if (!c && !(c = calloc(1, sizeof *c))) return CUDA_ERROR_OUT_OF_MEMORY;
    c->serial = hk_atomic_add_seq_cst(&g_serial, 1) + 1;
    c->next = NULL;
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
    CUresult f = stub_fail("cuCtxDestroy_v2"); /* a destruction the driver refuses: the context stays */
    if (f != CUDA_SUCCESS) return f;
    stub_ctx *c = (stub_ctx *)ctx;
    if (!c || c->magic != STUB_CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
    hk_atomic_sub_seq_cst(&g_dev[c->dev].used, ctx_memory());
    stub_context_memory_gone(ctx);
    c->magic = 0;
    c->serial = 0; /* its events are dead from now on */
    if (t_cur_ctx == ctx) {
        t_cur_ctx = NULL;
        t_cur_dev = -1;
    }
    pthread_mutex_lock(&g_lock);
    c->next = g_free_ctx;
    g_free_ctx = c;
    pthread_mutex_unlock(&g_lock);
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
        stub_sleep_until(hk_atomic_load_seq_cst(&g_dev[d].busy_until_ns));
    return CUDA_SUCCESS;
}

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

/* This file's part of cuGetProcAddress's table (cuda_stub.h). */
#define SYMS(X)                     \
    X(cuInit)                       \
    X(cuDriverGetVersion)           \
    X(cuDeviceGetCount)             \
    X(cuDeviceGet)                  \
    X(cuDeviceGetName)              \
    X(cuDeviceGetUuid)              \
    X(cuDeviceGetUuid_v2)           \
    X(cuDeviceTotalMem_v2)          \
    X(cuDeviceGetAttribute)         \
    X(cuDevicePrimaryCtxRetain)     \
    X(cuDevicePrimaryCtxRelease_v2) \
    X(cuDevicePrimaryCtxRelease)    \
    X(cuDevicePrimaryCtxReset_v2)   \
    X(cuDevicePrimaryCtxReset)      \
    X(cuDevicePrimaryCtxGetState)   \
    X(cuCtxGetExecAffinity)         \
    X(cuCtxSetCurrent)              \
    X(cuCtxGetCurrent)              \
    X(cuCtxPushCurrent_v2)          \
    X(cuCtxPopCurrent_v2)           \
    X(cuCtxGetDevice)               \
    X(cuCtxSynchronize)             \
    X(cuCtxCreate_v2)               \
    X(cuCtxCreate_v3)               \
    X(cuCtxCreate_v4)               \
    X(cuCtxDestroy_v2)              \
    X(cuCtxSetLimit)                \
    X(cuCtxGetLimit)                \
    X(cuGetErrorString)             \
    X(cuCtxGetApiVersion)
SYMS(STUB_ALIAS)
const stub_sym stub_syms_devices[] = {SYMS(STUB_SYM){NULL, NULL}};
#undef SYMS
