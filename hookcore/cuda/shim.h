/* shim.h - internal interface of the CUDA/NVML interception shim (libvgpu.so).
 *
 * Layers:  interposers (memory.c, launch.c, device.c, nvml/nvml_hook.c)
 *            -> hook table + real-symbol resolution (intercept.c)
 *            -> core (hookcore.h: config, ledger, admission, tracking) + limiter (core/limiter.h)
 *
 * Every interposer has the exact name and signature of the driver function it replaces and is
 * exported, so it also works for programs linked with -lcuda. The real function is reached
 * through `hk_real.<name>`, filled once from the real libcuda / libnvidia-ml.
 */
#ifndef HOOKCORE_SHIM_H
#define HOOKCORE_SHIM_H

#include <stdatomic.h>
#include <stdint.h>

#include "../core/hookcore.h"
#include "../preload/preload.h"
#include "cuda_abi.h"

#define HK_LIKELY(x) __builtin_expect(!!(x), 1)
#define HK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HK_EXPORT __attribute__((visibility("default")))   /* interposers; everything else is hidden */

/* ---------------------------------------------------------------------------
 * NVML types (subset, from the public NVML API reference)
 * ------------------------------------------------------------------------- */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2 };

/* ---------------------------------------------------------------------------
 * Interposers (defined in memory.c, launch.c, device.c, nvml_hook.c, intercept.c)
 * ------------------------------------------------------------------------- */
#define HK_LAUNCH_ARGS CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                       unsigned bz, unsigned shmem, CUstream s

/* X(name, lib): lib 0 = libcuda, 1 = libnvidia-ml. Order is irrelevant. */
#define HK_HOOKS(X)                                                                          \
    X(cuInit, 0) X(cuGetProcAddress, 0) X(cuGetProcAddress_v2, 0)                             \
    X(cuMemAlloc_v2, 0) X(cuMemAllocPitch_v2, 0) X(cuMemAllocManaged, 0) X(cuMemFree_v2, 0)   \
    X(cuMemCreate, 0) X(cuMemRelease, 0)                                                      \
    X(cuMemAllocAsync, 0) X(cuMemAllocAsync_ptsz, 0) X(cuMemFreeAsync, 0)                     \
    X(cuMemFreeAsync_ptsz, 0) X(cuMemAllocFromPoolAsync, 0) X(cuMemAllocFromPoolAsync_ptsz, 0) \
    X(cuArrayCreate_v2, 0) X(cuArray3DCreate_v2, 0) X(cuArrayDestroy, 0)                      \
    X(cuMipmappedArrayCreate, 0) X(cuMipmappedArrayDestroy, 0)                                \
    X(cuMemGetInfo_v2, 0) X(cuDeviceTotalMem_v2, 0)                                           \
    X(cuLaunchKernel, 0) X(cuLaunchKernel_ptsz, 0) X(cuLaunchKernelEx, 0)                     \
    X(cuLaunchKernelEx_ptsz, 0) X(cuLaunchCooperativeKernel, 0)                               \
    X(cuLaunchCooperativeKernel_ptsz, 0) X(cuGraphLaunch, 0) X(cuGraphLaunch_ptsz, 0)         \
    X(cuStreamBeginCapture_v2, 0) X(cuStreamBeginCapture_v2_ptsz, 0)                          \
    X(cuStreamBeginCaptureToGraph, 0) X(cuStreamBeginCaptureToGraph_ptsz, 0)                  \
    X(cuStreamEndCapture, 0) X(cuStreamEndCapture_ptsz, 0)                                    \
    X(nvmlDeviceGetMemoryInfo, 1) X(nvmlDeviceGetMemoryInfo_v2, 1)

/* Driver functions the shim calls itself but does not police. */
#define HK_AUX(X)                                                                            \
    X(cuCtxGetDevice, 0) X(cuCtxGetCurrent, 0) X(cuDeviceGetUuid, 0) X(cuDeviceGetUuid_v2, 0) \
    X(cuMemGetAllocationGranularity, 0) X(cuEventCreate, 0) X(cuEventDestroy_v2, 0)           \
    X(cuEventRecord, 0) X(cuEventQuery, 0) X(cuEventSynchronize, 0) X(cuEventElapsedTime, 0)  \
    X(cuEventElapsedTime_v2, 0)                                                               \
    X(cuStreamIsCapturing, 0) X(cuDeviceGetCount, 0)                                          \
    X(nvmlDeviceGetUUID, 1) X(nvmlDeviceGetIndex, 1)

/* Prototypes of the interposers (the real driver signatures). */
CUresult cuInit(unsigned int flags);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h, unsigned int elem);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle h);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s);
CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *d);
CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d);
CUresult cuArrayDestroy(CUarray arr);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr);
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuLaunchKernel(HK_LAUNCH_ARGS, void **params, void **extra);
CUresult cuLaunchKernel_ptsz(HK_LAUNCH_ARGS, void **params, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra);
CUresult cuLaunchCooperativeKernel(HK_LAUNCH_ARGS, void **params);
CUresult cuLaunchCooperativeKernel_ptsz(HK_LAUNCH_ARGS, void **params);
CUresult cuGraphLaunch(CUgraphExec g, CUstream s);
CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s);
CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode);
CUresult cuStreamBeginCaptureToGraph(CUstream s, void *graph, const void *deps, const void *edata,
                                     size_t n, int mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, void *graph, const void *deps, const void *edata,
                                          size_t n, int mode);
CUresult cuStreamEndCapture(CUstream s, void **graph);
CUresult cuStreamEndCapture_ptsz(CUstream s, void **graph);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m);

/* Pointer types of the real functions. */
typedef struct hk_real_table {
#define HK_FIELD(name, lib) __typeof__(&name) name;
    HK_HOOKS(HK_FIELD)
#undef HK_FIELD
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*cuDeviceGetUuid_v2)(CUuuid *, CUdevice);
    CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventDestroy_v2)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*cuEventElapsedTime_v2)(float *, CUevent, CUevent);
    CUresult (*cuStreamIsCapturing)(CUstream, int *);
    CUresult (*cuDeviceGetCount)(int *);
    nvmlReturn_t (*nvmlDeviceGetUUID)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*nvmlDeviceGetIndex)(nvmlDevice_t, unsigned int *);
} hk_real_table;

extern hk_real_table hk_real HK_HIDDEN;

/* ---------------------------------------------------------------------------
 * intercept.c
 * ------------------------------------------------------------------------- */
/* Load the real libcuda (lib 0) or libnvidia-ml (lib 1) symbols once. Cheap after the first call. */
void hk_shim_load(int lib) HK_HIDDEN;

/* Debug log to stderr when HOOKCORE_LOG=debug. */
extern int hk_shim_debug HK_HIDDEN;
extern unsigned long hk_dlsym_calls HK_HIDDEN, hk_gpa_calls HK_HIDDEN;
void hk_shim_log(const char *fmt, ...) HK_HIDDEN __attribute__((format(printf, 1, 2)));

/* ---------------------------------------------------------------------------
 * device.c: process state, device mapping
 * ------------------------------------------------------------------------- */
#define HK_SHIM_UNINIT 0
#define HK_SHIM_READY 1
#define HK_SHIM_FAILCLOSED 2
#define HK_SHIM_DORMANT 3                            /* no configuration: every call passes through */
extern _Atomic int hk_shim_state HK_HIDDEN;      /* HK_SHIM_* */
extern int hk_shim_limiter_on HK_HIDDEN;         /* some device has an SM limit < 100 */

/* Initialise the core and the real tables once; returns hk_shim_state. */
int hk_shim_init_slow(void) HK_HIDDEN;
static inline int hk_shim_ready(void) {
    int s = atomic_load_explicit(&hk_shim_state, memory_order_acquire);
    return HK_LIKELY(s != HK_SHIM_UNINIT) ? s : hk_shim_init_slow();
}

/* Ledger index of CUDA ordinal `ord` (cached; UUID-keyed), or HK_ENODEV. */
int hk_dev_of_ordinal(CUdevice ord) HK_HIDDEN;
/* Ledger index of the current context's device. Returns 0, or a CUresult when there is no
   context (the caller then lets the real driver report it). */
CUresult hk_current_dev(int *ldev, CUdevice *ord) HK_HIDDEN;
/* hk_reclaim() before reporting usage. */
void hk_reclaim_for_report(void) HK_HIDDEN;
/* CUDA ordinal whose UUID equals `uuid` (CUDA must be initialised in this process), or -1. */
int hk_cuda_ordinal_of_uuid(const char *uuid) HK_HIDDEN;

/* ---------------------------------------------------------------------------
 * launch.c
 * ------------------------------------------------------------------------- */
void hk_launch_atfork_child(void) HK_HIDDEN;

#endif /* HOOKCORE_SHIM_H */
