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
 * Test-only extras (not HIP API): stubHipUsedBytes(dev), stubHipLaunchCount(), stubHipCopyCount().
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

#include "hip_devices.h"

#define HIP_API __attribute__((visibility("default")))

typedef int hipError_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;

enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidResourceHandle = 400,
    hipErrorNotReady = 600,
    hipErrorStreamCaptureUnsupported = 900,
    hipErrorStreamCaptureUnmatched = 903,
};

typedef struct dim3 {
    uint32_t x, y, z;
} dim3;
typedef struct hipExtent {
    size_t width, height, depth;
} hipExtent;
typedef struct hipPitchedPtr {
    void *ptr;
    size_t pitch, xsize, ysize;
} hipPitchedPtr;
typedef struct hipChannelFormatDesc {
    int x, y, z, w, f;
} hipChannelFormatDesc;
typedef struct hipMemAllocationProp {
    int type, requestedHandleType;
    struct {
        int type, id;
    } location;
    void *win32HandleMetaData;
    unsigned char allocFlags[4];
} hipMemAllocationProp;

#define PITCH_ALIGN 256

static hd_device g_desc[HD_MAX_DEVICES];
static int g_ndesc;
static int g_map[HD_MAX_DEVICES]; /* ordinal -> description index */
static int g_ndev;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

typedef struct hip_stream {
    int dev;
    int64_t last_end_ns;
    int capturing;
    int64_t captured_ns;
} hip_stream;

typedef struct hip_event {
    int64_t t_ns;
} hip_event;

/* One lock for the engine's shared state: a stub, not a hot path. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int64_t busy_until_ns;
    uint64_t used;
    hip_stream null_stream;
} g_dev[HD_MAX_DEVICES];
static uint64_t g_launches, g_copies;
static __thread int t_dev; /* HIP: device 0 until hipSetDevice */

#define BLOCK_MAGIC 0x484950424c4b0001ULL /* "HIPBLK" */
enum { K_PTR = 1, K_ARRAY, K_PHYS };
typedef struct hip_block {
    uint64_t magic;
    uint64_t size;
    int dev, kind;
    int refs, maps; /* K_PHYS only */
} hip_block;

#define MAX_MAPS 1024
static struct {
    uintptr_t base, end;
    hip_block *phys;
} g_maps[MAX_MAPS];
static uintptr_t g_next_va = 0x7e0000000000ULL;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Wait for the clock to reach t: sleep, then spin (yielding) the last 200 us, so a synchronous
   call returns when its work is done, as a device's completion does. */
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

static inline void ready(void) { pthread_once(&g_once, load); }

static int current(void) {
    ready();
    return t_dev < g_ndev ? t_dev : -1;
}

/* ---------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------- */
HIP_API hipError_t hipInit(unsigned int flags) {
    (void)flags;
    ready();
    return g_ndev ? hipSuccess : hipErrorNoDevice;
}

HIP_API hipError_t hipGetDeviceCount(int *n) {
    ready();
    if (!n) return hipErrorInvalidValue;
    *n = g_ndev;
    return g_ndev ? hipSuccess : hipErrorNoDevice;
}

HIP_API hipError_t hipSetDevice(int dev) {
    ready();
    if (dev < 0 || dev >= g_ndev) return hipErrorInvalidDevice;
    t_dev = dev;
    return hipSuccess;
}

HIP_API hipError_t hipGetDevice(int *dev) {
    if (!dev) return hipErrorInvalidValue;
    if (current() < 0) return hipErrorNoDevice;
    *dev = t_dev;
    return hipSuccess;
}

HIP_API hipError_t hipDeviceGetPCIBusId(char *out, int len, int dev) {
    ready();
    if (!out || len <= 0) return hipErrorInvalidValue;
    if (dev < 0 || dev >= g_ndev) return hipErrorInvalidDevice;
    snprintf(out, (size_t)len, "%s", g_desc[g_map[dev]].pci);
    return hipSuccess;
}

HIP_API hipError_t hipDeviceGetName(char *out, int len, int dev) {
    ready();
    if (!out || len <= 0) return hipErrorInvalidValue;
    if (dev < 0 || dev >= g_ndev) return hipErrorInvalidDevice;
    snprintf(out, (size_t)len, "%s", g_desc[g_map[dev]].name);
    return hipSuccess;
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
 * Memory
 * ------------------------------------------------------------------------- */
static hipError_t block_new(int dev, uint64_t size, int kind, hip_block **out) {
    if (size == 0) return hipErrorInvalidValue;
    if (dev < 0 || dev >= g_ndev) return hipErrorInvalidDevice;
    uint64_t cap = g_desc[g_map[dev]].memory;
    hip_block *b = malloc(sizeof *b);
    if (!b) return hipErrorOutOfMemory;
    pthread_mutex_lock(&g_lock);
    int fits = size <= cap && g_dev[dev].used <= cap - size;
    if (fits) g_dev[dev].used += size;
    pthread_mutex_unlock(&g_lock);
    if (!fits) {
        free(b);
        return hipErrorOutOfMemory;
    }
    *b = (hip_block){BLOCK_MAGIC, size, dev, kind, kind == K_PHYS, 0};
    *out = b;
    return hipSuccess;
}

static void block_free(hip_block *b) {
    b->magic = 0;
    pthread_mutex_lock(&g_lock);
    g_dev[b->dev].used -= b->size;
    pthread_mutex_unlock(&g_lock);
    free(b);
}

static hip_block *block_of(void *p, int kind) {
    hip_block *b = p;
    return b && b->magic == BLOCK_MAGIC && b->kind == kind ? b : NULL;
}

static hipError_t alloc_ptr(void **p, uint64_t size) {
    if (!p) return hipErrorInvalidValue;
    hip_block *b;
    hipError_t r = block_new(current(), size, K_PTR, &b);
    if (r == hipSuccess) *p = b;
    return r;
}

HIP_API hipError_t hipMalloc(void **p, size_t size) { return alloc_ptr(p, size); }
HIP_API hipError_t hipMallocManaged(void **p, size_t size, unsigned int flags) {
    (void)flags;
    return alloc_ptr(p, size);
}
HIP_API hipError_t hipExtMallocWithFlags(void **p, size_t size, unsigned int flags) {
    (void)flags;
    return alloc_ptr(p, size);
}
HIP_API hipError_t hipMallocAsync(void **p, size_t size, hipStream_t s) {
    (void)s;
    return alloc_ptr(p, size);
}
HIP_API hipError_t hipMallocFromPoolAsync(void **p, size_t size, void *pool, hipStream_t s) {
    (void)pool;
    (void)s;
    return alloc_ptr(p, size);
}

static size_t pitch_of(size_t width) { return (width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN; }

HIP_API hipError_t hipMallocPitch(void **p, size_t *pitch, size_t width, size_t height) {
    if (!pitch) return hipErrorInvalidValue;
    hipError_t r = alloc_ptr(p, (uint64_t)pitch_of(width) * height);
    if (r == hipSuccess) *pitch = pitch_of(width);
    return r;
}

HIP_API hipError_t hipMemAllocPitch(void **p, size_t *pitch, size_t width, size_t height, unsigned int elem) {
    (void)elem;
    return hipMallocPitch(p, pitch, width, height);
}

HIP_API hipError_t hipMalloc3D(hipPitchedPtr *pp, hipExtent e) {
    if (!pp) return hipErrorInvalidValue;
    void *p = NULL;
    uint64_t rows = (uint64_t)(e.height ? e.height : 1) * (e.depth ? e.depth : 1);
    hipError_t r = alloc_ptr(&p, (uint64_t)pitch_of(e.width) * rows);
    if (r == hipSuccess) *pp = (hipPitchedPtr){p, pitch_of(e.width), e.width, e.height};
    return r;
}

static uint64_t element(const hipChannelFormatDesc *d) {
    int bits = d->x + d->y + d->z + d->w;
    return bits >= 8 ? (uint64_t)bits / 8 : 1;
}

static hipError_t alloc_array(void **a, const hipChannelFormatDesc *d, uint64_t elements) {
    if (!a || !d) return hipErrorInvalidValue;
    hip_block *b;
    hipError_t r = block_new(current(), element(d) * elements, K_ARRAY, &b);
    if (r == hipSuccess) *a = b;
    return r;
}

HIP_API hipError_t hipMallocArray(void **a, const hipChannelFormatDesc *d, size_t w, size_t h, unsigned int flags) {
    (void)flags;
    return alloc_array(a, d, (uint64_t)w * (h ? h : 1));
}

HIP_API hipError_t hipMalloc3DArray(void **a, const hipChannelFormatDesc *d, hipExtent e, unsigned int flags) {
    (void)flags;
    return alloc_array(a, d, (uint64_t)e.width * (e.height ? e.height : 1) * (e.depth ? e.depth : 1));
}

HIP_API hipError_t hipFree(void *p) {
    if (!p) return hipSuccess;
    hip_block *b = block_of(p, K_PTR);
    if (!b) return hipErrorInvalidValue;
    block_free(b);
    return hipSuccess;
}

HIP_API hipError_t hipFreeAsync(void *p, hipStream_t s) {
    (void)s;
    return hipFree(p);
}

HIP_API hipError_t hipFreeArray(void *a) {
    hip_block *b = block_of(a, K_ARRAY);
    if (!b) return hipErrorInvalidValue;
    block_free(b);
    return hipSuccess;
}

HIP_API hipError_t hipMemGetInfo(size_t *free_b, size_t *total_b) {
    int d = current();
    if (!free_b || !total_b) return hipErrorInvalidValue;
    if (d < 0) return hipErrorNoDevice;
    uint64_t cap = g_desc[g_map[d]].memory;
    pthread_mutex_lock(&g_lock);
    uint64_t used = g_dev[d].used;
    pthread_mutex_unlock(&g_lock);
    *total_b = cap;
    *free_b = used < cap ? cap - used : 0;
    return hipSuccess;
}

HIP_API hipError_t hipDeviceTotalMem(size_t *bytes, int dev) {
    ready();
    if (!bytes) return hipErrorInvalidValue;
    if (dev < 0 || dev >= g_ndev) return hipErrorInvalidDevice;
    *bytes = g_desc[g_map[dev]].memory;
    return hipSuccess;
}

/* --- virtual memory: physical allocations, address ranges, mappings --- */
static void phys_maybe_free(hip_block *b) {
    if (b->refs <= 0 && b->maps <= 0) block_free(b);
}

HIP_API hipError_t hipMemCreate(void **h, size_t size, const hipMemAllocationProp *prop, unsigned long long flags) {
    (void)flags;
    ready();
    if (!h || !prop || prop->location.type != 1) return hipErrorInvalidValue;
    hip_block *b;
    hipError_t r = block_new(prop->location.id, size, K_PHYS, &b);
    if (r == hipSuccess) *h = b;
    return r;
}

HIP_API hipError_t hipMemRelease(void *h) {
    pthread_mutex_lock(&g_lock);
    hip_block *b = block_of(h, K_PHYS);
    int ok = b && b->refs > 0;
    if (ok) b->refs--;
    pthread_mutex_unlock(&g_lock);
    if (!ok) return hipErrorInvalidValue;
    if (b->refs <= 0 && b->maps <= 0) block_free(b);
    return hipSuccess;
}

HIP_API hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t align, void *addr, unsigned long long flags) {
    (void)align;
    (void)addr;
    (void)flags;
    if (!ptr || size == 0) return hipErrorInvalidValue;
    pthread_mutex_lock(&g_lock);
    *ptr = (void *)g_next_va;
    g_next_va += (size + 0xFFFFF) & ~(uintptr_t)0xFFFFF;
    pthread_mutex_unlock(&g_lock);
    return hipSuccess;
}

HIP_API hipError_t hipMemAddressFree(void *ptr, size_t size) {
    (void)size;
    return ptr ? hipSuccess : hipErrorInvalidValue;
}

HIP_API hipError_t hipMemSetAccess(void *ptr, size_t size, const void *desc, size_t count) {
    (void)size;
    (void)desc;
    (void)count;
    return ptr ? hipSuccess : hipErrorInvalidValue;
}

HIP_API hipError_t hipMemMap(void *ptr, size_t size, size_t offset, void *h, unsigned long long flags) {
    (void)offset;
    (void)flags;
    hipError_t r = hipErrorInvalidValue;
    pthread_mutex_lock(&g_lock);
    hip_block *b = block_of(h, K_PHYS);
    for (int i = 0; b && ptr && i < MAX_MAPS; i++) {
        if (!g_maps[i].base) {
            g_maps[i].base = (uintptr_t)ptr;
            g_maps[i].end = (uintptr_t)ptr + size;
            g_maps[i].phys = b;
            b->maps++;
            r = hipSuccess;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

HIP_API hipError_t hipMemUnmap(void *ptr, size_t size) {
    uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
    hip_block *gone[MAX_MAPS];
    int ngone = 0, found = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_MAPS; i++) {
        if (!g_maps[i].base || g_maps[i].base < lo || g_maps[i].end > hi) continue;
        hip_block *b = g_maps[i].phys;
        g_maps[i].base = 0;
        found = 1;
        if (--b->maps <= 0 && b->refs <= 0) gone[ngone++] = b;
    }
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < ngone; i++) phys_maybe_free(gone[i]);
    return found ? hipSuccess : hipErrorInvalidValue;
}

HIP_API hipError_t hipMemRetainAllocationHandle(void **h, void *addr) {
    hipError_t r = hipErrorInvalidValue;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; h && i < MAX_MAPS; i++) {
        if (g_maps[i].base && (uintptr_t)addr >= g_maps[i].base && (uintptr_t)addr < g_maps[i].end) {
            g_maps[i].phys->refs++;
            *h = g_maps[i].phys;
            r = hipSuccess;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* ---------------------------------------------------------------------------
 * Streams, events, the engine
 * ------------------------------------------------------------------------- */
static hip_stream *stream_of(hipStream_t s) {
    if (s && s != (hipStream_t)2) return s; /* 2: hipStreamPerThread, served by the null stream here */
    int d = current();
    return d < 0 ? NULL : &g_dev[d].null_stream;
}

HIP_API hipError_t hipStreamCreate(hipStream_t *s) {
    int d = current();
    if (!s) return hipErrorInvalidValue;
    if (d < 0) return hipErrorNoDevice;
    hip_stream *st = calloc(1, sizeof *st);
    if (!st) return hipErrorOutOfMemory;
    st->dev = d;
    *s = st;
    return hipSuccess;
}

HIP_API hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned int flags) {
    (void)flags;
    return hipStreamCreate(s);
}

HIP_API hipError_t hipStreamDestroy(hipStream_t s) {
    if (s && s != (hipStream_t)2) free(s);
    return hipSuccess;
}

HIP_API hipError_t hipStreamSynchronize(hipStream_t s) {
    hip_stream *st = stream_of(s);
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    int64_t end = st->last_end_ns;
    pthread_mutex_unlock(&g_lock);
    sleep_until(end);
    return hipSuccess;
}

HIP_API hipError_t hipDeviceSynchronize(void) {
    int d = current();
    if (d < 0) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    int64_t busy = g_dev[d].busy_until_ns;
    pthread_mutex_unlock(&g_lock);
    sleep_until(busy);
    return hipSuccess;
}

/* Queue `ns` of work on the stream; start_out, end_out: when it runs (not set while capturing). */
static hipError_t submit(hipStream_t s, int64_t ns, int copy, int64_t *start_out, int64_t *end_out) {
    hip_stream *st = stream_of(s);
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    if (copy)
        g_copies++;
    else
        g_launches++;
    if (st->capturing) {
        st->captured_ns += ns;
    } else {
        int64_t now = now_ns(), busy = g_dev[st->dev].busy_until_ns;
        int64_t start = busy > now ? busy : now;
        if (st->last_end_ns > start) start = st->last_end_ns;
        g_dev[st->dev].busy_until_ns = st->last_end_ns = start + ns;
        if (start_out) *start_out = start;
        if (end_out) *end_out = start + ns;
    }
    pthread_mutex_unlock(&g_lock);
    return hipSuccess;
}

static hipError_t kernel(const void *handle, hipStream_t s, hipEvent_t start, hipEvent_t stop) {
    int64_t t0 = -1, t1 = -1;
    hipError_t r = submit(s, (int64_t)(uintptr_t)handle * 1000, 0, &t0, &t1);
    if (r == hipSuccess && start && t0 >= 0) ((hip_event *)start)->t_ns = t0;
    if (r == hipSuccess && stop && t1 >= 0) ((hip_event *)stop)->t_ns = t1;
    return r;
}

/* A copy or memset of `bytes`: asynchronous on `s`, or (sync) waited for. */
static hipError_t copy(hipStream_t s, uint64_t bytes, int sync) {
    int64_t end = -1;
    hipError_t r = submit(s, (int64_t)bytes, 1, NULL, &end);
    if (r == hipSuccess && sync && end >= 0) sleep_until(end);
    return r;
}

HIP_API hipError_t hipEventCreate(hipEvent_t *e) {
    if (!e) return hipErrorInvalidValue;
    hip_event *ev = malloc(sizeof *ev);
    if (!ev) return hipErrorOutOfMemory;
    ev->t_ns = -1;
    *e = ev;
    return hipSuccess;
}

HIP_API hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned int flags) {
    (void)flags;
    return hipEventCreate(e);
}

HIP_API hipError_t hipEventDestroy(hipEvent_t e) {
    free(e);
    return hipSuccess;
}

HIP_API hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
    hip_stream *st = stream_of(s);
    if (!e) return hipErrorInvalidResourceHandle;
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    int capturing = st->capturing;
    int64_t end = st->last_end_ns;
    pthread_mutex_unlock(&g_lock);
    if (capturing) return hipErrorStreamCaptureUnsupported;
    int64_t now = now_ns();
    ((hip_event *)e)->t_ns = end > now ? end : now;
    return hipSuccess;
}

HIP_API hipError_t hipEventQuery(hipEvent_t e) {
    if (!e) return hipErrorInvalidResourceHandle;
    int64_t t = ((hip_event *)e)->t_ns;
    return t < 0 || now_ns() >= t ? hipSuccess : hipErrorNotReady;
}

HIP_API hipError_t hipEventSynchronize(hipEvent_t e) {
    if (!e) return hipErrorInvalidResourceHandle;
    sleep_until(((hip_event *)e)->t_ns);
    return hipSuccess;
}

HIP_API hipError_t hipEventElapsedTime(float *ms, hipEvent_t a, hipEvent_t b) {
    if (!ms || !a || !b) return hipErrorInvalidValue;
    int64_t ta = ((hip_event *)a)->t_ns, tb = ((hip_event *)b)->t_ns;
    if (ta < 0 || tb < 0) return hipErrorInvalidResourceHandle;
    if (now_ns() < ta || now_ns() < tb) return hipErrorNotReady;
    *ms = (float)(tb - ta) / 1e6f;
    return hipSuccess;
}

/* --- capture and graphs: a graph (and its exec) is the captured microseconds --- */
HIP_API hipError_t hipStreamBeginCapture(hipStream_t s, int mode) {
    (void)mode;
    hip_stream *st = stream_of(s);
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    hipError_t r = st->capturing ? hipErrorStreamCaptureUnsupported : hipSuccess;
    if (r == hipSuccess) st->capturing = 1, st->captured_ns = 0;
    pthread_mutex_unlock(&g_lock);
    return r;
}

HIP_API hipError_t hipStreamEndCapture(hipStream_t s, void **graph) {
    hip_stream *st = stream_of(s);
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    hipError_t r = st->capturing ? hipSuccess : hipErrorStreamCaptureUnmatched;
    uint64_t us = (uint64_t)(st->captured_ns / 1000);
    st->capturing = 0;
    pthread_mutex_unlock(&g_lock);
    if (r == hipSuccess && graph) *graph = (void *)(uintptr_t)(us ? us : 1);
    return r;
}

HIP_API hipError_t hipStreamIsCapturing(hipStream_t s, int *status) {
    hip_stream *st = stream_of(s);
    if (!status) return hipErrorInvalidValue;
    if (!st) return hipErrorNoDevice;
    pthread_mutex_lock(&g_lock);
    *status = st->capturing;
    pthread_mutex_unlock(&g_lock);
    return hipSuccess;
}

HIP_API hipError_t hipGraphInstantiate(void **exec, void *graph, void *err_node, char *log, size_t log_size) {
    (void)err_node;
    (void)log;
    (void)log_size;
    if (!exec || !graph) return hipErrorInvalidValue;
    *exec = graph;
    return hipSuccess;
}

HIP_API hipError_t hipGraphExecDestroy(void *exec) { return exec ? hipSuccess : hipErrorInvalidValue; }
HIP_API hipError_t hipGraphDestroy(void *graph) { return graph ? hipSuccess : hipErrorInvalidValue; }

/* ---------------------------------------------------------------------------
 * Launches
 * ------------------------------------------------------------------------- */
HIP_API hipError_t hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s) {
    (void)grid;
    (void)block;
    (void)args;
    (void)shmem;
    return kernel(f, s, NULL, NULL);
}

HIP_API hipError_t hipExtLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s,
                                      hipEvent_t start, hipEvent_t stop, int flags) {
    (void)grid;
    (void)block;
    (void)args;
    (void)shmem;
    (void)flags;
    return kernel(f, s, start, stop);
}

HIP_API hipError_t hipLaunchCooperativeKernel(const void *f, dim3 grid, dim3 block, void **args, unsigned int shmem,
                                              hipStream_t s) {
    (void)grid;
    (void)block;
    (void)args;
    (void)shmem;
    return kernel(f, s, NULL, NULL);
}

HIP_API hipError_t hipModuleLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                         unsigned int by, unsigned int bz, unsigned int shmem, hipStream_t s,
                                         void **params, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)params, (void)extra;
    return kernel(f, s, NULL, NULL);
}

HIP_API hipError_t hipExtModuleLaunchKernel(void *f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                                            uint32_t lz, size_t shmem, hipStream_t s, void **params, void **extra,
                                            hipEvent_t start, hipEvent_t stop, uint32_t flags) {
    (void)gx, (void)gy, (void)gz, (void)lx, (void)ly, (void)lz, (void)shmem, (void)params, (void)extra, (void)flags;
    return kernel(f, s, start, stop);
}

HIP_API hipError_t hipGraphLaunch(void *exec, hipStream_t s) {
    if (!exec) return hipErrorInvalidValue;
    return kernel(exec, s, NULL, NULL);
}

/* ---------------------------------------------------------------------------
 * Copies and memsets: 1 ns per byte on the engine
 * ------------------------------------------------------------------------- */
HIP_API hipError_t hipMemcpy(void *d, const void *s, size_t n, int k) {
    (void)d, (void)s, (void)k;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyAsync(void *d, const void *s, size_t n, int k, hipStream_t st) {
    (void)d, (void)s, (void)k;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemcpyWithStream(void *d, const void *s, size_t n, int k, hipStream_t st) {
    (void)d, (void)s, (void)k;
    return copy(st, n, 1);
}
HIP_API hipError_t hipMemcpyHtoD(void *d, void *s, size_t n) {
    (void)d, (void)s;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyHtoDAsync(void *d, void *s, size_t n, hipStream_t st) {
    (void)d, (void)s;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemcpyDtoH(void *d, void *s, size_t n) {
    (void)d, (void)s;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyDtoHAsync(void *d, void *s, size_t n, hipStream_t st) {
    (void)d, (void)s;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemcpyDtoD(void *d, void *s, size_t n) {
    (void)d, (void)s;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyDtoDAsync(void *d, void *s, size_t n, hipStream_t st) {
    (void)d, (void)s;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemcpy2D(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k) {
    (void)d, (void)dp, (void)s, (void)sp, (void)k;
    return copy(NULL, (uint64_t)w * h, 1);
}
HIP_API hipError_t hipMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k,
                                    hipStream_t st) {
    (void)d, (void)dp, (void)s, (void)sp, (void)k;
    return copy(st, (uint64_t)w * h, 0);
}
HIP_API hipError_t hipMemcpyPeer(void *d, int dd, const void *s, int sd, size_t n) {
    (void)d, (void)dd, (void)s, (void)sd;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, hipStream_t st) {
    (void)d, (void)dd, (void)s, (void)sd;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemset(void *d, int v, size_t n) {
    (void)d, (void)v;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemsetAsync(void *d, int v, size_t n, hipStream_t st) {
    (void)d, (void)v;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemsetD8(void *d, unsigned char v, size_t n) {
    (void)d, (void)v;
    return copy(NULL, n, 1);
}
HIP_API hipError_t hipMemsetD8Async(void *d, unsigned char v, size_t n, hipStream_t st) {
    (void)d, (void)v;
    return copy(st, n, 0);
}
HIP_API hipError_t hipMemsetD32(void *d, int v, size_t n) {
    (void)d, (void)v;
    return copy(NULL, 4 * (uint64_t)n, 1);
}
HIP_API hipError_t hipMemsetD32Async(void *d, int v, size_t n, hipStream_t st) {
    (void)d, (void)v;
    return copy(st, 4 * (uint64_t)n, 0);
}

/* ---------------------------------------------------------------------------
 * Test-only extras
 * ------------------------------------------------------------------------- */
HIP_API unsigned long long stubHipUsedBytes(int dev) {
    ready();
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
