/* hip_stub_memory.c - the stub HIP runtime's memory (hip_stub.c has the overview): allocations
 * counted against each device's `memory`, arrays, physical memory and mapped address ranges.
 * A device pointer, array or physical handle is a small host block carrying its size and device.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "hip_stub.h"

#define BLOCK_MAGIC 0x484950424c4b0001ULL /* "HIPBLK" */
enum { K_PTR = 1, K_ARRAY, K_PHYS, K_IMPORT };
typedef struct hip_block {
    uint64_t magic;
    uint64_t size;
    int dev, kind;
    int refs, maps;       /* K_PHYS only */
    unsigned gen;         /* K_PTR, K_ARRAY: its device's generation (a hipDeviceReset frees the older) */
    struct hip_block *of; /* K_IMPORT: the physical allocation it names (holding one reference) */
} hip_block;

#define MAX_MAPS 8192 /* above libvhip's own table (4096), so the hook's limit is the one a test meets */
static struct {
    uintptr_t base, end;
    hip_block *phys;
} g_maps[MAX_MAPS];
static uintptr_t g_next_va = 0x7e0000000000ULL;

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
    if (fits && kind != K_PHYS) g_dev[dev].resettable += size;
    unsigned gen = hk_atomic_load_acquire(&g_dev[dev].gen);
    pthread_mutex_unlock(&g_lock);
    if (!fits) {
        free(b);
        return hipErrorOutOfMemory;
    }
    *b = (hip_block){BLOCK_MAGIC, size, dev, kind, kind == K_PHYS, 0, gen, NULL};
    *out = b;
    return hipSuccess;
}

static void block_free(hip_block *b) {
    b->magic = 0;
    pthread_mutex_lock(&g_lock);
    g_dev[b->dev].used -= b->size;
    if (b->kind != K_PHYS) g_dev[b->dev].resettable -= b->size;
    pthread_mutex_unlock(&g_lock);
    free(b);
}

/* The live block `p` of `kind`, or NULL: not one, or a pointer or array its device's reset freed
   (that block stays allocated on the host, so its address is never handed out again). */
static hip_block *block_of(void *p, int kind) {
    hip_block *b = p;
    if (!b || b->magic != BLOCK_MAGIC || b->kind != kind) return NULL;
    return kind == K_PHYS || kind == K_IMPORT || b->gen == hk_atomic_load_acquire(&g_dev[b->dev].gen) ? b : NULL;
}

/* A pointer or array of `size` bytes on the thread's device, into *out. */
static hipError_t alloc_block(void **out, uint64_t size, int kind) {
    if (!out) return hipErrorInvalidValue;
    hip_block *b;
    hipError_t r = block_new(hs_current(), size, kind, &b);
    if (r == hipSuccess) *out = b;
    return r;
}

static hipError_t alloc_ptr(void **p, uint64_t size) { return alloc_block(p, size, K_PTR); }

/* An array of any kind (plain, mipmapped, driver-style): the stub keeps them alike. */
static hipError_t free_array(void *a) {
    hip_block *b = block_of(a, K_ARRAY);
    if (!b) return hipErrorInvalidValue;
    block_free(b);
    return hipSuccess;
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

/* Pools: handles and a release threshold each, nothing more (the stub keeps no freed memory, so a
   threshold changes nothing on the device; what a tenant holds in a real pool is the hook's books).
   0x1000 + device: a device's default pool; 0x10000 + (n << 8) + device: one hipMemPoolCreate
   made. */
#define DEFAULT_POOL(d) ((void *)(uintptr_t)(0x1000 + (d)))
#define POOL_ATTR_MAX   8 /* hipMemPoolAttr: 1..8 */
static void *g_current_pool[HD_MAX_DEVICES];
static _Atomic unsigned g_pools_made;

static int pool_dev(void *pool) {
    uintptr_t v = (uintptr_t)pool;
    int d = v >= 0x10000 ? (int)(v & 0xff) : v >= 0x1000 ? (int)(v - 0x1000) : -1;
    return d >= 0 && d < g_ndev ? d : -1;
}

HIP_API hipError_t hipMemPoolCreate(void **pool, const hipMemAllocationProp *props) {
    hs_ready();
    if (!pool || !props || props->location.type != 1 || pool_dev(DEFAULT_POOL(props->location.id)) < 0)
        return hipErrorInvalidValue;
    unsigned n = hk_atomic_add_seq_cst(&g_pools_made, 1) + 1;
    *pool = (void *)(uintptr_t)(0x10000 + ((uintptr_t)n << 8) + (unsigned)props->location.id);
    return hipSuccess;
}

HIP_API hipError_t hipMemPoolDestroy(void *pool) {
    hs_ready();
    return pool_dev(pool) >= 0 && (uintptr_t)pool >= 0x10000 ? hipSuccess : hipErrorInvalidValue;
}

HIP_API hipError_t hipDeviceGetMemPool(void **pool, int dev) {
    hs_ready();
    if (!pool || dev < 0 || dev >= g_ndev) return hipErrorInvalidValue;
    *pool = g_current_pool[dev] ? g_current_pool[dev] : DEFAULT_POOL(dev);
    return hipSuccess;
}

HIP_API hipError_t hipDeviceSetMemPool(int dev, void *pool) {
    hs_ready();
    if (dev < 0 || dev >= g_ndev || pool_dev(pool) != dev) return hipErrorInvalidValue;
    g_current_pool[dev] = pool;
    return hipSuccess;
}

HIP_API hipError_t hipMemPoolSetAttribute(void *pool, int attr, void *value) {
    hs_ready();
    return pool_dev(pool) >= 0 && attr >= 1 && attr <= POOL_ATTR_MAX && value ? hipSuccess : hipErrorInvalidValue;
}

HIP_API hipError_t hipMemPoolTrimTo(void *pool, size_t keep) {
    (void)keep;
    hs_ready();
    return pool_dev(pool) >= 0 ? hipSuccess : hipErrorInvalidValue;
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
    return d ? alloc_block(a, element(d) * elements, K_ARRAY) : hipErrorInvalidValue;
}

HIP_API hipError_t hipMallocArray(void **a, const hipChannelFormatDesc *d, size_t w, size_t h, unsigned int flags) {
    (void)flags;
    return alloc_array(a, d, (uint64_t)w * (h ? h : 1));
}

HIP_API hipError_t hipMalloc3DArray(void **a, const hipChannelFormatDesc *d, hipExtent e, unsigned int flags) {
    (void)flags;
    return alloc_array(a, d, (uint64_t)e.width * (e.height ? e.height : 1) * (e.depth ? e.depth : 1));
}

/* A mipmapped array holds every level: each halves the extent (down to 1) of the one before. */
HIP_API hipError_t hipMallocMipmappedArray(void **a, const hipChannelFormatDesc *d, hipExtent e, unsigned int levels,
                                           unsigned int flags) {
    (void)flags;
    uint64_t w = e.width, h = e.height ? e.height : 1, z = e.depth ? e.depth : 1, elements = 0;
    for (unsigned l = 0; l < (levels ? levels : 1) && l < 32; l++) {
        elements += w * h * z;
        w = w > 1 ? w / 2 : 1, h = h > 1 ? h / 2 : 1, z = z > 1 ? z / 2 : 1;
    }
    return alloc_array(a, d, elements);
}

HIP_API hipError_t hipFreeMipmappedArray(void *a) { return free_array(a); }

/* The driver-style arrays: an element of format HIP_AD_FORMAT_* (1, 2 or 4 bytes) per channel. */
typedef struct {
    size_t w, h;
    int format;
    unsigned int channels;
} drv_desc2d;
typedef struct {
    size_t w, h, d;
    int format;
    unsigned int channels, flags;
} drv_desc3d;
static uint64_t drv_bytes(size_t w, size_t h, size_t d, int format, unsigned int ch) {
    uint64_t elem = format == 0x01 || format == 0x08 ? 1 : format == 0x02 || format == 0x09 || format == 0x10 ? 2 : 4;
    return (uint64_t)(w ? w : 1) * (h ? h : 1) * (d ? d : 1) * elem * (ch ? ch : 1);
}
HIP_API hipError_t hipArrayCreate(void **a, const drv_desc2d *d) {
    return d ? alloc_block(a, drv_bytes(d->w, d->h, 1, d->format, d->channels), K_ARRAY) : hipErrorInvalidValue;
}
HIP_API hipError_t hipArray3DCreate(void **a, const drv_desc3d *d) {
    return d ? alloc_block(a, drv_bytes(d->w, d->h, d->d, d->format, d->channels), K_ARRAY) : hipErrorInvalidValue;
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

HIP_API hipError_t hipFreeArray(void *a) { return free_array(a); }

HIP_API hipError_t hipArrayDestroy(void *a) { return free_array(a); }

HIP_API hipError_t hipMemGetInfo(size_t *free_b, size_t *total_b) {
    int d = hs_current();
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
    hs_ready();
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
    hs_ready();
    if (!h || !prop || prop->location.type != 1) return hipErrorInvalidValue;
    hip_block *b;
    hipError_t r = block_new(prop->location.id, size, K_PHYS, &b);
    if (r == hipSuccess) *h = b;
    return r;
}

HIP_API hipError_t hipMemRelease(void *h) {
    pthread_mutex_lock(&g_lock);
    hip_block *imp = block_of(h, K_IMPORT);
    hip_block *b = imp ? imp->of : block_of(h, K_PHYS);
    int ok = b && b->refs > 0;
    if (ok) b->refs--;
    if (imp) imp->magic = 0;
    pthread_mutex_unlock(&g_lock);
    free(imp);
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
    hip_block *imp = block_of(h, K_IMPORT);
    hip_block *b = imp ? imp->of : block_of(h, K_PHYS);
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

/* Sharing: exporting a physical allocation gives an OS handle (an int, as a POSIX file descriptor
   would be) holding one reference to it for the process's life (the stub never closes one);
   importing that gives a new handle (K_IMPORT) holding one more, which maps the same memory. */
#define MAX_EXPORTS 64
static hip_block *g_exports[MAX_EXPORTS];

HIP_API hipError_t hipMemExportToShareableHandle(void *shareable, void *h, int type, unsigned long long flags) {
    (void)type;
    (void)flags;
    hipError_t r = hipErrorInvalidValue;
    pthread_mutex_lock(&g_lock);
    hip_block *b = block_of(h, K_PHYS);
    for (int i = 0; b && shareable && i < MAX_EXPORTS; i++) {
        if (g_exports[i] && g_exports[i] != b) continue;
        if (!g_exports[i]) b->refs++;
        g_exports[i] = b;
        *(int *)shareable = 1000 + i;
        r = hipSuccess;
        break;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

HIP_API hipError_t hipMemImportFromShareableHandle(void **h, void *os_handle, int type) {
    (void)type;
    int i = (int)(intptr_t)os_handle - 1000;
    if (!h || i < 0 || i >= MAX_EXPORTS) return hipErrorInvalidValue;
    hip_block *imp = malloc(sizeof *imp);
    if (!imp) return hipErrorOutOfMemory;
    pthread_mutex_lock(&g_lock);
    hip_block *b = g_exports[i];
    if (b) {
        b->refs++;
        *imp = (hip_block){BLOCK_MAGIC, b->size, b->dev, K_IMPORT, 1, 0, 0, b};
        *h = imp;
    }
    pthread_mutex_unlock(&g_lock);
    if (b) return hipSuccess;
    free(imp);
    return hipErrorInvalidValue;
}

/* This file's part of hipGetProcAddress's table (hip_stub.h). */
#define SYMS(X)               \
    X(hipMalloc)              \
    X(hipFree)                \
    X(hipMallocAsync)         \
    X(hipFreeAsync)           \
    X(hipMallocFromPoolAsync) \
    X(hipMemPoolSetAttribute)
SYMS(HS_ALIAS)
const hs_sym hs_syms_memory[] = {SYMS(HS_SYM){NULL, NULL}};
#undef SYMS
