/* shim.h - internal interface of the CUDA driver shim (part of libvgpu.so).
 *
 * Layers:  interposers (memory.c, mempool.c, vmm.c, context.c, launch.c, device.c, procaddress.c)
 *            -> preload/ (dlsym, hook registry, real-library loading, process state, log)
 *            -> core/ (config, ledger, admission, tracking, limiter, meter)
 *
 * Every interposer has the exact name and signature of the driver function it replaces and is
 * exported, so it also works for programs linked with -lcuda. The real function is reached
 * through `hk_real.<name>`, filled once from the real libcuda by the preload registry.
 */
#ifndef HOOKCORE_SHIM_H
#define HOOKCORE_SHIM_H

#include <stdint.h>

#include "../core/hookcore.h"
#include "../preload/preload.h"
#include "cuda_abi.h"

/* ---------------------------------------------------------------------------
 * Interposers (memory.c, mempool.c, vmm.c, launch.c, device.c, procaddress.c); the list is hooks.def
 * ------------------------------------------------------------------------- */
#define HK_LAUNCH_ARGS                                                                                          \
    CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem, \
        CUstream s

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
CUresult cuLaunch(CUfunction f);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamSynchronize_ptsz(CUstream s);
CUresult cuStreamDestroy(CUstream s);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuStreamQuery(CUstream s);
CUresult cuStreamQuery_ptsz(CUstream s);
CUresult cuCtxSynchronize(void);
CUresult cuEventSynchronize(CUevent e);
CUresult cuEventQuery(CUevent e);
CUresult cuLaunchGrid(CUfunction f, int gw, int gh);
CUresult cuLaunchGridAsync(CUfunction f, int gw, int gh, CUstream s);
CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h, int type,
                                      unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr);
CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h, unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr p, size_t size);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep);
CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                CUDA_MEM_ALLOC_NODE_PARAMS *params);
CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *params);
CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, const void *edata, size_t n,
                           CUgraphNodeParams *params);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *ctx, void *affinity, int n, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v4(CUcontext *ctx, void *params, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuGreenCtxCreate(CUgreenCtx *ctx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags);
CUresult cuGreenCtxDestroy(CUgreenCtx ctx);
CUresult cuCtxSetLimit(CUlimit limit, size_t value);
CUresult cuStreamBeginCapture(CUstream s);
CUresult cuStreamBeginCapture_ptsz(CUstream s);
CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode);
CUresult cuStreamBeginCaptureToGraph(CUstream s, void *graph, const void *deps, const void *edata, size_t n, int mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, void *graph, const void *deps, const void *edata, size_t n,
                                          int mode);
CUresult cuStreamEndCapture(CUstream s, void **graph);
CUresult cuStreamEndCapture_ptsz(CUstream s, void **graph);

#include "copy.h"
#define HK_COPY_PROTO(name, params, args, stream, bytes, kind) CUresult name params;
HK_COPIES(HK_COPY_PROTO)
#undef HK_COPY_PROTO

/* The real driver functions, one slot per hooks.def entry (filled by the preload registry). */
typedef struct hk_real_table {
#include "preload/shim_real.h"
} hk_real_table;

extern hk_real_table hk_real HK_HIDDEN;

extern const hk_shim hk_shim_cuda HK_HIDDEN;

/* ---------------------------------------------------------------------------
 * device.c: process state, device mapping
 * ------------------------------------------------------------------------- */

/* Ledger index of CUDA ordinal `ord` (cached; UUID-keyed), or HK_ENODEV. */
int hk_dev_of_ordinal(CUdevice ord) HK_HIDDEN;
/* Ledger index of the current context's device. Returns 0, or a CUresult when there is no
   context (the caller then lets the real driver report it). */
CUresult hk_current_dev(int *ldev, CUdevice *ord) HK_HIDDEN;
/* CUDA ordinal whose UUID equals `uuid` (CUDA must be initialised in this process), or -1. */
int hk_cuda_ordinal_of_uuid(const char *uuid) HK_HIDDEN;

/* ---------------------------------------------------------------------------
 * context.c: contexts and their limits are device memory too
 * ------------------------------------------------------------------------- */
/* Shim-local tracking kinds (core/hookcore.h owns 0..7). */
#define HK_KIND_CTX      8u  /* a created (non-primary) context -> its charge */
#define HK_KIND_CTXLIMIT 9u  /* (context, limit) -> what that limit is charged */
#define HK_KIND_GRAPHMEM 10u /* graph memory (alloc nodes, captured allocations) */
/* 11: HK_KIND_POOLPTR (core/pool.h) */
#define HK_KIND_VMMREF 12u /* a VMM handle's references (handle, retains, mappings) */
#define HK_KIND_VMMMAP 13u /* a mapping's address -> its handle */

/* Charge this process's context on ledger device `ldev` once (HOOKCORE_CONTEXT_MEMORY_<i>).
   CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY when the quota cannot hold it. */
CUresult hk_context_charge_primary(int ldev) HK_HIDDEN;
/* The same for the current context, unless it is one this process created (charged already). */
CUresult hk_context_charge_current(int ldev) HK_HIDDEN;

/* ---------------------------------------------------------------------------
 * sm_share.c: the share of its device's SMs a context may use (the limiter charges kernels at it)
 * ------------------------------------------------------------------------- */
/* In millionths (HK_SM_PPM_FULL = all), for work submitted to `s` with `ctx` current on ordinal
   `ord` (ledger device `ldev`): the driver's cuCtxGetExecAffinity SM count / the device's (the
   claim's HOOKCORE_DEVICE_SMS_<ldev> when given, else the driver's attribute), cached per context;
   the full device when unknown or when `s` belongs to another context. */
uint32_t hk_cuda_sm_share_ppm(CUcontext ctx, int ldev, CUdevice ord, CUstream s) HK_HIDDEN;
/* A context was destroyed or a primary context reset or released (NULL: any): its handle may come
   back for a context with other SMs. Also makes every per-thread context cache stale. */
void hk_cuda_sm_share_forget(CUcontext ctx) HK_HIDDEN;
/* Bumped by every forget: per-thread caches keyed by a context handle compare it. */
unsigned hk_cuda_ctx_generation(void) HK_HIDDEN;
void hk_cuda_sm_share_atfork_child(void) HK_HIDDEN;

/* ---------------------------------------------------------------------------
 * launch.c
 * ------------------------------------------------------------------------- */
/* Install the CUDA event operations into the meter (called once at init). */
void hk_cuda_meter_setup(void) HK_HIDDEN;

#endif /* HOOKCORE_SHIM_H */
