/* ascend_runtime_stub.c - a stub CANN runtime (libruntime.so): the rt* layer and a simulated NPU.
 *
 * For machines without an NPU: hookcore's Ascend shim (libvnpu.so) and the driver's workloads run
 * against this library and its partner libascendcl.so (acl_stub.c). It answers the rt* calls
 * libvnpu polices or uses, with the prototypes of CANN's runtime headers (written from the public
 * headers of the open-source CANN runtime; no Huawei code is used), for the NPUs a container sees.
 *
 * NPUs: HOOKCORE_STUB_NPUS (ascend_devices.h), in container order (the driver writes only the
 * claim's NPUs, numbered from 0). ASCEND_RT_VISIBLE_DEVICES, as the real runtime, selects and
 * orders them: a comma list of indices into that list (the first bad or repeated entry ends it).
 * Device i's physical ID is its `phy` key (what rtGetDevicePhyIdByIndex and
 * aclrtGetPhyDevIdByLogicDevId answer).
 *
 * Memory: each device has `memory` bytes; allocations are counted and refused past it with
 * ACL_ERROR_RT_MEMORY_ALLOCATION (207001), as the real runtime refuses device OOM. A device
 * pointer is a small host block carrying its size and device (never dereferenced by callers).
 *
 * Time: each device is one engine. The duration in microseconds of submitted work is the value of
 * the handle it is submitted with: a kernel's stub function or function handle, a model's
 * rtModel_t (aclmdl model IDs and aclmdlRI handles likewise). Work starts when both the engine
 * and its stream are free; events complete when the wall clock passes their time, and
 * rt/aclrtEventElapsedTime report that time, so the compute limiter can be measured on it.
 * Stream capture (aclmdlRICaptureBegin/End through the engine table): work submitted to a
 * capturing stream is recorded, not run; the captured model's handle is the captured microseconds.
 * Recording an event on a capturing stream is refused (ACL_ERROR_RT_EVENT_CAPTURED).
 * A device reset (aclrtResetDevice, rtDeviceReset) takes the streams and events made on it by the
 * process: every later call on one returns ACL_ERROR_RT_PARAM_INVALID (a query too).
 *
 * The engine is also reachable through stubNpuEngine() (not a CANN symbol): libascendcl.so uses
 * it in the "fused" layout (HOOKCORE_STUB_ACL_LAYOUT=fused), where its aclrt* calls reach the
 * engine without going through any rt* symbol -- as in the open-source CANN runtime, whose
 * aclrt*Impl functions live in libruntime.so linked -Bsymbolic. Test-only extras:
 * stubNpuUsedBytes(dev), stubNpuLaunchCount(), stubNpuCount().
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ascend_devices.h"
#include "ascend_stub_engine.h"

#define RT_API __attribute__((visibility("default")))

static asd_device g_desc[ASD_MAX_DEVICES];
static int g_ndesc;
static int g_map[ASD_MAX_DEVICES]; /* logical device -> description index */
static int g_ndev;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

typedef struct npu_stream {
    int dev;
    unsigned gen; /* the device's resets when it was made (a created stream dies with a reset) */
    int64_t last_end_ns;
    int capturing;
    int64_t captured_ns;
} npu_stream;

typedef struct npu_event {
    int64_t t_ns;
    int dev;      /* the current device when it was made (-1: none) ... */
    unsigned gen; /* ... and its resets then: a reset since takes it */
} npu_event;

/* One lock for the engine's shared state (busy_until_ns, used, g_launches): a stub, not a hot path. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int64_t busy_until_ns;
    uint64_t used;
    npu_stream default_stream;
    unsigned gen; /* resets so far */
} g_dev[ASD_MAX_DEVICES];

static uint64_t g_launches;
static __thread int t_dev = -1;

#define ALLOC_MAGIC 0x4e50554d454d0001ULL /* "NPUMEM" */
typedef struct npu_alloc {
    uint64_t magic;
    uint64_t size;
    int dev;
    int physical;
} npu_alloc;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Wait for the simulated clock to reach t: sleep, then spin (yielding) the last 200 us, so a
   synchronous call returns when its work is done, as a device's completion does, rather than a
   scheduler tick later. */
static void sleep_until(int64_t t) {
    for (;;) {
        int64_t d = t - now_ns();
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
    g_ndesc = asd_from_env(g_desc, ASD_MAX_DEVICES);
    const char *vis = getenv("ASCEND_RT_VISIBLE_DEVICES");
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
    for (int i = 0; i < g_ndev; i++) g_dev[i].default_stream.dev = i;
}

static inline void ready(void) { pthread_once(&g_once, load); }

/* ---------------------------------------------------------------------------
 * The engine (hidden; exported only through stubNpuEngine())
 * ------------------------------------------------------------------------- */
static int e_set_device(int32_t dev) {
    ready();
    if (dev < 0 || dev >= g_ndev) return ACL_ERROR_RT_INVALID_DEVICEID;
    t_dev = dev;
    return 0;
}

static int e_get_device(int32_t *dev) {
    ready();
    if (!dev) return ACL_ERROR_RT_PARAM_INVALID;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    *dev = t_dev;
    return 0;
}

static int e_reset_device(int32_t dev) {
    ready();
    if (dev < 0 || dev >= g_ndev) return ACL_ERROR_RT_INVALID_DEVICEID;
    if (t_dev == dev) t_dev = -1;
    pthread_mutex_lock(&g_lock);
    g_dev[dev].gen++;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

static int e_device_count(uint32_t *n) {
    ready();
    if (!n) return ACL_ERROR_RT_PARAM_INVALID;
    *n = (uint32_t)g_ndev;
    return 0;
}

static int e_phy_id(uint32_t dev, uint32_t *phy) {
    ready();
    if (!phy) return ACL_ERROR_RT_PARAM_INVALID;
    if (dev >= (uint32_t)g_ndev) return ACL_ERROR_RT_INVALID_DEVICEID;
    *phy = (uint32_t)asd_get_int(&g_desc[g_map[dev]], "phy", g_map[dev]);
    return 0;
}

static int e_malloc(void **ptr, uint64_t size, int physical) {
    ready();
    if (!ptr || size == 0) return ACL_ERROR_RT_PARAM_INVALID;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    int d = t_dev;
    uint64_t cap = g_desc[g_map[d]].memory;
    npu_alloc *a = malloc(sizeof *a);
    if (!a) return ACL_ERROR_RT_MEMORY_ALLOCATION;
    pthread_mutex_lock(&g_lock);
    int fits = size <= cap && g_dev[d].used <= cap - size;
    if (fits) g_dev[d].used += size;
    pthread_mutex_unlock(&g_lock);
    if (!fits) {
        free(a);
        return ACL_ERROR_RT_MEMORY_ALLOCATION;
    }
    *a = (npu_alloc){ALLOC_MAGIC, size, d, physical};
    *ptr = a;
    return 0;
}

static int e_free(void *ptr, int physical) {
    ready();
    npu_alloc *a = ptr;
    if (!a || a->magic != ALLOC_MAGIC || a->physical != physical) return ACL_ERROR_RT_PARAM_INVALID;
    a->magic = 0;
    pthread_mutex_lock(&g_lock);
    g_dev[a->dev].used -= a->size;
    pthread_mutex_unlock(&g_lock);
    free(a);
    return 0;
}

static int e_mem_info(size_t *free_b, size_t *total_b) {
    ready();
    if (!free_b || !total_b) return ACL_ERROR_RT_PARAM_INVALID;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    uint64_t cap = g_desc[g_map[t_dev]].memory;
    pthread_mutex_lock(&g_lock);
    uint64_t used = g_dev[t_dev].used;
    pthread_mutex_unlock(&g_lock);
    *total_b = cap;
    *free_b = used < cap ? cap - used : 0;
    return 0;
}

static npu_stream *stream_of(void *s) {
    if (s) return s;
    return t_dev < 0 ? NULL : &g_dev[t_dev].default_stream;
}

/* A created stream or an event that a reset of its device took (the default stream lives on). */
static int stream_dead(void *s) {
    const npu_stream *st = s;
    return st && st->dev >= 0 && st->gen != g_dev[st->dev].gen;
}
static int event_dead(void *e) {
    const npu_event *ev = e;
    return ev->dev >= 0 && ev->gen != g_dev[ev->dev].gen;
}

static int e_stream_create(void **s) {
    ready();
    if (!s) return ACL_ERROR_RT_PARAM_INVALID;
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    npu_stream *st = calloc(1, sizeof *st);
    if (!st) return ACL_ERROR_RT_MEMORY_ALLOCATION;
    st->dev = t_dev;
    st->gen = g_dev[t_dev].gen;
    *s = st;
    return 0;
}

static int e_stream_destroy(void *s) {
    if (s) free(s);
    return 0;
}

static int e_stream_sync(void *s) {
    npu_stream *st = stream_of(s);
    if (!st) return ACL_ERROR_RT_CONTEXT_NULL;
    sleep_until(st->last_end_ns);
    return 0;
}

static int e_device_sync(void) {
    if (t_dev < 0) return ACL_ERROR_RT_CONTEXT_NULL;
    pthread_mutex_lock(&g_lock);
    int64_t busy = g_dev[t_dev].busy_until_ns;
    pthread_mutex_unlock(&g_lock);
    sleep_until(busy);
    return 0;
}

/* Queue work of `us` microseconds on the stream: it starts when the engine and the stream are free. */
static int e_submit(void *s, uint64_t us) {
    ready();
    npu_stream *st = stream_of(s);
    if (!st) return ACL_ERROR_RT_CONTEXT_NULL;
    if (stream_dead(s)) return ACL_ERROR_RT_PARAM_INVALID;
    int64_t dur = (int64_t)us * 1000;
    pthread_mutex_lock(&g_lock);
    g_launches++;
    if (st->capturing) {
        st->captured_ns += dur;
    } else {
        int64_t now = now_ns(), busy = g_dev[st->dev].busy_until_ns;
        int64_t start = busy > now ? busy : now;
        if (st->last_end_ns > start) start = st->last_end_ns;
        g_dev[st->dev].busy_until_ns = st->last_end_ns = start + dur;
    }
    pthread_mutex_unlock(&g_lock);
    return 0;
}

static int e_capture_begin(void *s) {
    npu_stream *st = stream_of(s);
    if (!st) return ACL_ERROR_RT_CONTEXT_NULL;
    if (st->capturing) return ACL_ERROR_RT_STREAM_CAPTURED;
    st->capturing = 1;
    st->captured_ns = 0;
    return 0;
}

static int e_capture_end(void *s, uint64_t *captured_us) {
    npu_stream *st = stream_of(s);
    if (!st) return ACL_ERROR_RT_CONTEXT_NULL;
    if (!st->capturing) return ACL_ERROR_RT_STREAM_NOT_CAPTURED;
    st->capturing = 0;
    uint64_t us = (uint64_t)(st->captured_ns / 1000);
    if (captured_us) *captured_us = us ? us : 1;
    return 0;
}

static int e_capturing(void *s) {
    npu_stream *st = stream_of(s);
    return st && st->capturing;
}

static int e_event_create(void **e) {
    if (!e) return ACL_ERROR_RT_PARAM_INVALID;
    npu_event *ev = malloc(sizeof *ev);
    if (!ev) return ACL_ERROR_RT_MEMORY_ALLOCATION;
    ev->t_ns = -1;
    ev->dev = t_dev;
    ev->gen = t_dev >= 0 ? g_dev[t_dev].gen : 0;
    *e = ev;
    return 0;
}

static int e_event_destroy(void *e) {
    if (e && event_dead(e)) return ACL_ERROR_RT_PARAM_INVALID; /* went with its device's reset */
    free(e);
    return 0;
}

static int e_event_record(void *e, void *s) {
    npu_stream *st = stream_of(s);
    if (!e) return ACL_ERROR_RT_PARAM_INVALID;
    if (!st) return ACL_ERROR_RT_CONTEXT_NULL;
    if (event_dead(e) || stream_dead(s)) return ACL_ERROR_RT_PARAM_INVALID;
    if (st->capturing) return ACL_ERROR_RT_EVENT_CAPTURED;
    int64_t now = now_ns();
    ((npu_event *)e)->t_ns = st->last_end_ns > now ? st->last_end_ns : now;
    return 0;
}

/* 1 done, 0 not yet, -1 taken by a reset */
static int e_event_done(void *e) {
    if (event_dead(e)) return -1;
    int64_t t = ((npu_event *)e)->t_ns;
    return t < 0 || now_ns() >= t;
}

static int e_event_sync(void *e) {
    if (!e || event_dead(e)) return ACL_ERROR_RT_PARAM_INVALID;
    sleep_until(((npu_event *)e)->t_ns);
    return 0;
}

static int e_event_elapsed(float *ms, void *a, void *b) {
    if (!ms || !a || !b || event_dead(a) || event_dead(b)) return ACL_ERROR_RT_PARAM_INVALID;
    int64_t ta = ((npu_event *)a)->t_ns, tb = ((npu_event *)b)->t_ns;
    if (ta < 0 || tb < 0) return ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID;
    if (now_ns() < ta || now_ns() < tb) return ACL_ERROR_RT_EVENT_NOT_COMPLETE;
    *ms = (float)(tb - ta) / 1e6f;
    return 0;
}

static const stub_npu_engine g_engine = {
    .set_device = e_set_device,
    .get_device = e_get_device,
    .reset_device = e_reset_device,
    .device_count = e_device_count,
    .phy_id = e_phy_id,
    .malloc = e_malloc,
    .free = e_free,
    .mem_info = e_mem_info,
    .stream_create = e_stream_create,
    .stream_destroy = e_stream_destroy,
    .stream_sync = e_stream_sync,
    .device_sync = e_device_sync,
    .submit = e_submit,
    .capture_begin = e_capture_begin,
    .capture_end = e_capture_end,
    .capturing = e_capturing,
    .event_create = e_event_create,
    .event_destroy = e_event_destroy,
    .event_record = e_event_record,
    .event_done = e_event_done,
    .event_sync = e_event_sync,
    .event_elapsed = e_event_elapsed,
};

RT_API const stub_npu_engine *stubNpuEngine(void) { return &g_engine; }
RT_API unsigned long long stubNpuUsedBytes(int dev) {
    ready();
    pthread_mutex_lock(&g_lock);
    unsigned long long used = dev >= 0 && dev < g_ndev ? g_dev[dev].used : 0;
    pthread_mutex_unlock(&g_lock);
    return used;
}
RT_API unsigned long long stubNpuLaunchCount(void) {
    pthread_mutex_lock(&g_lock);
    unsigned long long n = g_launches;
    pthread_mutex_unlock(&g_lock);
    return n;
}
RT_API int stubNpuCount(void) {
    ready();
    return g_ndev;
}

/* ---------------------------------------------------------------------------
 * The rt* API (CANN runtime prototypes)
 * ------------------------------------------------------------------------- */
typedef int32_t rtError_t;
typedef void *rtStream_t;
typedef void *rtEvent_t;
typedef void *rtModel_t;
typedef void *rtDrvMemHandle;

RT_API rtError_t rtSetDevice(int32_t dev) { return e_set_device(dev); }
RT_API rtError_t rtGetDevice(int32_t *dev) { return e_get_device(dev); }
RT_API rtError_t rtDeviceReset(int32_t dev) { return e_reset_device(dev); }
RT_API rtError_t rtGetDeviceCount(int32_t *n) {
    uint32_t c = 0;
    rtError_t r = e_device_count(&c);
    if (r == 0 && n) *n = (int32_t)c;
    return n ? r : ACL_ERROR_RT_PARAM_INVALID;
}
RT_API rtError_t rtGetDevicePhyIdByIndex(uint32_t dev, uint32_t *phy) { return e_phy_id(dev, phy); }

RT_API rtError_t rtMalloc(void **ptr, uint64_t size, int type, const uint16_t module) {
    (void)type;
    (void)module;
    return e_malloc(ptr, size, 0);
}
RT_API rtError_t rtMallocCached(void **ptr, uint64_t size, int type, const uint16_t module) {
    (void)type;
    (void)module;
    return e_malloc(ptr, size, 0);
}
RT_API rtError_t rtsMalloc(void **ptr, uint64_t size, int policy, int advise, void *cfg) {
    (void)policy;
    (void)advise;
    (void)cfg;
    return e_malloc(ptr, size, 0);
}
RT_API rtError_t rtFree(void *ptr) { return e_free(ptr, 0); }
RT_API rtError_t rtsFree(void *ptr) { return e_free(ptr, 0); }
RT_API rtError_t rtFreeWithDevSync(void *ptr) {
    e_device_sync();
    return e_free(ptr, 0);
}
RT_API rtError_t rtMallocPhysical(rtDrvMemHandle *handle, size_t size, void *prop, uint64_t flags) {
    (void)prop;
    (void)flags;
    return e_malloc(handle, size, 1);
}
RT_API rtError_t rtFreePhysical(rtDrvMemHandle handle) { return e_free(handle, 1); }
RT_API rtError_t rtMemGetInfoEx(int type, size_t *free_b, size_t *total_b) {
    (void)type;
    return e_mem_info(free_b, total_b);
}

RT_API rtError_t rtStreamCreate(rtStream_t *s, int32_t priority) {
    (void)priority;
    return e_stream_create(s);
}
RT_API rtError_t rtStreamDestroy(rtStream_t s) { return e_stream_destroy(s); }
RT_API rtError_t rtStreamSynchronize(rtStream_t s) { return e_stream_sync(s); }

RT_API rtError_t rtEventCreate(rtEvent_t *e) { return e_event_create(e); }
RT_API rtError_t rtEventDestroy(rtEvent_t e) { return e_event_destroy(e); }
RT_API rtError_t rtEventRecord(rtEvent_t e, rtStream_t s) { return e_event_record(e, s); }
RT_API rtError_t rtEventQuery(rtEvent_t e) {
    if (!e) return ACL_ERROR_RT_PARAM_INVALID;
    int d = e_event_done(e);
    return d < 0 ? ACL_ERROR_RT_PARAM_INVALID : d ? 0 : ACL_ERROR_RT_EVENT_NOT_COMPLETE;
}
RT_API rtError_t rtEventSynchronize(rtEvent_t e) { return e_event_sync(e); }
RT_API rtError_t rtEventElapsedTime(float *ms, rtEvent_t a, rtEvent_t b) { return e_event_elapsed(ms, a, b); }

RT_API rtError_t rtKernelLaunch(const void *stub_func, uint32_t blocks, void *args, uint32_t args_size, void *sm,
                                rtStream_t s) {
    (void)blocks;
    (void)args;
    (void)args_size;
    (void)sm;
    return e_submit(s, (uint64_t)(uintptr_t)stub_func);
}
RT_API rtError_t rtKernelLaunchWithHandleV2(void *hdl, const uint64_t tiling_key, uint32_t blocks, void *args, void *sm,
                                            rtStream_t s, const void *cfg) {
    (void)tiling_key;
    (void)blocks;
    (void)args;
    (void)sm;
    (void)cfg;
    return e_submit(s, (uint64_t)(uintptr_t)hdl);
}
RT_API rtError_t rtKernelLaunchWithFlagV2(const void *stub_func, uint32_t blocks, void *args, void *sm, rtStream_t s,
                                          uint32_t flags, const void *cfg) {
    (void)blocks;
    (void)args;
    (void)sm;
    (void)flags;
    (void)cfg;
    return e_submit(s, (uint64_t)(uintptr_t)stub_func);
}
RT_API rtError_t rtModelExecute(rtModel_t model, rtStream_t s, uint32_t flag) {
    (void)flag;
    return e_submit(s, (uint64_t)(uintptr_t)model);
}
