/* test_limiter.c -- the compute limiter's books and the cost of a batch, on a clock the test sets. */
#include <stddef.h>

#include "core_tests.h"

/* The limiter's books on a clock the test sets (hk_limiter_balance takes `now`): refills grant
   share x time up to the burst, charges add to charged, and granted - charged is the balance. */
void test_limiter_books(void) {
    static _Alignas(64) unsigned char area[HK_LIMITER_BYTES];
    memset(area, 0, sizeof area);
    hk_limiter lim;
    hk_limiter_attach(&lim, area, 30);
    CHECK(lim.shared == (hk_limiter_shared *)(void *)area);
    int64_t t0 = 1000000000000LL;
    hk_atomic_store_relaxed(&lim.shared->xlast_refill_ns, t0);
    hk_atomic_store_relaxed(&lim.xlocal_last_ns, t0);
    hk_limiter_stats st;

    CHECK(hk_limiter_balance(&lim, t0 + 20000000) == 6000000); /* 20 ms at 30% */
    hk_limiter_charge(&lim, 16000000);                         /* 16 ms of work: 10 ms in debt */
    CHECK(hk_limiter_balance(&lim, t0 + 20000000) == -10000000);
    CHECK(hk_limiter_wait_ns(&lim, -10000000) == 20000000); /* repaid in 33 ms: wait at most 20, re-check */
    hk_limiter_read(area, &st);
    CHECK(st.active == 1 && st.share == 30 && st.charged_ns == 16000000 && st.granted_ns == 6000000);
    CHECK(st.charged_ns - st.granted_ns == -st.tokens_ns);

    CHECK(hk_limiter_balance(&lim, t0 + 20000000 + 33333334) == 0);            /* 33.3 ms later: repaid */
    CHECK(hk_limiter_balance(&lim, t0 + 2000000000LL) == HK_LIMITER_BURST_NS); /* idle: only the burst */
    hk_limiter_read(area, &st);
    CHECK(st.granted_ns == 16000000 + HK_LIMITER_BURST_NS && st.tokens_ns == HK_LIMITER_BURST_NS);

    /* a balance written above the burst (by a tenant: the area is in its ledger) grants nothing */
    hk_atomic_store_relaxed(&lim.shared->xtokens_ns, 1LL << 62);
    CHECK(hk_limiter_balance(&lim, t0 + 3000000000LL) == HK_LIMITER_BURST_NS);
    hk_limiter_read(area, &st);
    CHECK(st.granted_ns == 16000000 + HK_LIMITER_BURST_NS);
    printf("ok limiter_books (granted, charged, debt, burst cap, written balance)\n");
}

/* A batch costs device time x its context's SM fraction (x the clock ratio under a strict cap);
   an unknown or impossible fraction is a full charge (review 2026-12-04 #5: the hook's ceiling
   under MPS without limiting an honest client twice). */
void test_limiter_cost(void) {
    CHECK(hk_limiter_cost(10000000, HK_SM_PPM_FULL, 0) == 10000000);     /* all SMs, no strict cap */
    CHECK(hk_limiter_cost(10000000, 300000, 0) == 3000000);              /* 30% of the SMs */
    CHECK(hk_limiter_cost(13200000, 40 * 1000000u / 132, 0) == 3999996); /* 40 of 132 SMs */
    CHECK(hk_limiter_cost(1000001, 300000, 0) == 300001);                /* rounded up */
    CHECK(hk_limiter_cost(10000000, 0, 0) == 10000000);                  /* unknown: full */
    CHECK(hk_limiter_cost(10000000, HK_SM_PPM_FULL + 1, 0) == 10000000); /* above the device: full */
    CHECK(hk_limiter_cost(10000000, 300000, 1500) == 4500000);           /* both factors multiply */
    CHECK(hk_limiter_cost(10000000, 300000, 800) == 3000000);            /* a slowdown is not refunded */
    CHECK(hk_limiter_cost(1000000, HK_SM_PPM_FULL, 1320) == 1320000);    /* a strict cap's clock factor alone */
    CHECK(hk_limiter_cost(1, 1, 0) == 1);                                /* never rounds work to nothing */
    CHECK(hk_limiter_cost(0, 300000, 0) == 0 && hk_limiter_cost(-5, 300000, 0) == 0);
    CHECK(hk_limiter_cost(INT64_MAX, 500000, 0) == INT64_MAX / 2 + 1); /* no overflow on the way */

    static _Alignas(64) unsigned char area[HK_LIMITER_BYTES];
    memset(area, 0, sizeof area);
    hk_limiter lim;
    hk_limiter_attach(&lim, area, 30);
    hk_limiter_stats st;
    hk_limiter_read(area, &st);
    CHECK(st.device_ns == 0 && st.sm_ppm == 0); /* nothing charged yet */
    CHECK(hk_limiter_charge_work(&lim, 10000000, 300000, 0) == 3000000);
    CHECK(hk_limiter_charge_work(&lim, 10000000, 0, 0) == 10000000);
    hk_limiter_read(area, &st);
    CHECK(st.charged_ns == 13000000 && st.device_ns == 20000000 && st.sm_ppm == HK_SM_PPM_FULL);
    CHECK(offsetof(hk_limiter_shared, xgranted_ns) == 40 && offsetof(hk_limiter_shared, xdevice_ns) == 48 &&
          offsetof(hk_limiter_shared, xsm_ppm) == 56); /* appended: older readers keep their offsets */

    /* the strict cap's clock statistics (issue 26), appended after them; an area set up before reads 0 */
    CHECK(st.factor_milli == 0 && st.elastic_milli == 0 && st.elastic_fit == 0 && st.yielded_ns == 0 &&
          st.elapsed_ns == 0);
    hk_limiter_note_clock(&lim, 1320, 530, 1);
    hk_limiter_note_yield(&lim, 7000);
    hk_limiter_note_yield(&lim, -5); /* nothing negative is recorded */
    hk_limiter_note_elapsed(&lim, 9000);
    hk_limiter_read(area, &st);
    CHECK(st.factor_milli == 1320 && st.elastic_milli == 530 && st.elastic_fit == 1 && st.yielded_ns == 7000 &&
          st.elapsed_ns == 9000);
    CHECK(offsetof(hk_limiter_shared, xfactor_milli) == 64 && offsetof(hk_limiter_shared, xyielded_ns) == 80 &&
          offsetof(hk_limiter_shared, xelapsed_ns) == 88 && sizeof(hk_limiter_shared) <= HK_LIMITER_BYTES);

    /* the wait count (the wake), appended after them */
    CHECK(st.throttles == 0 && st.throttled_ns == 0);
    hk_limiter_note_throttle(&lim, 4000);
    hk_limiter_note_throttle(&lim, 0); /* a wait that took no time still counts */
    hk_limiter_read(area, &st);
    CHECK(st.throttles == 2 && st.throttled_ns == 4000 && offsetof(hk_limiter_shared, xthrottles) == 96);
    printf("ok limiter_cost (SM fraction x clock ratio, fail safe, statistics)\n");
}
