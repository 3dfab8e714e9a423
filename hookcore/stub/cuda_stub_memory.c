/* cuda_stub_memory.c - device memory of the stub libcuda.so.1: allocations (fake addresses, tracked
 * so a device runs out at its size), VMM handles, pools, arrays. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>

#include "cuda_stub.h"

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
    return stub_take_in_context(d, size, dptr, 0);
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
    CUresult r = stub_take_in_context(d, p * height, dptr, 0);
    if (r == CUDA_SUCCESS) *pitch = p;
    return r;
}

STUB_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    NEED_CTX(d);
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    return stub_take_in_context(d, size, dptr, 0);
}

STUB_API CUresult cuMemFree_v2(CUdeviceptr p) {
    NEED_INIT();
    return stub_give(p);
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
    return stub_take(prop->location.id, size, h, 1);
}

STUB_API CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    NEED_INIT();
    CUresult r = stub_give(h);
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
    return stub_take(d, size, dptr, 0);
}
STUB_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s) {
    return cuMemAllocAsync(dptr, size, s);
}
STUB_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    (void)s;
    NEED_INIT();
    return stub_give(p);
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
    return stub_take(d, size, dptr, 0);
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
    CUresult r = stub_take_in_context(dev, bytes, &h, 1);
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
    CUresult r = stub_take_in_context(dev, bytes, &h, 1);
    if (r == CUDA_SUCCESS) *arr = (CUarray)(uintptr_t)h;
    return r;
}

STUB_API CUresult cuArrayDestroy(CUarray arr) {
    NEED_INIT();
    return stub_give((uintptr_t)arr);
}

STUB_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels) {
    NEED_INIT();
    NEED_CTX(dev);
    if (!arr || !d || levels == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t bytes =
        d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * d->NumChannels * format_bytes(d->Format);
    bytes = bytes * 4 / 3 + 1;
    unsigned long long h;
    CUresult r = stub_take_in_context(dev, bytes, &h, 1);
    if (r == CUDA_SUCCESS) *arr = (CUmipmappedArray)(uintptr_t)h;
    return r;
}

STUB_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr) {
    NEED_INIT();
    return stub_give((uintptr_t)arr);
}

/* This file's part of cuGetProcAddress's table (cuda_stub.h). */
#define SYMS(X)                       \
    X(cuMemRetainAllocationHandle)    \
    X(cuMemExportToShareableHandle)   \
    X(cuMemImportFromShareableHandle) \
    X(cuDeviceGetMemPool)             \
    X(cuMemPoolSetAttribute)          \
    X(cuMemPoolGetAttribute)          \
    X(cuMemPoolTrimTo)                \
    X(cuGraphAddMemAllocNode)         \
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
    X(cuMipmappedArrayDestroy)
SYMS(STUB_ALIAS)
const stub_sym stub_syms_memory[] = {SYMS(STUB_SYM){NULL, NULL}};
#undef SYMS
