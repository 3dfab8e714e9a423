/* device.c - HIP device -> ledger device, admission and the memory view.
 *
 * The claim keys its devices by PCI bus ID ("pci-0000:c1:00.0"; the driver writes that as
 * HOOKCORE_DEVICE_UUID_<i>), what the runtime reports with hipDeviceGetPCIBusId for a device
 * ordinal. The first time an ordinal is used its bus ID is asked and hk_device_resolve() names
 * the ledger index, so HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES, which HIP also reads)
 * reordering devices inside the container cannot move a charge to another device's quota, and a
 * device the container can see but the claim does not hold has no quota at all. A config without
 * keys (HOOKCORE_MEMORY_LIMIT_<i> alone, e.g. HAMi's HIP_DEVICE_MEMORY_LIMIT_<i>) is positional:
 * ordinal i is index i.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "../core/pool.h"
#include "hip.h"

__thread int hk_hip_depth;

#define HK_MAX_ORDINALS 64
static _Atomic int g_ordmap[HK_MAX_ORDINALS]; /* ordinal -> ledger index + 1000 (0 = unknown) */

void hk_hip_key(const char *bus_id, char out[HK_UUID_MAX]) {
    size_t n = (size_t)snprintf(out, HK_UUID_MAX, "pci-%s", bus_id);
    for (size_t i = 0; i < n && i < HK_UUID_MAX; i++) out[i] = (char)tolower((unsigned char)out[i]);
}

static int key_of(int dev, char key[HK_UUID_MAX]) {
    char bus[HIP_PCI_BUS_ID_MAX] = "";
    if (!hk_hip.hipDeviceGetPCIBusId || hk_hip.hipDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != hipSuccess) return -1;
    bus[sizeof bus - 1] = 0;
    if (!bus[0]) return -1;
    hk_hip_key(bus, key);
    return 0;
}

int hk_hip_ldev(int dev) {
    if (dev < 0 || dev >= HK_MAX_ORDINALS) return HK_ENODEV;
    int v = hk_atomic_load_relaxed(&g_ordmap[dev]);
    if (HK_LIKELY(v != 0)) return v - 1000;
    char key[HK_UUID_MAX] = "";
    int known = key_of(dev, key) == 0;
    int ldev = hk_device_resolve(dev, known ? key : NULL);
    if (ldev < 0) ldev = HK_ENODEV;
    if (hk_log_debug()) hk_log("HIP device %d (%s) -> ledger index %d", dev, known ? key : "bus ID unknown", ldev);
    hk_atomic_store_relaxed(&g_ordmap[dev], ldev + 1000);
    return ldev;
}

int hk_hip_current(int *dev) { return hk_hip.hipGetDevice && hk_hip.hipGetDevice(dev) == hipSuccess ? 0 : -1; }

int hk_hip_ordinal_of_key(const char *uuid) {
    hk_preload_load(&hk_shim_hip);
    int n = 0;
    if (!hk_hip.hipGetDeviceCount || hk_hip.hipGetDeviceCount(&n) != hipSuccess) return -1;
    for (int d = 0; d < n; d++) {
        char key[HK_UUID_MAX];
        if (key_of(d, key) == 0 && hk_uuid_equal(key, uuid)) return d;
    }
    return -1;
}

int hk_hip_admit(int *dev, uint64_t charge, int *ldev, int *skip) {
    *skip = 0;
    int st = hk_preload_ready();
    if (HK_UNLIKELY(st == HK_STATE_FAILCLOSED)) return HK_EFAILCLOSED;
    if (st == HK_STATE_DORMANT || (*dev < 0 && hk_hip_current(dev) != 0)) {
        *skip = 1;
        return HK_OK;
    }
    *ldev = hk_hip_ldev(*dev);
    if (*ldev < 0) return HK_ENOMEM; /* a device outside the claim has no quota */
    return hk_mem_reserve(*ldev, charge);
}

/* An allocation's owner in the tracking table: its device ordinal + 1 (0 is "nothing"). */
static uint64_t owner_of(int dev) { return dev >= 0 ? (uint64_t)dev + 1 : 0; }

int hk_hip_remember(uint64_t key, uint32_t kind, int dev, int ldev, uint64_t charge) {
    int rc = hk_track_alloc_owned(key, kind, ldev, charge, owner_of(dev));
    if (HK_LIKELY(rc == HK_OK)) return 0;
    if (rc == HK_EEXIST) {
        /* freed through a path we do not see: drop the stale charge and take the new one */
        int odev;
        uint64_t osize;
        if (hk_track_free(key, kind, &odev, &osize) == HK_OK) hk_mem_release(odev, osize);
        if (hk_track_alloc_owned(key, kind, ldev, charge, owner_of(dev)) == HK_OK) return 0;
    }
    hk_mem_release(ldev, charge);
    return 1;
}

void hk_hip_remember_pool(uint64_t key, int dev, uintptr_t pool) {
    int odev;
    uint64_t old;
    (void)hk_track_free(key, HK_KIND_POOLPTR, &odev, &old); /* a stale entry of this address */
    (void)hk_track_alloc_owned(key, HK_KIND_POOLPTR, dev, (uint64_t)pool | 1u, owner_of(dev));
}

static void give_back(int ldev, uint64_t size) { hk_mem_release(ldev, size); }
static void no_charge(int ldev, uint64_t pool) { (void)ldev, (void)pool; }

void hk_hip_device_reset(int dev) {
    hk_track_drop_owner(owner_of(dev), HK_KIND_HIP_PTR, give_back);
    hk_track_drop_owner(owner_of(dev), HK_KIND_HIP_ARRAY, give_back);
    hk_track_drop_owner(owner_of(dev), HK_KIND_HIP_GRAPHMEM, give_back);
    hk_track_drop_owner(owner_of(dev), HK_KIND_POOLPTR, no_charge); /* their charges: the pointers' */
    int ldev = hk_hip_ldev(dev);
    if (ldev >= 0) hk_pool_device_gone(ldev);
}

void hk_hip_forget(uint64_t key, uint32_t kind) {
    int dev;
    uint64_t size;
    if (hk_track_free(key, kind, &dev, &size) == HK_OK) hk_mem_release(dev, size);
}

/* total = min(quota, device), free = min(device free, total - the claim's usage), saturating;
   processes that died are reclaimed first (memory-info calls are rare). */
void hk_hip_meminfo(int dev, size_t *free_b, size_t *total_b) {
    if (hk_preload_ready() != HK_STATE_READY) return;
    if (dev < 0 && hk_hip_current(&dev) != 0) return;
    int ldev = hk_hip_ldev(dev);
    if (ldev < 0) {
        if (free_b) *free_b = 0;
        *total_b = 0;
        return;
    }
    uint64_t limit = hk_mem_limit(ldev);
    if (limit == HK_MEM_UNLIMITED) return;
    uint64_t total = limit < *total_b ? limit : *total_b;
    *total_b = (size_t)total;
    if (!free_b) return;
    hk_reclaim();
    uint64_t used = hk_mem_used(ldev);
    uint64_t free_q = used >= total ? 0 : total - used;
    if (free_q < *free_b) *free_b = (size_t)free_q;
}
