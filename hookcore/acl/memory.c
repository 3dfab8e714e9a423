/* memory.c - the ACL allocation, free and memory-info entry points, charged to the claim's ledger.
 *
 * Each allocation: reserve the charge on the current device's ledger index (lock free; refused
 * past the quota with ACL_ERROR_RT_MEMORY_ALLOCATION, the runtime's out-of-memory code), run the
 * real call nested (its rt* calls pass through ../ascend_rt), give the charge back if it failed,
 * else remember pointer (or physical handle) -> device, charge, so the free releases exactly that.
 * Frees call the runtime first and release only on success. Host memory is not charged.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "npu.h"

#define ACL_ALLOC(real_fn, out, kind, call, undo) \
    HK_NPU_ALLOC(real_fn, out, kind, 0, ACL_ERROR_UNINITIALIZE, call, undo)
#define ACL_FREE(real_fn, key, kind, call) HK_NPU_FREE(real_fn, key, kind, 0, call)

HK_EXPORT aclError aclrtMalloc(void **p, size_t size, aclrtMemMallocPolicy policy) {
    ACL_ALLOC(hk_acl.aclrtMalloc, p, HK_KIND_PTR, hk_acl.aclrtMalloc(p, size, policy), hk_acl.aclrtFree(*p));
}

HK_EXPORT aclError aclrtMallocAlign32(void **p, size_t size, aclrtMemMallocPolicy policy) {
    ACL_ALLOC(hk_acl.aclrtMallocAlign32, p, HK_KIND_PTR, hk_acl.aclrtMallocAlign32(p, size, policy),
              hk_acl.aclrtFree(*p));
}

HK_EXPORT aclError aclrtMallocCached(void **p, size_t size, aclrtMemMallocPolicy policy) {
    ACL_ALLOC(hk_acl.aclrtMallocCached, p, HK_KIND_PTR, hk_acl.aclrtMallocCached(p, size, policy),
              hk_acl.aclrtFree(*p));
}

HK_EXPORT aclError aclrtMallocWithCfg(void **p, size_t size, aclrtMemMallocPolicy policy, aclrtMallocConfig *cfg) {
    ACL_ALLOC(hk_acl.aclrtMallocWithCfg, p, HK_KIND_PTR, hk_acl.aclrtMallocWithCfg(p, size, policy, cfg),
              hk_acl.aclrtFree(*p));
}

/* Physical memory for the virtual-memory API (torch_npu's expandable segments): the physical
   allocation is what holds device memory, so it is what is charged; reserving and mapping
   address ranges is free. */
HK_EXPORT aclError aclrtMallocPhysical(aclrtDrvMemHandle *h, size_t size, const aclrtPhysicalMemProp *prop,
                                       uint64_t flags) {
    ACL_ALLOC(hk_acl.aclrtMallocPhysical, h, HK_KIND_VMM, hk_acl.aclrtMallocPhysical(h, size, prop, flags),
              hk_acl.aclrtFreePhysical(*h));
}

HK_EXPORT aclError aclrtFree(void *p) { ACL_FREE(hk_acl.aclrtFree, p, HK_KIND_PTR, hk_acl.aclrtFree(p)); }

HK_EXPORT aclError aclrtFreeWithDevSync(void *p) {
    ACL_FREE(hk_acl.aclrtFreeWithDevSync, p, HK_KIND_PTR, hk_acl.aclrtFreeWithDevSync(p));
}

HK_EXPORT aclError aclrtFreePhysical(aclrtDrvMemHandle h) {
    ACL_FREE(hk_acl.aclrtFreePhysical, h, HK_KIND_VMM, hk_acl.aclrtFreePhysical(h));
}

/* Every memory attribute gets the claim's view: HBM on the 910 series, DDR on 310P, where the
   device memory is DDR. */
HK_EXPORT aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free_b, size_t *total_b) {
    if (HK_UNLIKELY(!hk_acl.aclrtGetMemInfo) && !HK_NPU_LOADED(hk_acl.aclrtGetMemInfo))
        return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    int st = hk_preload_ready();
    if (st == HK_STATE_FAILCLOSED) return ACL_ERROR_UNINITIALIZE;
    aclError r = HK_NPU_NESTED(hk_acl.aclrtGetMemInfo(attr, free_b, total_b));
    if (r == ACL_SUCCESS && st == HK_STATE_READY && free_b && total_b) hk_npu_meminfo(free_b, total_b);
    return r;
}
