/* hip.h - internal interface of libvhip.so's HIP shim.
 *
 * Layers:  interposers (memory.c, vmm.c, launch.c)
 *            -> this file (nesting guard, device mapping, admission, memory view; device.c)
 *            -> preload/ (dlsym, registry, real library, process state, log)
 *            -> core/ (config, ledger, admission, tracking, limiter, meter)
 *
 * Exactly once: every interposer runs its real function inside HK_HIP_NESTED(), which raises a
 * thread-local depth; an interposer entered while the depth is raised (a HIP runtime that reaches
 * one of its own exported entry points through the PLT, e.g. hipMallocManaged built on hipMalloc)
 * is part of a call already admitted, charged or metered, and passes straight through.
 */
#ifndef HOOKCORE_HIP_H
#define HOOKCORE_HIP_H

#include <stdint.h>

#include "../core/hookcore.h"
#include "../core/meter.h"
#include "../preload/preload.h"
#include "copy.h"
#include "hip_abi.h"

/* ---------------------------------------------------------------------------
 * Interposers (the real signatures); the list is hooks.def
 * ------------------------------------------------------------------------- */
hipError_t hipMalloc(void **p, size_t size);
hipError_t hipMallocPitch(void **p, size_t *pitch, size_t width, size_t height);
hipError_t hipMemAllocPitch(hipDeviceptr_t *p, size_t *pitch, size_t width, size_t height, unsigned int elem);
hipError_t hipMalloc3D(hipPitchedPtr *pp, hipExtent extent);
hipError_t hipMallocManaged(void **p, size_t size, unsigned int flags);
hipError_t hipMallocAsync(void **p, size_t size, hipStream_t s);
hipError_t hipMallocFromPoolAsync(void **p, size_t size, hipMemPool_t pool, hipStream_t s);
hipError_t hipExtMallocWithFlags(void **p, size_t size, unsigned int flags);
hipError_t hipMallocArray(hipArray_t *a, const hipChannelFormatDesc *desc, size_t width, size_t height,
                          unsigned int flags);
hipError_t hipMalloc3DArray(hipArray_t *a, const hipChannelFormatDesc *desc, hipExtent extent, unsigned int flags);
hipError_t hipMallocMipmappedArray(hipMipmappedArray_t *a, const hipChannelFormatDesc *desc, hipExtent extent,
                                   unsigned int levels, unsigned int flags);
hipError_t hipFreeMipmappedArray(hipMipmappedArray_t a);
hipError_t hipArrayCreate(hipArray_t *a, const HIP_ARRAY_DESCRIPTOR *d);
hipError_t hipArray3DCreate(hipArray_t *a, const HIP_ARRAY3D_DESCRIPTOR *d);
hipError_t hipArrayDestroy(hipArray_t a);
hipError_t hipMipmappedArrayCreate(hipMipmappedArray_t *a, HIP_ARRAY3D_DESCRIPTOR *d, unsigned int levels);
hipError_t hipMipmappedArrayDestroy(hipMipmappedArray_t a);
hipError_t hipFree(void *p);
hipError_t hipFreeAsync(void *p, hipStream_t s);
hipError_t hipFreeArray(hipArray_t a);
hipError_t hipMemPoolSetAttribute(hipMemPool_t pool, int attr, void *value);
hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t keep);
hipError_t hipMemPoolDestroy(hipMemPool_t pool);
hipError_t hipGraphAddMemAllocNode(hipGraphNode_t *node, hipGraph_t g, const hipGraphNode_t *deps, size_t n,
                                   hipMemAllocNodeParams *params);
hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *h, size_t size, const hipMemAllocationProp *prop,
                        unsigned long long flags);
hipError_t hipMemRelease(hipMemGenericAllocationHandle_t h);
hipError_t hipMemRetainAllocationHandle(hipMemGenericAllocationHandle_t *h, void *addr);
hipError_t hipMemMap(void *ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t h,
                     unsigned long long flags);
hipError_t hipMemUnmap(void *ptr, size_t size);
hipError_t hipMemExportToShareableHandle(void *shareable, hipMemGenericAllocationHandle_t h, int type,
                                         unsigned long long flags);
hipError_t hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *h, void *os_handle, int type);
hipError_t hipMemGetInfo(size_t *free_b, size_t *total_b);
hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t dev);
hipError_t hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s);
hipError_t hipExtLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s,
                              hipEvent_t start, hipEvent_t stop, int flags);
hipError_t hipLaunchCooperativeKernel(const void *f, dim3 grid, dim3 block, void **args, unsigned int shmem,
                                      hipStream_t s);
hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                 unsigned int by, unsigned int bz, unsigned int shmem, hipStream_t s, void **params,
                                 void **extra);
hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                                    uint32_t lz, size_t shmem, hipStream_t s, void **params, void **extra,
                                    hipEvent_t start, hipEvent_t stop, uint32_t flags);
hipError_t hipGraphLaunch(hipGraphExec_t g, hipStream_t s);
hipError_t hipModuleLaunchCooperativeKernel(hipFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                            hipStream_t s, void **params);
hipError_t hipLaunchKernelExC(const hipLaunchConfig_t *config, const void *f, void **args);
hipError_t hipDrvLaunchKernelEx(const HIP_LAUNCH_CONFIG *config, hipFunction_t f, void **params, void **extra);
hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode mode);
hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t *g);
hipError_t hipLaunchKernel_spt(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, hipStream_t s);
hipError_t hipLaunchCooperativeKernel_spt(const void *f, dim3 grid, dim3 block, void **args, uint32_t shmem,
                                          hipStream_t s);
hipError_t hipGraphLaunch_spt(hipGraphExec_t g, hipStream_t s);
hipError_t hipStreamBeginCapture_spt(hipStream_t s, hipStreamCaptureMode mode);
hipError_t hipStreamEndCapture_spt(hipStream_t s, hipGraph_t *g);
hipError_t hipDeviceReset(void);
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags, void *status);
#define HK_HIP_PROTO(name, params, args, stream, bytes, kind) hipError_t name params;
HK_HIP_COPIES(HK_HIP_PROTO)
HK_HIP_COPIES_SPT(HK_HIP_PROTO)
#undef HK_HIP_PROTO

/* The real functions, one slot per hooks.def entry (filled by the preload registry). */
typedef struct hk_hip_table {
#include "preload/shim_real.h"
} hk_hip_table;

extern hk_hip_table hk_hip HK_HIDDEN;
extern const hk_shim hk_shim_hip HK_HIDDEN;

/* ---------------------------------------------------------------------------
 * Exactly once (see the top of this file)
 * ------------------------------------------------------------------------- */
extern __thread int hk_hip_depth HK_HIDDEN;

#define HK_HIP_NESTED(call)            \
    ({                                 \
        hk_hip_depth++;                \
        __typeof__(call) r__ = (call); \
        hk_hip_depth--;                \
        r__;                           \
    })

/* A real function still NULL on the first call of a program linked with -lamdhip64 (its PLT call
   reached us before anything loaded the real library): initialise, then look again. */
#define HK_HIP_LOADED(fn) (hk_preload_ready(), (fn) != NULL)

/* Entered from inside another interposer (see the top): pass straight through. */
static inline int hk_hip_nested(void) { return HK_UNLIKELY(hk_hip_depth > 0); }

/* The real function, or hipErrorNotSupported from the caller when the runtime lacks it. */
#define HK_HIP_REAL(fn)                                                            \
    do {                                                                           \
        if (HK_UNLIKELY(!(fn)) && !HK_HIP_LOADED(fn)) return hipErrorNotSupported; \
    } while (0)

/* ---------------------------------------------------------------------------
 * Devices (device.c)
 * ------------------------------------------------------------------------- */
/* The hook key of a device: "pci-" + its PCI bus ID in lower case ("pci-0000:c1:00.0"), what the
   driver writes as the device's HOOKCORE_DEVICE_UUID_<i>. */
void hk_hip_key(const char *bus_id, char out[HK_UUID_MAX]);

/* HIP device ordinal -> ledger index (hk_device_resolve with the device's key, cached);
   HK_ENODEV for a device outside the claim. */
int hk_hip_ldev(int dev);

/* The calling thread's current device: 0 and *dev, or nonzero. */
int hk_hip_current(int *dev);

/* hk_shim.ordinal_of_uuid: the device whose key is `uuid`, or -1. */
int hk_hip_ordinal_of_key(const char *uuid);

/* Reserve `charge` on device *dev's ledger index (*dev < 0: the current device, whose ordinal is
   then written to *dev). HK_OK with *ldev set; HK_ENOMEM (over quota or a device outside the
   claim); HK_EFAILCLOSED; *skip = 1 when nothing is to be charged (dormant, or no device: the
   real call then reports that itself). */
int hk_hip_admit(int *dev, uint64_t charge, int *ldev, int *skip);

/* Remember / forget a charged allocation (key = pointer or array) made on device ordinal `dev`,
   which it dies with (hipDeviceReset). remember() nonzero: the tracking table is full, the charge
   was released and the caller undoes the allocation. */
int hk_hip_remember(uint64_t key, uint32_t kind, int dev, int ldev, uint64_t charge);
void hk_hip_forget(uint64_t key, uint32_t kind);
/* A stream-ordered allocation (key = pointer) on device ordinal `dev` came from a pool that keeps
   freed memory (core/pool.h), keyed `pool`: remembered so its free returns the charge there. */
void hk_hip_remember_pool(uint64_t key, int dev, uintptr_t pool);
/* A freed device pointer: its charge goes back to the quota, or to its pool (mempool.c). */
void hk_hip_forget_ptr(uint64_t key);

/* Device ordinal `dev` was reset (hipDeviceReset answered hipSuccess): the pointers and arrays
   allocated on it went with it, and so do their charges, and what its pools kept. */
void hk_hip_device_reset(int dev);

/* The claim's view of device `dev`'s memory (dev < 0: the current one), given the runtime's. */
void hk_hip_meminfo(int dev, size_t *free_b, size_t *total_b);

/* What an allocation of `size` bytes is charged: rounded up to 512 B, or to 2 MiB from 2 MiB up
   (the runtime's suballocation and large-page granularity, as libvgpu charges CUDA). */
static inline uint64_t hk_hip_round(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
static inline uint64_t hk_hip_charge(uint64_t size) {
    return size >= (2u << 20) ? hk_hip_round(size, 2u << 20) : hk_hip_round(size, 512);
}

#define HK_KIND_HIP_PTR      HK_KIND_PTR   /* hipMalloc*, managed, pitched, 3D, stream-ordered */
#define HK_KIND_HIP_ARRAY    HK_KIND_ARRAY /* hipMallocArray, hipMalloc3DArray */
#define HK_KIND_HIP_GRAPHMEM 10u           /* allocations captured into a graph: charged for the process's life */

/* ---------------------------------------------------------------------------
 * Compute (launch.c): the meter's operations in HIP terms
 * ------------------------------------------------------------------------- */
void hk_hip_meter_setup(void);

/* Launch fast path: ready or dormant, and no compute limit anywhere. */
static inline int hk_hip_fast(void) {
    int s = hk_atomic_load_relaxed(&hk_preload_xstate);
    return HK_LIKELY((s == HK_STATE_READY || s == HK_STATE_DORMANT) && !hk_preload_limiter_on());
}

/* The body of a submission interposer: straight through on the fast path or nested, else metered
   on `stream` (core/meter.h) as work of kind `work` with signature `sig`. */
#define HK_HIP_GATED(real_fn, stream, sig, work, call)                                \
    do {                                                                              \
        HK_HIP_REAL(real_fn);                                                         \
        if (hk_hip_fast() || hk_hip_nested()) return HK_HIP_NESTED(call);             \
        if (hk_preload_ready() == HK_STATE_FAILCLOSED) return hipErrorNotInitialized; \
        if (!hk_preload_limiter_on()) return HK_HIP_NESTED(call);                     \
        void *s_ = (stream);                                                          \
        hk_meter_batch *b_ = hk_meter_before_work(s_, (work));                        \
        hipError_t r_ = HK_HIP_NESTED(call);                                          \
        hk_meter_after(b_, s_, r_ == hipSuccess, (sig));                              \
        return r_;                                                                    \
    } while (0)

#endif
