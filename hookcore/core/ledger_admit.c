/* ledger_admit.c -- admission against the shared ledger: reserve and release a claim's memory
 * (the invariants are in ledger.c's header).
 */
#include <sched.h>
#include <time.h>

#include "internal.h"

uint64_t hk__ledger_sum(const hk_ledger *l, int dev) {
    uint64_t sum = 0;
    uint32_t hwm = hk_atomic_load_seq_cst(&l->hdr->xslot_hwm);
    if (hwm > HK_MAX_SLOTS) hwm = HK_MAX_SLOTS;
    for (uint32_t i = 0; i < hwm; i++) {
        hk__slot *s = &l->slots[i];
        if (HK_OWNER_STATE(hk_atomic_load_seq_cst(&s->xowner)) != HK_SLOT_LIVE) continue;
        uint64_t v = HK_USED_BYTES(hk_atomic_load_seq_cst(&s->xused[dev]));
        sum = (sum + v < sum) ? UINT64_MAX : sum + v; /* saturate */
    }
    return sum;
}

static void peak_max(hk__dev *d, uint64_t v) {
    uint64_t p = hk_atomic_load_relaxed(&d->xpeak);
    while (p < v && !hk_atomic_cas_weak_relaxed(&d->xpeak, &p, v)) {}
}

static void backoff(int attempt) {
    if (attempt <= 1) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000L};
    nanosleep(&ts, NULL);
}

/* Change my own count (process memory) by `bytes`: add, or subtract saturating at 0. Returns the
   new value, or UINT64_MAX when an add would overflow the counter (nothing changed). */
static uint64_t change_mine(hk_ledger *l, int dev, uint64_t bytes, int sub) {
    uint64_t v = hk_atomic_load_seq_cst(&l->xmine[dev]), nv;
    do {
        if (sub)
            nv = v > bytes ? v - bytes : 0;
        else if (bytes > HK_USED_MASK - v)
            return UINT64_MAX;
        else
            nv = v + bytes;
    } while (!hk_atomic_cas_weak_seq_cst(&l->xmine[dev], &v, nv));
    return nv;
}

/* Write my own count into my slot, while the slot still carries my tag. The slot is only ever set
   from xmine (never incremented), so whatever was written there behind my back is replaced by the
   truth. Concurrent publishers converge: each re-reads xmine after the slot's current value, so the
   last successful CAS carries the newest count. Returns 0, or -1 when the slot is another owner's. */
static int publish_mine(hk_ledger *l, int dev, uint64_t expect_bytes) {
    _Atomic uint64_t *c = &l->me->xused[dev];
    uint64_t tag = HK_OWNER_GEN(l->my_owner) & 0xffffu;
    uint64_t v = hk_atomic_load_seq_cst(c), nv;
    int checked = 0;
    for (;;) {
        if (HK_USED_TAG(v) != tag) return -1;
        uint64_t mine = hk_atomic_load_seq_cst(&l->xmine[dev]);
        if (!checked) { /* my slot should hold my previous count: anything else was written by someone else */
            checked = 1;
            if (HK_USED_BYTES(v) != expect_bytes && HK_USED_BYTES(v) != mine) hk_atomic_add_relaxed(&l->xrepairs, 1);
        }
        nv = HK_USED_MAKE(tag, mine);
        if (v == nv || hk_atomic_cas_weak_seq_cst(c, &v, nv)) return 0;
    }
}

/* Change my count and publish it. Returns 0, or -1 when the count would overflow or my slot is
   another owner's now (then nothing is published). */
static int add_mine(hk_ledger *l, int dev, uint64_t bytes, int sub) {
    uint64_t before = hk_atomic_load_seq_cst(&l->xmine[dev]);
    uint64_t now = change_mine(l, dev, bytes, sub);
    if (now == UINT64_MAX) return -1;
    if (publish_mine(l, dev, before) != 0) {
        if (!sub) change_mine(l, dev, bytes, 1);
        return -1;
    }
    return 0;
}

/* My slot's owner word changed: someone took my slot's lock, i.e. this process closed (or an
   application closed for it) the ledger descriptor, or the word was overwritten. Charges can no
   longer be counted: stop, and touch the slot no more (its counters may already be another owner's). */
static __attribute__((noinline)) int slot_lost(hk_ledger *l) {
    l->me = NULL;
    l->my_index = -1;
    l->lost = 1;
    return HK_EFAILCLOSED;
}

static inline int owner_changed(const hk_ledger *l) {
    return hk_unlikely(hk_atomic_load_relaxed(&l->me->xowner) != l->my_owner);
}

/* Claim-wide usage as admission sees it: the other live slots as the file says, plus my own count
   from process memory (my slot in the file may have been edited; my count cannot be). */
static uint64_t admitted_sum(hk_ledger *l, int dev) {
    uint64_t sum = hk_atomic_load_seq_cst(&l->xmine[dev]);
    uint32_t hwm = hk_atomic_load_seq_cst(&l->hdr->xslot_hwm);
    uint32_t mine = (uint32_t)l->my_index + 1;
    if (hk_unlikely(hwm < mine)) { /* lowered below my own slot: put it back (others must see me) */
        while (hwm < mine && !hk_atomic_cas_weak_seq_cst(&l->hdr->xslot_hwm, &hwm, mine)) {}
        if (hwm < mine) hwm = mine;
    }
    uint32_t seen = hk_atomic_load_relaxed(&l->xhwm_seen);
    while (seen < hwm && !hk_atomic_cas_weak_relaxed(&l->xhwm_seen, &seen, hwm)) {}
    if (seen > hwm) hwm = seen;
    if (hwm > HK_MAX_SLOTS) hwm = HK_MAX_SLOTS;
    for (uint32_t i = 0; i < hwm; i++) {
        if ((int)i == l->my_index) continue;
        hk__slot *s = &l->slots[i];
        if (HK_OWNER_STATE(hk_atomic_load_seq_cst(&s->xowner)) != HK_SLOT_LIVE) continue;
        uint64_t v = HK_USED_BYTES(hk_atomic_load_seq_cst(&s->xused[dev]));
        sum = (sum + v < sum) ? UINT64_MAX : sum + v; /* saturate */
    }
    return sum;
}

int hk_ledger_reserve(hk_ledger *l, int dev, uint64_t bytes) {
    if (hk_unlikely(l == NULL || dev < 0 || dev >= HK_MAX_DEVICES)) return HK_EINVAL;
    hk__slot *me = l->me;
    if (hk_unlikely(me == NULL)) return l->lost ? HK_EFAILCLOSED : HK_EINVAL;
    hk__dev *d = &l->dev[dev];
    const uint64_t limit = l->lim[dev]; /* from the process's own config, never from the file */
    if (limit == HK_MEM_UNLIMITED) {
        if (add_mine(l, dev, bytes, 0) != 0) return owner_changed(l) ? slot_lost(l) : HK_ENOMEM;
        return owner_changed(l) ? slot_lost(l) : HK_OK;
    }
    if (bytes > limit) return HK_ENOMEM;
    for (int attempt = 0; attempt < 4; attempt++) {
        if (add_mine(l, dev, bytes, 0) != 0) return owner_changed(l) ? slot_lost(l) : HK_ENOMEM;
        uint64_t sum = admitted_sum(l, dev);
        if (owner_changed(l)) return slot_lost(l);
        if (hk_likely(sum <= limit)) {
            peak_max(d, sum);
            return HK_OK;
        }
        if (add_mine(l, dev, bytes, 1) != 0) return slot_lost(l);
        /* Slow path: maybe dead processes hold quota, maybe a racer will roll back. */
        if (attempt == 0 && hk_ledger_reclaim(l) > 0) continue;
        if (attempt < 3) backoff(attempt);
    }
    return HK_ENOMEM;
}

void hk_ledger_release(hk_ledger *l, int dev, uint64_t bytes) {
    if (l == NULL || l->me == NULL || dev < 0 || dev >= HK_MAX_DEVICES || bytes == 0) return;
    if (owner_changed(l) || add_mine(l, dev, bytes, 1) != 0) slot_lost(l); /* not my counter any more */
}

uint64_t hk_ledger_used(const hk_ledger *l, int dev) {
    if (l == NULL || dev < 0 || dev >= HK_MAX_DEVICES) return 0;
    return hk__ledger_sum(l, dev);
}

int hk_ledger_slot_index(const hk_ledger *l) { return l ? l->my_index : -1; }

uint64_t hk__ledger_repairs(const hk_ledger *l) { return l ? hk_atomic_load_relaxed(&l->xrepairs) : 0; }
