/* limiter.c - claim-wide device-time token bucket (see limiter.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "limiter.h"

#include "atomic.h"

#include <sched.h>
#include <stdint.h>
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
    lim->strict = 0;
    hk_atomic_store_relaxed(&lim->xlocal_tokens_ns, 0);
    hk_atomic_store_relaxed(&lim->xlocal_last_ns, hk_limiter_now_ns());
    if (!area || share_percent == 0 || share_percent >= 100) return;
    hk_limiter_shared *s = (hk_limiter_shared *)area;
    uint32_t v = hk_atomic_load_acquire(&s->xversion);
    if (v == 0) {
        uint32_t expect = 0;
        if (hk_atomic_cas_strong_acq_rel(&s->xversion, &expect, 1)) {
            hk_atomic_store_relaxed(&s->xshare, share_percent);
            hk_atomic_store_relaxed(&s->xtokens_ns, 0);
            hk_atomic_store_relaxed(&s->xlast_refill_ns, hk_limiter_now_ns());
            hk_atomic_store_release(&s->xversion, HK_LIMITER_VERSION);
        }
    }
    /* Another process is setting it up: it takes a few instructions; a process killed in
       between leaves 1, which we take over after a bounded wait. */
    for (int spins = 0; hk_atomic_load_acquire(&s->xversion) == 1; spins++) {
        if (spins > 10000) {
            hk_atomic_store_relaxed(&s->xshare, share_percent);
            hk_atomic_store_relaxed(&s->xlast_refill_ns, hk_limiter_now_ns());
            hk_atomic_store_release(&s->xversion, HK_LIMITER_VERSION);
            break;
        }
        sched_yield();
    }
    if (hk_atomic_load_acquire(&s->xversion) != HK_LIMITER_VERSION) {
        /* Written out of shape (by a tenant: the area is in its writable ledger). A limit must not
           turn into none: this process keeps to its share with a bucket of its own. */
        hk_atomic_store_relaxed(&lim->own.xshare, share_percent);
        hk_atomic_store_relaxed(&lim->own.xtokens_ns, 0);
        hk_atomic_store_relaxed(&lim->own.xlast_refill_ns, hk_limiter_now_ns());
        hk_atomic_store_release(&lim->own.xversion, HK_LIMITER_VERSION);
        s = &lim->own;
    }
    lim->shared = s;
}

/* Refill one bucket (tokens, last refill) up to `now`; returns its balance. */
static int64_t refill(_Atomic int64_t *tokens, _Atomic int64_t *lastp, _Atomic int64_t *granted, uint32_t share,
                      int64_t now) {
    int64_t last = hk_atomic_load_relaxed(lastp);
    if (now - last >= HK_LIMITER_QUANTUM_NS && hk_atomic_cas_strong_acq_rel(lastp, &last, now)) {
        /* This thread won the quantum: credit (now - last) * share, capped at the burst. */
        int64_t span = now - last;
        if (span > 1000000000LL) span = 1000000000LL; /* a refill time written into the past */
        int64_t add = span * (int64_t)share / 100;
        int64_t cur = hk_atomic_load_relaxed(tokens);
        int64_t next;
        do {
            next = cur + add;
            if (next > HK_LIMITER_BURST_NS || next < cur) next = HK_LIMITER_BURST_NS;
        } while (!hk_atomic_cas_weak_acq_rel(tokens, &cur, next));
        if (granted && next > cur) hk_atomic_add_relaxed(granted, next - cur);
        return next;
    }
    int64_t b = hk_atomic_load_acquire(tokens);
    return b > HK_LIMITER_BURST_NS ? HK_LIMITER_BURST_NS : b; /* more than the burst: written, not earned */
}

int64_t hk_limiter_balance(hk_limiter *lim, int64_t now) {
    hk_limiter_shared *s = lim->shared;
    int64_t shared = refill(&s->xtokens_ns, &s->xlast_refill_ns, &s->xgranted_ns, lim->share, now);
    int64_t local = refill(&lim->xlocal_tokens_ns, &lim->xlocal_last_ns, NULL, lim->share, now);
    return local < shared ? local : shared;
}

void hk_limiter_charge(hk_limiter *lim, int64_t gpu_ns) {
    if (gpu_ns <= 0) return;
    hk_atomic_sub_acq_rel(&lim->shared->xtokens_ns, gpu_ns);
    hk_atomic_sub_acq_rel(&lim->xlocal_tokens_ns, gpu_ns);
    hk_atomic_add_relaxed(&lim->shared->xcharged_ns, gpu_ns);
}

/* x * num / den rounded up, for 0 <= num <= den: no intermediate product above x. */
static int64_t scale_up(int64_t x, int64_t num, int64_t den) {
    int64_t q = x / den, r = x % den;
    return q * num + (r * num + den - 1) / den;
}

int64_t hk_limiter_cost(int64_t device_ns, uint32_t sm_ppm, uint32_t ratio_milli) {
    if (device_ns <= 0) return 0;
    int64_t c = device_ns;
    if (ratio_milli > 1000) { /* a boost: the work was cheaper than at full load */
        int64_t q = c / 1000, r = c % 1000;
        c = q > INT64_MAX / (int64_t)ratio_milli ? INT64_MAX : q * ratio_milli + r * ratio_milli / 1000;
    }
    if (sm_ppm == 0 || sm_ppm > HK_SM_PPM_FULL) sm_ppm = HK_SM_PPM_FULL;
    return scale_up(c, sm_ppm, HK_SM_PPM_FULL);
}

int64_t hk_limiter_charge_work(hk_limiter *lim, int64_t device_ns, uint32_t sm_ppm, uint32_t ratio_milli) {
    int64_t c = hk_limiter_cost(device_ns, sm_ppm, ratio_milli);
    if (c <= 0) return 0;
    hk_limiter_charge(lim, c);
    hk_atomic_add_relaxed(&lim->shared->xdevice_ns, device_ns);
    hk_atomic_store_relaxed(&lim->shared->xsm_ppm, sm_ppm == 0 || sm_ppm > HK_SM_PPM_FULL ? HK_SM_PPM_FULL : sm_ppm);
    return c;
}

int64_t hk_limiter_wait_ns(const hk_limiter *lim, int64_t balance) {
    if (balance >= 0) return 0;
    int64_t w = -balance * 100 / (int64_t)lim->share;
    if (w < HK_LIMITER_QUANTUM_NS) w = HK_LIMITER_QUANTUM_NS;
    return w > 20000000LL ? 20000000LL : w;
}

void hk_limiter_note_throttle(hk_limiter *lim, int64_t ns) {
    hk_atomic_add_relaxed(&lim->shared->xthrottles, 1);
    if (ns > 0) hk_atomic_add_relaxed(&lim->shared->xthrottled_ns, ns);
}

void hk_limiter_note_yield(hk_limiter *lim, int64_t ns) {
    if (ns > 0) hk_atomic_add_relaxed(&lim->shared->xyielded_ns, ns);
}

void hk_limiter_note_elapsed(hk_limiter *lim, int64_t ns) {
    if (ns > 0) hk_atomic_add_relaxed(&lim->shared->xelapsed_ns, ns);
}

void hk_limiter_note_clock(hk_limiter *lim, uint32_t factor_milli, uint32_t elastic_milli, int fitted) {
    hk_atomic_store_relaxed(&lim->shared->xfactor_milli, factor_milli);
    hk_atomic_store_relaxed(&lim->shared->xelastic_milli, elastic_milli);
    hk_atomic_store_relaxed(&lim->shared->xelastic_fit, fitted ? 1u : 0u);
}

void hk_limiter_read(const void *area, hk_limiter_stats *out) {
    const hk_limiter_shared *s = (const hk_limiter_shared *)area;
    out->active = 0;
    out->share = 0;
    out->tokens_ns = out->charged_ns = out->throttled_ns = out->granted_ns = out->device_ns = 0;
    out->sm_ppm = out->factor_milli = out->elastic_milli = out->elastic_fit = 0;
    out->yielded_ns = out->elapsed_ns = out->throttles = 0;
    if (!s || hk_atomic_load_acquire(&s->xversion) != HK_LIMITER_VERSION) return;
    out->active = 1;
    out->share = hk_atomic_load_relaxed(&s->xshare);
    out->tokens_ns = hk_atomic_load_relaxed(&s->xtokens_ns);
    out->charged_ns = hk_atomic_load_relaxed(&s->xcharged_ns);
    out->throttled_ns = hk_atomic_load_relaxed(&s->xthrottled_ns);
    out->granted_ns = hk_atomic_load_relaxed(&s->xgranted_ns);
    out->device_ns = hk_atomic_load_relaxed(&s->xdevice_ns);
    out->sm_ppm = hk_atomic_load_relaxed(&s->xsm_ppm);
    out->factor_milli = hk_atomic_load_relaxed(&s->xfactor_milli);
    out->elastic_milli = hk_atomic_load_relaxed(&s->xelastic_milli);
    out->elastic_fit = hk_atomic_load_relaxed(&s->xelastic_fit);
    out->yielded_ns = hk_atomic_load_relaxed(&s->xyielded_ns);
    out->elapsed_ns = hk_atomic_load_relaxed(&s->xelapsed_ns);
    out->throttles = hk_atomic_load_relaxed(&s->xthrottles);
}
