/* limiter.c - claim-wide GPU-time token bucket (see limiter.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "limiter.h"

#include <sched.h>
#include <time.h>

_Static_assert(sizeof(hk_limiter_shared) <= 256, "limiter state must fit HK_LIMITER_BYTES");

int64_t hk_limiter_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void hk_limiter_attach(hk_limiter *lim, void *area, uint32_t share_percent) {
    lim->shared = NULL;
    lim->share = share_percent;
    if (!area || share_percent == 0 || share_percent >= 100) return;
    hk_limiter_shared *s = (hk_limiter_shared *)area;
    uint32_t v = atomic_load_explicit(&s->xversion, memory_order_acquire);
    if (v == 0) {
        uint32_t expect = 0;
        if (atomic_compare_exchange_strong_explicit(&s->xversion, &expect, 1, memory_order_acq_rel,
                                                    memory_order_acquire)) {
            s->share = share_percent;
            atomic_store_explicit(&s->xtokens_ns, 0, memory_order_relaxed);
            atomic_store_explicit(&s->xlast_refill_ns, hk_limiter_now_ns(), memory_order_relaxed);
            atomic_store_explicit(&s->xversion, HK_LIMITER_VERSION, memory_order_release);
        }
    }
    /* Another process is setting it up: it takes a few instructions; a process killed in
       between leaves 1, which we take over after a bounded wait. */
    for (int spins = 0; atomic_load_explicit(&s->xversion, memory_order_acquire) == 1; spins++) {
        if (spins > 10000) {
            s->share = share_percent;
            atomic_store_explicit(&s->xlast_refill_ns, hk_limiter_now_ns(), memory_order_relaxed);
            atomic_store_explicit(&s->xversion, HK_LIMITER_VERSION, memory_order_release);
            break;
        }
        sched_yield();
    }
    if (atomic_load_explicit(&s->xversion, memory_order_acquire) != HK_LIMITER_VERSION) return;  /* foreign layout */
    lim->shared = s;
}

int64_t hk_limiter_balance(hk_limiter *lim, int64_t now) {
    hk_limiter_shared *s = lim->shared;
    int64_t last = atomic_load_explicit(&s->xlast_refill_ns, memory_order_relaxed);
    if (now - last >= HK_LIMITER_QUANTUM_NS &&
        atomic_compare_exchange_strong_explicit(&s->xlast_refill_ns, &last, now, memory_order_acq_rel,
                                                memory_order_relaxed)) {
        /* This thread won the quantum: credit (now - last) * share, capped at the burst. */
        int64_t add = (now - last) * (int64_t)lim->share / 100;
        int64_t cur = atomic_load_explicit(&s->xtokens_ns, memory_order_relaxed);
        int64_t next;
        do {
            next = cur + add;
            if (next > HK_LIMITER_BURST_NS) next = cur > HK_LIMITER_BURST_NS ? cur : HK_LIMITER_BURST_NS;
        } while (!atomic_compare_exchange_weak_explicit(&s->xtokens_ns, &cur, next, memory_order_acq_rel,
                                                        memory_order_relaxed));
        return next;
    }
    return atomic_load_explicit(&s->xtokens_ns, memory_order_acquire);
}

void hk_limiter_charge(hk_limiter *lim, int64_t gpu_ns) {
    if (gpu_ns <= 0) return;
    atomic_fetch_sub_explicit(&lim->shared->xtokens_ns, gpu_ns, memory_order_acq_rel);
    atomic_fetch_add_explicit(&lim->shared->xcharged_ns, gpu_ns, memory_order_relaxed);
}

int64_t hk_limiter_wait_ns(const hk_limiter *lim, int64_t balance) {
    if (balance >= 0) return 0;
    int64_t w = -balance * 100 / (int64_t)lim->share;
    if (w < HK_LIMITER_QUANTUM_NS) w = HK_LIMITER_QUANTUM_NS;
    return w > 20000000LL ? 20000000LL : w;
}

void hk_limiter_note_throttle(hk_limiter *lim, int64_t ns) {
    if (ns > 0) atomic_fetch_add_explicit(&lim->shared->xthrottled_ns, ns, memory_order_relaxed);
}
