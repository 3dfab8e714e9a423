/* pool.c - the books of memory pools that keep freed memory (pool.h): one entry per pool given a
 * threshold in a fixed table, every field atomic, so a free, an allocation and a trim of the same
 * pool may race without a lock (a CAS on the retained bytes decides each). */
#include "pool.h"

#include "atomic.h"
#include "hookcore.h"

struct hk_pool {
    _Atomic(uintptr_t) xkey; /* 0 = a free entry */
    _Atomic int xdev;        /* the ledger device its allocations are charged to; -1 unknown */
    _Atomic uint64_t xthreshold;
    _Atomic uint64_t xretained; /* charged, freed, kept by the pool */
};
static hk_pool g_pools[HK_MAX_POOLS];
static _Atomic int g_any;

int hk_pool_any(void) { return hk_atomic_load_relaxed(&g_any); }

static hk_pool *find(uintptr_t key, int create) {
    if (!key) return NULL;
    for (int i = 0; i < HK_MAX_POOLS; i++)
        if (hk_atomic_load_acquire(&g_pools[i].xkey) == key) return &g_pools[i];
    if (!create) return NULL;
    for (int i = 0; i < HK_MAX_POOLS; i++) {
        uintptr_t expect = 0;
        if (hk_atomic_cas_strong_acq_rel(&g_pools[i].xkey, &expect, key)) {
            hk_atomic_store_relaxed(&g_pools[i].xdev, -1);
            hk_atomic_store_relaxed(&g_pools[i].xthreshold, 0);
            hk_atomic_store_relaxed(&g_pools[i].xretained, 0);
            return &g_pools[i];
        }
        if (expect == key) return &g_pools[i];
    }
    return NULL;
}

hk_pool *hk_pool_retaining(uintptr_t key) {
    hk_pool *p = find(key, 0);
    return p && hk_atomic_load_relaxed(&p->xthreshold) ? p : NULL;
}

uint64_t hk_pool_take(hk_pool *p, uint64_t want) {
    uint64_t r = hk_atomic_load_acquire(&p->xretained), take;
    do { take = r < want ? r : want; } while (take && !hk_atomic_cas_weak_acq_rel(&p->xretained, &r, r - take));
    return take;
}

void hk_pool_keep(hk_pool *p, int dev, uint64_t bytes) {
    if (dev >= 0) hk_atomic_store_relaxed(&p->xdev, dev); /* where a trim gives back to */
    uint64_t t = hk_atomic_load_acquire(&p->xthreshold);
    uint64_t r = hk_atomic_load_acquire(&p->xretained), keep;
    do {
        keep = r >= t ? 0 : (t - r < bytes ? t - r : bytes);
    } while (keep && !hk_atomic_cas_weak_acq_rel(&p->xretained, &r, r + keep));
    if (dev < 0) dev = hk_atomic_load_relaxed(&p->xdev);
    if (bytes > keep && dev >= 0) hk_mem_release(dev, bytes - keep);
}

/* Retained memory above `keep` goes back to the quota. */
static void trim(hk_pool *p, uint64_t keep) {
    uint64_t r = hk_atomic_load_acquire(&p->xretained);
    while (r > keep && !hk_atomic_cas_weak_acq_rel(&p->xretained, &r, keep)) {}
    int dev = hk_atomic_load_relaxed(&p->xdev);
    if (r > keep && dev >= 0) hk_mem_release(dev, r - keep);
}

int hk_pool_threshold_begin(uintptr_t key, uint64_t threshold, hk_pool **books) {
    *books = find(key, threshold != 0);
    return threshold != 0 && !*books ? HK_ENOSPC : HK_OK;
}

void hk_pool_threshold_end(hk_pool *p, uint64_t threshold, int applied) {
    if (!p) return;
    if (!applied) {
        if (!hk_atomic_load_acquire(&p->xthreshold) && !hk_atomic_load_acquire(&p->xretained))
            hk_atomic_store_release(&p->xkey, 0); /* made for this call, which did not happen */
        return;
    }
    hk_atomic_store_release(&p->xthreshold, threshold);
    if (threshold) hk_atomic_store_release(&g_any, 1);
    trim(p, threshold);
}

void hk_pool_trim(uintptr_t key, uint64_t keep) {
    hk_pool *p = find(key, 0);
    if (p) trim(p, keep);
}

void hk_pool_destroyed(uintptr_t key) {
    hk_pool *p = find(key, 0);
    if (!p) return;
    hk_atomic_store_release(&p->xthreshold, 0);
    trim(p, 0);
    hk_atomic_store_release(&p->xkey, 0);
}

void hk_pool_device_gone(int dev) {
    for (int i = 0; i < HK_MAX_POOLS; i++)
        if (hk_atomic_load_acquire(&g_pools[i].xkey) && hk_atomic_load_relaxed(&g_pools[i].xdev) == dev)
            trim(&g_pools[i], 0);
}
