/* device.c - runtime device -> ledger device, admission and the memory view, for both layers.
 *
 * The claim keys its NPUs by physical ID ("davinci<phy>"; the driver writes that as
 * HOOKCORE_DEVICE_UUID_<i>). The first time a runtime device is used its physical ID is asked of
 * the runtime (aclrtGetPhyDevIdByLogicDevId, else rtGetDevicePhyIdByIndex) and hk_device_resolve()
 * names the ledger index, so ASCEND_RT_VISIBLE_DEVICES reordering inside the container cannot move
 * a charge to another NPU's quota. A config without keys (HOOKCORE_MEMORY_LIMIT_<i> alone) is
 * positional: runtime device i is index i.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>

#include "npu.h"

__thread int hk_npu_depth;

#define HK_MAX_ORDINALS 64
static _Atomic int g_ordmap[HK_MAX_ORDINALS]; /* runtime device -> ledger index + 1000 (0 = unknown) */

void hk_npu_key(uint32_t phy, char out[HK_UUID_MAX]) { snprintf(out, HK_UUID_MAX, "davinci%u", phy); }

static int phy_of(int32_t dev, uint32_t *phy) {
    if (hk_acl.aclrtGetPhyDevIdByLogicDevId) {
        int32_t p = -1;
        if (hk_acl.aclrtGetPhyDevIdByLogicDevId(dev, &p) == ACL_SUCCESS && p >= 0) {
            *phy = (uint32_t)p;
            return 0;
        }
    }
    if (hk_rt.rtGetDevicePhyIdByIndex && hk_rt.rtGetDevicePhyIdByIndex((uint32_t)dev, phy) == 0) return 0;
    return -1;
}

int hk_npu_ldev(int32_t dev) {
    if (dev < 0 || dev >= HK_MAX_ORDINALS) return HK_ENODEV;
    int v = hk_atomic_load_relaxed(&g_ordmap[dev]);
    if (HK_LIKELY(v != 0)) return v - 1000;
    uint32_t phy = 0;
    char key[HK_UUID_MAX] = "";
    int known = phy_of(dev, &phy) == 0;
    if (known) hk_npu_key(phy, key);
    int ldev = hk_device_resolve(dev, known ? key : NULL);
    if (ldev < 0) ldev = HK_ENODEV;
    if (hk_log_debug()) hk_log("NPU device %d (%s) -> ledger index %d", dev, known ? key : "physical ID unknown", ldev);
    hk_atomic_store_relaxed(&g_ordmap[dev], ldev + 1000);
    return ldev;
}

int hk_npu_current(int32_t *dev) {
    if (hk_acl.aclrtGetDevice) return hk_acl.aclrtGetDevice(dev) == ACL_SUCCESS ? 0 : -1;
    if (hk_rt.rtGetDevice) return hk_rt.rtGetDevice(dev) == 0 ? 0 : -1;
    return -1;
}

int hk_npu_ordinal_of_key(const char *uuid) {
    hk_preload_load(&hk_shim_acl);
    hk_preload_load(&hk_shim_ascend_rt);
    int32_t n = 0;
    uint32_t un = 0;
    if (hk_acl.aclrtGetDeviceCount && hk_acl.aclrtGetDeviceCount(&un) == ACL_SUCCESS)
        n = (int32_t)un;
    else if (!hk_rt.rtGetDeviceCount || hk_rt.rtGetDeviceCount(&n) != 0)
        return -1;
    for (int32_t d = 0; d < n; d++) {
        uint32_t phy;
        char key[HK_UUID_MAX];
        if (phy_of(d, &phy) != 0) continue;
        hk_npu_key(phy, key);
        if (hk_uuid_equal(key, uuid)) return d;
    }
    return -1;
}

int hk_npu_admit(uint64_t charge, int *ldev, int *skip) {
    *skip = 0;
    int st = hk_preload_ready();
    if (HK_UNLIKELY(st == HK_STATE_FAILCLOSED)) return HK_EFAILCLOSED;
    int32_t dev;
    if (st == HK_STATE_DORMANT || hk_npu_current(&dev) != 0) {
        *skip = 1;
        return HK_OK;
    }
    *ldev = hk_npu_ldev(dev);
    if (*ldev < 0) return HK_ENOMEM; /* an NPU outside the claim has no quota */
    return hk_mem_reserve(*ldev, charge);
}

int hk_npu_remember(uint64_t key, uint32_t kind, int ldev, uint64_t charge) {
    int rc = hk_track_alloc(key, kind, ldev, charge);
    if (HK_LIKELY(rc == HK_OK)) return 0;
    if (rc == HK_EEXIST) {
        /* freed through a path we do not see: drop the stale charge and take the new one */
        int odev;
        uint64_t osize;
        if (hk_track_free(key, kind, &odev, &osize) == HK_OK) hk_mem_release(odev, osize);
        if (hk_track_alloc(key, kind, ldev, charge) == HK_OK) return 0;
    }
    hk_mem_release(ldev, charge);
    return 1;
}

void hk_npu_forget(uint64_t key, uint32_t kind) {
    int dev;
    uint64_t size;
    if (hk_track_free(key, kind, &dev, &size) == HK_OK) hk_mem_release(dev, size);
}

/* total = min(quota, device), free = min(device free, total - the claim's usage), saturating;
   processes that died are reclaimed first (memory-info calls are rare). */
void hk_npu_meminfo(size_t *free_b, size_t *total_b) {
    if (hk_preload_ready() != HK_STATE_READY) return;
    int32_t dev;
    if (hk_npu_current(&dev) != 0) return;
    int ldev = hk_npu_ldev(dev);
    if (ldev < 0) {
        *free_b = *total_b = 0;
        return;
    }
    uint64_t limit = hk_mem_limit(ldev);
    if (limit == HK_MEM_UNLIMITED) return;
    uint64_t total = limit < *total_b ? limit : *total_b;
    hk_reclaim();
    uint64_t used = hk_mem_used(ldev);
    uint64_t free_q = used >= total ? 0 : total - used;
    *total_b = (size_t)total;
    if (free_q < *free_b) *free_b = (size_t)free_q;
}
