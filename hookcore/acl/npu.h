/* npu.h - internal interface of libvnpu.so's two shims: acl/ (aclrt*, aclmdl*) and ascend_rt/ (rt*).
 *
 * Layers:  interposers (acl/memory.c, acl/launch.c, ascend_rt/rt.c)
 *            -> this file (nesting guard, device mapping, admission, memory view; acl/device.c)
 *            -> preload/ (dlsym, registry, real libraries, process state, log)
 *            -> core/ (config, ledger, admission, tracking, limiter, meter)
 *
 * Exactly once: every ACL interposer runs its real function inside HK_NPU_NESTED(), which raises a
 * thread-local depth; an rt* interposer entered while the depth is raised (CANN 8.x:
 * libascendcl.so calls libruntime.so's rt* through the PLT) is part of a call already admitted,
 * charged or metered, and passes straight through. In the open-source runtime, whose aclrt*Impl
 * reach rt* inside libruntime.so (-Bsymbolic), the rt* interposers are simply never entered from
 * ACL. Either way a call is counted once, by the layer it entered through.
 */
#ifndef HOOKCORE_NPU_H
#define HOOKCORE_NPU_H

#include <stdint.h>

#include "../core/hookcore.h"
#include "../core/meter.h"
#include "../preload/preload.h"
#include "acl_abi.h"

/* ---------------------------------------------------------------------------
 * Interposers (the real signatures); the lists are acl/hooks.def and ascend_rt/hooks.def
 * ------------------------------------------------------------------------- */
aclError aclrtMalloc(void **p, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocAlign32(void **p, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocCached(void **p, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocWithCfg(void **p, size_t size, aclrtMemMallocPolicy policy, aclrtMallocConfig *cfg);
aclError aclrtMallocPhysical(aclrtDrvMemHandle *h, size_t size, const aclrtPhysicalMemProp *prop, uint64_t flags);
aclError aclrtFree(void *p);
aclError aclrtFreeWithDevSync(void *p);
aclError aclrtFreePhysical(aclrtDrvMemHandle h);
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free_b, size_t *total_b);
aclError aclrtLaunchKernel(aclrtFuncHandle f, uint32_t blocks, const void *args, size_t args_size, aclrtStream s);
aclError aclrtLaunchKernelV2(aclrtFuncHandle f, uint32_t blocks, const void *args, size_t args_size,
                             aclrtLaunchKernelCfg *cfg, aclrtStream s);
aclError aclrtLaunchKernelWithConfig(aclrtFuncHandle f, uint32_t blocks, aclrtStream s, aclrtLaunchKernelCfg *cfg,
                                     void *args, void *reserve);
aclError aclmdlExecute(uint32_t model, const aclmdlDataset *in, aclmdlDataset *out);
aclError aclmdlExecuteAsync(uint32_t model, const aclmdlDataset *in, aclmdlDataset *out, aclrtStream s);
aclError aclmdlRIExecute(aclmdlRI ri, int32_t timeout);
aclError aclmdlRIExecuteAsync(aclmdlRI ri, aclrtStream s);
aclError aclmdlRICaptureBegin(aclrtStream s, aclmdlRICaptureMode mode);
aclError aclmdlRICaptureEnd(aclrtStream s, aclmdlRI *ri);

rtError_t rtMalloc(void **p, uint64_t size, int type, const uint16_t module);
rtError_t rtMallocCached(void **p, uint64_t size, int type, const uint16_t module);
rtError_t rtsMalloc(void **p, uint64_t size, int policy, int advise, void *cfg);
rtError_t rtMallocPhysical(rtDrvMemHandle *h, size_t size, void *prop, uint64_t flags);
rtError_t rtFree(void *p);
rtError_t rtsFree(void *p);
rtError_t rtFreeWithDevSync(void *p);
rtError_t rtFreePhysical(rtDrvMemHandle h);
rtError_t rtMemGetInfoEx(int type, size_t *free_b, size_t *total_b);
rtError_t rtKernelLaunch(const void *stub, uint32_t blocks, void *args, uint32_t args_size, void *sm, rtStream_t s);
rtError_t rtKernelLaunchWithHandleV2(void *hdl, const uint64_t tiling_key, uint32_t blocks, void *args, void *sm,
                                     rtStream_t s, const void *cfg);
rtError_t rtKernelLaunchWithFlagV2(const void *stub, uint32_t blocks, void *args, void *sm, rtStream_t s,
                                   uint32_t flags, const void *cfg);
rtError_t rtModelExecute(rtModel_t model, rtStream_t s, uint32_t flag);

/* The real functions, one slot per hooks.def entry (filled by the preload registry). */
typedef struct hk_acl_table {
#define HK_HOOK(name)           __typeof__(&name) name;
#define HK_AUX(name, ret, args) ret(*name) args;
#include "hooks.def"
#undef HK_HOOK
#undef HK_AUX
} hk_acl_table;

typedef struct hk_rt_table {
#define HK_HOOK(name)           __typeof__(&name) name;
#define HK_AUX(name, ret, args) ret(*name) args;
#include "../ascend_rt/hooks.def"
#undef HK_HOOK
#undef HK_AUX
} hk_rt_table;

extern hk_acl_table hk_acl HK_HIDDEN;
extern hk_rt_table hk_rt HK_HIDDEN;
extern const hk_shim hk_shim_acl HK_HIDDEN;
extern const hk_shim hk_shim_ascend_rt HK_HIDDEN;

/* ---------------------------------------------------------------------------
 * Exactly once (see the top of this file)
 * ------------------------------------------------------------------------- */
extern __thread int hk_npu_depth HK_HIDDEN;

#define HK_NPU_NESTED(call)            \
    ({                                 \
        hk_npu_depth++;                \
        __typeof__(call) r__ = (call); \
        hk_npu_depth--;                \
        r__;                           \
    })

/* A real function still NULL on the first call of a program linked with -lascendcl (its PLT call
   reached us before anything loaded the real libraries): initialise, then look again. */
#define HK_NPU_LOADED(fn) (hk_preload_ready(), (fn) != NULL)

/* An rt* interposer entered from inside an ACL interposer: pass straight through. */
static inline int hk_npu_nested(void) { return HK_UNLIKELY(hk_npu_depth > 0); }

/* ---------------------------------------------------------------------------
 * Devices (acl/device.c)
 * ------------------------------------------------------------------------- */
/* The calling thread's current runtime device (ACL's aclrtGetDevice, else rtGetDevice);
   0 and *dev, or nonzero when the thread has none. */
int hk_npu_current(int32_t *dev);

/* Runtime device -> ledger index (hk_device_resolve with the key "davinci<physical ID>", cached);
   HK_ENODEV for an NPU outside the claim. */
int hk_npu_ldev(int32_t dev);

/* The hook key of a physical ID: "davinci<phy>" (what the driver writes as the device's UUID). */
void hk_npu_key(uint32_t phy, char out[HK_UUID_MAX]);

/* hk_shim.ordinal_of_uuid: the runtime device whose key is `uuid`, or -1. */
int hk_npu_ordinal_of_key(const char *uuid);

/* Reserve `charge` on the current device's ledger index. HK_OK with *ldev set; HK_ENOMEM (over
   quota or an NPU outside the claim); HK_EFAILCLOSED; *skip = 1 when nothing is to be charged
   (dormant, or no current device: the real call then reports that itself). */
int hk_npu_admit(uint64_t charge, int *ldev, int *skip);

/* Remember / forget a charged allocation (key = pointer or physical handle). remember() nonzero:
   the tracking table is full, the charge was released and the caller undoes the allocation. */
int hk_npu_remember(uint64_t key, uint32_t kind, int ldev, uint64_t charge);
void hk_npu_forget(uint64_t key, uint32_t kind);

/* The claim's view of the current device's memory, given the runtime's answer. */
void hk_npu_meminfo(size_t *free_b, size_t *total_b);

/* What an allocation of `size` bytes is charged: rounded up to 32 B, ACL's alignment. */
static inline uint64_t hk_npu_charge(uint64_t size) { return (size + 31) / 32 * 32; }

/* The body of an allocation interposer of either layer (`size` and `out` in scope): reserve the
   charge, run the real call nested, give the charge back if it failed, else remember it. `pass`:
   call straight through (an rt* call inside an ACL one); `failclosed`: the layer's error code
   when the library refuses everything. Over quota: ACL_ERROR_RT_MEMORY_ALLOCATION. */
#define HK_NPU_ALLOC(real_fn, out, kind, pass, failclosed, call, undo)                                     \
    do {                                                                                                   \
        if (HK_UNLIKELY(!(real_fn)) && !HK_NPU_LOADED((real_fn))) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT; \
        if ((pass) || !(out) || size == 0) return HK_NPU_NESTED(call);                                     \
        uint64_t charge_ = hk_npu_charge(size);                                                            \
        int ldev_, skip_;                                                                                  \
        int rc_ = hk_npu_admit(charge_, &ldev_, &skip_);                                                   \
        if (rc_ != HK_OK) return rc_ == HK_ENOMEM ? ACL_ERROR_RT_MEMORY_ALLOCATION : (failclosed);         \
        int r_ = HK_NPU_NESTED(call);                                                                      \
        if (skip_) return r_;                                                                              \
        if (r_ != 0) {                                                                                     \
            hk_mem_release(ldev_, charge_);                                                                \
            return r_;                                                                                     \
        }                                                                                                  \
        if (hk_npu_remember((uint64_t)(uintptr_t)*(out), (kind), ldev_, charge_)) {                        \
            (void)HK_NPU_NESTED(undo);                                                                     \
            return ACL_ERROR_RT_MEMORY_ALLOCATION;                                                         \
        }                                                                                                  \
        return 0;                                                                                          \
    } while (0)

/* The body of a free interposer: the real free first, the charge released only when it
   succeeded and the call was not inside another interposer (`pass`). */
#define HK_NPU_FREE(real_fn, key, kind, pass, call)                                                        \
    do {                                                                                                   \
        if (HK_UNLIKELY(!(real_fn)) && !HK_NPU_LOADED((real_fn))) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT; \
        int pass_ = (pass);                                                                                \
        int r_ = HK_NPU_NESTED(call);                                                                      \
        if (!pass_ && r_ == 0 && (key)) hk_npu_forget((uint64_t)(uintptr_t)(key), (kind));                 \
        return r_;                                                                                         \
    } while (0)

/* ---------------------------------------------------------------------------
 * Compute (acl/launch.c): the meter's operations in CANN terms
 * ------------------------------------------------------------------------- */
void hk_npu_meter_setup(void);

/* Launch fast path: ready or dormant, and no compute limit anywhere. */
static inline int hk_npu_fast(void) {
    int s = hk_atomic_load_relaxed(&hk_preload_xstate);
    return HK_LIKELY((s == HK_STATE_READY || s == HK_STATE_DORMANT) && !hk_preload_limiter_on());
}

/* The body of a submission interposer of either layer: straight through on the fast path or
   when `pass`, else metered on `stream` (core/meter.h) with signature `sig`. */
#define HK_NPU_GATED(real_fn, stream, sig, pass, failclosed, call)                                         \
    do {                                                                                                   \
        if (HK_UNLIKELY(!(real_fn)) && !HK_NPU_LOADED((real_fn))) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT; \
        if (hk_npu_fast() || (pass)) return HK_NPU_NESTED(call);                                           \
        if (hk_preload_ready() == HK_STATE_FAILCLOSED) return (failclosed);                                \
        if (!hk_preload_limiter_on()) return HK_NPU_NESTED(call);                                          \
        void *s_ = (stream);                                                                               \
        hk_meter_batch *b_ = hk_meter_before(s_);                                                          \
        int r_ = HK_NPU_NESTED(call);                                                                      \
        hk_meter_after(b_, s_, r_ == 0, (sig));                                                            \
        return r_;                                                                                         \
    } while (0)

#endif
