/* test_elastic.c -- the clock elasticity a strict cap learns (elastic.h), fed synthetic batches (no
 * clock is read): batches whose time follows a known law t(f) = T (1 - phi + phi f_full / f) at clocks
 * the test chooses. It converges to phi for compute-bound, memory-bound and mixed work, holds the
 * prior without clock variation, ignores batches another tenant's work inflated, stays in [0, 1] for
 * laws outside the model, moves at most a step per batch, and charges the factor
 * 1 / (1 - phi + phi x) (never a refund).
 */
#include <math.h>
#include <stdint.h>

#include "../elastic.h"
#include "core_tests.h"

#define CHECK_NEAR(a, b, tol)                                                                             \
    do {                                                                                                  \
        double a_ = (a), b_ = (b);                                                                        \
        if (fabs(a_ - b_) > (tol)) {                                                                      \
            fprintf(stderr, "  FAIL %s:%d: %s = %g, expected %g +- %g\n", __FILE__, __LINE__, #a, a_, b_, \
                    (double)(tol));                                                                       \
            g_failures++;                                                                                 \
        }                                                                                                 \
    } while (0)

/* A deterministic generator (no libc rand state shared with anything). */
static uint64_t g_rng = 88172645463325252ull;
static double uniform(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

/* x1000 of f_full / f */
static uint32_t x_of(double f_full, double f) { return (uint32_t)(1000.0 * f_full / f + 0.5); }

/* A batch of work that takes T ns at the full-load clock, run at clock f, with relative noise. */
static int64_t t_of(double T, double phi, double f_full, double f, double noise) {
    double t = T * (1.0 - phi + phi * f_full / f);
    return (int64_t)(t * (1.0 + noise * (2.0 * uniform() - 1.0)));
}

/* Feed n batches of `sigs` signatures (sizes T_i = 1..4 ms) at clocks drawn from [lo, hi] MHz. */
static void feed(hk_elastic *e, int n, int sigs, double phi, double f_full, double lo, double hi, double noise) {
    for (int i = 0; i < n; i++) {
        int s = i % sigs;
        double f = lo + (hi - lo) * uniform();
        hk_elastic_observe(e, 0x1000u + (uint64_t)s * 7919u, t_of(1e6 * (1 + s), phi, f_full, f, noise),
                           x_of(f_full, f));
    }
}

void test_elastic_converges(void) {
    static const double phis[] = {0.0, 0.25, 0.5, 0.75, 1.0};
    for (size_t k = 0; k < sizeof phis / sizeof phis[0]; k++) {
        hk_elastic e;
        hk_elastic_init(&e, HK_ELASTIC_PRIOR_MILLI, 1);
        /* the H200's range: 1500 MHz at full load, 1980 boosted; 1% noise per batch */
        feed(&e, 2000, 5, phis[k], 1500, 1500, 1980, 0.01);
        CHECK(e.fitted);
        CHECK_NEAR(e.phi_milli / 1000.0, phis[k], 0.06);
        /* and the factor for a batch at 1980 MHz is what that work gains there */
        double want = 1.0 / (1.0 - phis[k] + phis[k] * 1500.0 / 1980.0);
        CHECK_NEAR(hk_elastic_factor_milli(&e, x_of(1500, 1980)) / 1000.0, want, 0.03);
    }
    printf("ok elastic_converges: phi 0, 0.25, 0.5, 0.75, 1 learned within 0.06 from 2000 batches at 1500-1980 MHz\n");
}

void test_elastic_prior(void) {
    hk_elastic e;
    hk_elastic_init(&e, HK_ELASTIC_PRIOR_MILLI, 1);
    feed(&e, 5000, 3, 0.0, 1500, 1980, 1980, 0.02); /* memory-bound work, but the clock never moves */
    CHECK(!e.fitted);
    CHECK(e.phi_milli == HK_ELASTIC_PRIOR_MILLI);
    CHECK(abs((int)hk_elastic_factor_milli(&e, x_of(1500, 1980)) - 1320) <= 1); /* the prior: the whole boost */
    /* one clock change is evidence enough to start moving, not to jump */
    feed(&e, 40, 3, 0.0, 1500, 1500, 1500, 0.0);
    CHECK(e.fitted);
    CHECK((int)e.phi_milli >= HK_ELASTIC_PRIOR_MILLI - 40 * HK_ELASTIC_STEP_MILLI);
    printf("ok elastic_prior: no clock variation, phi stays %u (factor 1.32 at 1980/1500 MHz)\n",
           HK_ELASTIC_PRIOR_MILLI);
}

void test_elastic_given_prior(void) {
    hk_elastic e;
    /* the admin's measured value (a power-bound matmul on this GPU model): charged from the first
       batch and held, whatever the clock does */
    hk_elastic_init(&e, 450, 0);
    CHECK(e.phi_milli == 450 && !e.fitted);
    double want = 1.0 / (1.0 - 0.45 + 0.45 * 1500.0 / 1980.0);
    CHECK_NEAR(hk_elastic_factor_milli(&e, x_of(1500, 1980)) / 1000.0, want, 0.002);
    feed(&e, 5000, 3, 0.45, 1500, 1980, 1980, 0.02);
    CHECK(!e.fitted && e.phi_milli == 450);
    /* batches whose time ignores the clock's jitter (what an H100 matmul shows at a 70% cap) do not
       walk it down: a fit from them under-charged the boost (78.5% for a cap of 70) */
    feed(&e, 3000, 3, 0.0, 1500, 1755, 1905, 0.01);
    CHECK(!e.fitted && e.phi_milli == 450 && e.accepted == 0);
    /* the same batches do teach a claim that was given no value */
    hk_elastic_init(&e, HK_ELASTIC_PRIOR_MILLI, 1);
    feed(&e, 3000, 3, 0.0, 1500, 1500, 1980, 0.01);
    CHECK(e.fitted);
    CHECK_NEAR(e.phi_milli / 1000.0, 0.0, 0.08);
    /* out of range is clamped to the compute-bound bound, never above */
    hk_elastic_init(&e, 5000, 0);
    CHECK(e.phi_milli == 1000);
    printf("ok elastic_given_prior: a given 0.45 is charged %.3f at 1980/1500 MHz and held under any clock; "
           "without one, evidence moves phi\n",
           want);
}

void test_elastic_contention(void) {
    hk_elastic e;
    hk_elastic_init(&e, HK_ELASTIC_PRIOR_MILLI, 1);
    /* memory-bound work; every third batch had another tenant's work in its window (2x its time),
       and those come at the lower clock (the GPU is fuller): a naive fit would read phi ~1 */
    for (int i = 0; i < 3000; i++) {
        int hi = i % 2;
        double f = hi ? 1980 : 1500;
        int64_t t = t_of(2e6, 0.0, 1500, f, 0.01);
        if (i % 3 == 0 && !hi) t *= 2;
        hk_elastic_observe(&e, 0xabcdef, t, x_of(1500, f));
    }
    CHECK(e.fitted);
    CHECK(e.rejected > 400);
    CHECK_NEAR(e.phi_milli / 1000.0, 0.0, 0.08);
    printf("ok elastic_contention: %llu inflated batches rejected, phi %.3f\n", (unsigned long long)e.rejected,
           e.phi_milli / 1000.0);
}

void test_elastic_bounded(void) {
    hk_elastic e;
    hk_elastic_init(&e, HK_ELASTIC_PRIOR_MILLI, 1);
    /* a law outside the model: the work gets SLOWER as the clock rises (some other effect) */
    for (int i = 0; i < 2000; i++) {
        double f = (i % 2) ? 1980 : 1500;
        hk_elastic_observe(&e, 77, (int64_t)(1e6 * f / 1500.0 * 1.05), x_of(1500, f));
    }
    CHECK(e.phi_milli <= 1000);
    CHECK(e.phi_milli == 0); /* clamped at the bound, not negative */
    CHECK(hk_elastic_factor_milli(&e, x_of(1500, 1980)) == 1000);
    /* and steeper than 1/f (superlinear): clamped at 1 */
    hk_elastic_init(&e, HK_ELASTIC_PRIOR_MILLI, 1);
    for (int i = 0; i < 2000; i++) {
        double f = (i % 2) ? 1980 : 1500;
        hk_elastic_observe(&e, 77, (int64_t)(1e6 * pow(1500.0 / f, 1.4)), x_of(1500, f));
    }
    CHECK(e.phi_milli == 1000);
    /* below the full-load clock nothing is refunded; an unknown clock is charged its time */
    CHECK(hk_elastic_factor_milli(&e, x_of(1500, 1200)) == 1000);
    CHECK(hk_elastic_factor_milli(&e, 0) == 1000);
    /* batches too short to time, no signature, no clock: unused */
    CHECK(hk_elastic_observe(&e, 77, HK_ELASTIC_MIN_NS - 1, 1000) == 0);
    CHECK(hk_elastic_observe(&e, 0, 1000000, 1000) == 0);
    CHECK(hk_elastic_observe(&e, 77, 1000000, 0) == 0);
    printf("ok elastic_bounded: laws outside the model clamp to 0 and 1; no refund below full load\n");
}

void test_elastic_damped(void) {
    hk_elastic e;
    hk_elastic_init(&e, HK_ELASTIC_PRIOR_MILLI, 1);
    feed(&e, 2000, 2, 1.0, 1500, 1500, 1980, 0.0);
    CHECK(e.phi_milli >= 980);
    /* the work turns memory-bound (same signatures): phi walks down, one bounded step per batch */
    uint32_t prev = e.phi_milli, max_step = 0;
    int batches = 0;
    while (e.phi_milli > 100 && batches < 5000) {
        feed(&e, 1, 2, 0.0, 1500, 1500, 1980, 0.0);
        uint32_t step = prev > e.phi_milli ? prev - e.phi_milli : e.phi_milli - prev;
        if (step > max_step) max_step = step;
        prev = e.phi_milli;
        batches++;
    }
    CHECK(max_step <= HK_ELASTIC_STEP_MILLI);
    CHECK(batches >= (900 / HK_ELASTIC_STEP_MILLI));
    CHECK(batches < 5000);
    printf("ok elastic_damped: 1 -> 0.1 in %d batches, at most %u/1000 per batch\n", batches, max_step);
}

void test_power_bound(void) {
    /* The H100's readings at 30% duty (bench/results/h100-2026-12-05-shares/clock-probe.json): idle
       85 W, limit 700 W; a matmul at 335 W is power-bound, a 1 GiB copy at 205 W is not. */
    CHECK(hk_power_bound(335000, 85000, 700000, 30, -1) == 1);
    CHECK(hk_power_bound(205000, 85000, 700000, 30, -1) == 0);
    CHECK(hk_power_bound(129000, 85000, 700000, 30, -1) == 0);  /* a launch-bound loop */
    CHECK(hk_power_bound(685000, 85000, 700000, 100, -1) == 1); /* the matmul at full duty */
    CHECK(hk_power_bound(381000, 85000, 700000, 100, 1) == 0);  /* the copy at full duty */
    /* between 80% and 90% of the limit: whatever it was */
    CHECK(hk_power_bound(595000, 85000, 700000, 100, 1) == 1);
    CHECK(hk_power_bound(595000, 85000, 700000, 100, 0) == 0);
    /* cannot tell: no power, no limit, a bad duty */
    CHECK(hk_power_bound(0, 85000, 700000, 30, -1) == -1);
    CHECK(hk_power_bound(335000, 85000, 0, 30, 1) == 1);
    CHECK(hk_power_bound(335000, 85000, 700000, 101, -1) == -1);
    /* a device busy less than 5% is not power-bound, whatever it was before (not the unknown that
       keeps the given clock): a launch-bound loop at a 10% cap held 123 W on the H200 (idle 79 W),
       which 2% busy would extrapolate to 2.3 kW */
    CHECK(hk_power_bound(123000, 79000, 700000, 2, -1) == 0);
    CHECK(hk_power_bound(123000, 79000, 700000, 4, 1) == 0);
    CHECK(hk_power_bound(123000, 79000, 700000, 0, 1) == 0);
    /* an awake device's draw is not work: a launch-bound loop at a 30% cap (7% duty, 125 W, idle
       79 W: 38 W is what an awake H100 draws) is not power-bound; read as idle + 46 W / 7% it
       would be (736 W) */
    CHECK(hk_power_bound(125000, 79000, 700000, 7, 1) == 0);
    CHECK(hk_power_bound(130000, 79000, 700000, 6, -1) == 0);
    CHECK(hk_power_bound(120000, 79000, 700000, 40, 1) == 0); /* at the awake draw: nothing scales */
    /* a matmul at a 10% cap (10% duty, 173 W) still is */
    CHECK(hk_power_bound(173000, 79000, 700000, 10, -1) == 1);
    /* an idle reading above the power now (a busy device when the process started): no negative part */
    CHECK(hk_power_bound(200000, 400000, 700000, 30, -1) == 0);
    printf("ok power_bound: 335 W at 30%% duty -> power-bound, 205 W -> not (idle 85 W, limit 700 W)\n");
}
