/* rt.c - the CANN runtime's rt* allocation, free, memory-info and submission entry points.
 *
 * Reached from inside an ACL interposer (CANN 8.x, where libascendcl.so calls them through the
 * PLT) they pass straight through: that call is already admitted, charged or metered
 * (../acl/npu.h). Reached directly -- graph engine, HCCL and operator libraries call the runtime
 * themselves -- they do what the ACL interposers do: charge allocations to the quota (refused past
 * it with ACL_ERROR_RT_MEMORY_ALLOCATION), give frees back, report the claim's memory view, and
 * meter kernel launches and model executions.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../acl/npu.h"
#include "../core/meter.h"

#define RT_ALLOC(real_fn, out, kind, call, undo) \
    HK_NPU_ALLOC(real_fn, out, kind, hk_npu_nested(), ACL_ERROR_RT_INTERNAL_ERROR, call, undo)
#define RT_FREE(real_fn, key, kind, call) HK_NPU_FREE(real_fn, key, kind, hk_npu_nested(), call)

HK_EXPORT rtError_t rtMalloc(void **p, uint64_t size, int type, const uint16_t module) {
    RT_ALLOC(hk_rt.rtMalloc, p, HK_KIND_PTR, hk_rt.rtMalloc(p, size, type, module), hk_rt.rtFree(*p));
}

HK_EXPORT rtError_t rtMallocCached(void **p, uint64_t size, int type, const uint16_t module) {
    RT_ALLOC(hk_rt.rtMallocCached, p, HK_KIND_PTR, hk_rt.rtMallocCached(p, size, type, module), hk_rt.rtFree(*p));
}

HK_EXPORT rtError_t rtsMalloc(void **p, uint64_t size, int policy, int advise, void *cfg) {
    RT_ALLOC(hk_rt.rtsMalloc, p, HK_KIND_PTR, hk_rt.rtsMalloc(p, size, policy, advise, cfg),
             hk_rt.rtsFree ? hk_rt.rtsFree(*p) : hk_rt.rtFree(*p));
}

HK_EXPORT rtError_t rtMallocPhysical(rtDrvMemHandle *h, size_t size, void *prop, uint64_t flags) {
    RT_ALLOC(hk_rt.rtMallocPhysical, h, HK_KIND_VMM, hk_rt.rtMallocPhysical(h, size, prop, flags),
             hk_rt.rtFreePhysical(*h));
}

HK_EXPORT rtError_t rtFree(void *p) { RT_FREE(hk_rt.rtFree, p, HK_KIND_PTR, hk_rt.rtFree(p)); }
HK_EXPORT rtError_t rtsFree(void *p) { RT_FREE(hk_rt.rtsFree, p, HK_KIND_PTR, hk_rt.rtsFree(p)); }
HK_EXPORT rtError_t rtFreeWithDevSync(void *p) {
    RT_FREE(hk_rt.rtFreeWithDevSync, p, HK_KIND_PTR, hk_rt.rtFreeWithDevSync(p));
}
HK_EXPORT rtError_t rtFreePhysical(rtDrvMemHandle h) {
    RT_FREE(hk_rt.rtFreePhysical, h, HK_KIND_VMM, hk_rt.rtFreePhysical(h));
}

HK_EXPORT rtError_t rtMemGetInfoEx(int type, size_t *free_b, size_t *total_b) {
    if (HK_UNLIKELY(!hk_rt.rtMemGetInfoEx) && !HK_NPU_LOADED(hk_rt.rtMemGetInfoEx))
        return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    if (hk_npu_nested()) return hk_rt.rtMemGetInfoEx(type, free_b, total_b);
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return ACL_ERROR_RT_INTERNAL_ERROR;
    rtError_t r = hk_rt.rtMemGetInfoEx(type, free_b, total_b);
    if (r == 0 && st == HK_STATE_READY && free_b && total_b) hk_npu_meminfo(free_b, total_b);
    return r;
}

/* ---------------------------------------------------------------------------
 * Submissions
 * ------------------------------------------------------------------------- */
#define RT_GATED(real_fn, stream, sig, call) \
    HK_NPU_GATED(real_fn, stream, sig, hk_npu_nested(), ACL_ERROR_RT_INTERNAL_ERROR, call)

#define FSIG(f) ((uint64_t)(uintptr_t)(f) * 31 + blocks)

HK_EXPORT rtError_t rtKernelLaunch(const void *stub, uint32_t blocks, void *args, uint32_t args_size, void *sm,
                                   rtStream_t s) {
    RT_GATED(hk_rt.rtKernelLaunch, s, FSIG(stub), hk_rt.rtKernelLaunch(stub, blocks, args, args_size, sm, s));
}

HK_EXPORT rtError_t rtKernelLaunchWithHandleV2(void *hdl, const uint64_t tiling_key, uint32_t blocks, void *args,
                                               void *sm, rtStream_t s, const void *cfg) {
    RT_GATED(hk_rt.rtKernelLaunchWithHandleV2, s, FSIG(hdl) ^ tiling_key * 0x9e3779b97f4a7c15ULL,
             hk_rt.rtKernelLaunchWithHandleV2(hdl, tiling_key, blocks, args, sm, s, cfg));
}

HK_EXPORT rtError_t rtKernelLaunchWithFlagV2(const void *stub, uint32_t blocks, void *args, void *sm, rtStream_t s,
                                             uint32_t flags, const void *cfg) {
    RT_GATED(hk_rt.rtKernelLaunchWithFlagV2, s, FSIG(stub),
             hk_rt.rtKernelLaunchWithFlagV2(stub, blocks, args, sm, s, flags, cfg));
}

HK_EXPORT rtError_t rtModelExecute(rtModel_t model, rtStream_t s, uint32_t flag) {
    RT_GATED(hk_rt.rtModelExecute, s, (uint64_t)(uintptr_t)model * 0x100000001b3ULL + 7,
             hk_rt.rtModelExecute(model, s, flag));
}
