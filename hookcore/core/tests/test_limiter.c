/* test_limiter.c - the compute limiter's arithmetic, fed synthetic numbers (no clock is read).
 *
 * elastic: the clock elasticity a strict cap learns (elastic.h) from batches whose time follows a
 * known law t(f) = T (1 - phi + phi f_full / f) at clocks the test chooses: it converges to phi for
 * compute-bound, memory-bound and mixed work, holds the prior without clock variation, ignores
 * batches another tenant's work inflated, stays in [0, 1] for laws outside the model, moves at most
 * a step per batch, and charges the factor 1 / (1 - phi + phi x) (never a refund).
 *
 * board: a device's priority board (priority.h), in a temporary file: a high claim's mark reaches a
 * normal one; forged, torn, stale, far-ahead and truncated boards read as no high claim at work; a
 * normal claim's board is opened read-only and never written.
 *
 * Each test prints one line "ok <name>: ..."; exit 0 when every CHECK passed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>
#include <unistd.h>

#include "elastic.h"
#include "limiter.h"
#include "priority.h"

static int g_failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            g_failures++;                                                            \
        }                                                                            \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                                      \
    do {                                                                                                           \
        double a_ = (a), b_ = (b);                                                                                 \
        if (fabs(a_ - b_) > (tol)) {                                                                               \
            fprintf(stderr, "%s:%d: %s = %g, expected %g +- %g\n", __FILE__, __LINE__, #a, a_, b_, (double)(tol)); \
            g_failures++;                                                                                          \
        }                                                                                                          \
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

static void test_converges(void) {
    static const double phis[] = {0.0, 0.25, 0.5, 0.75, 1.0};
    for (size_t k = 0; k < sizeof phis / sizeof phis[0]; k++) {
        hk_elastic e;
        hk_elastic_init(&e);
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

static void test_prior_without_variation(void) {
    hk_elastic e;
    hk_elastic_init(&e);
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

static void test_contended_batches_are_ignored(void) {
    hk_elastic e;
    hk_elastic_init(&e);
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

static void test_bounded(void) {
    hk_elastic e;
    hk_elastic_init(&e);
    /* a law outside the model: the work gets SLOWER as the clock rises (some other effect) */
    for (int i = 0; i < 2000; i++) {
        double f = (i % 2) ? 1980 : 1500;
        hk_elastic_observe(&e, 77, (int64_t)(1e6 * f / 1500.0 * 1.05), x_of(1500, f));
    }
    CHECK(e.phi_milli <= 1000);
    CHECK(e.phi_milli == 0); /* clamped at the bound, not negative */
    CHECK(hk_elastic_factor_milli(&e, x_of(1500, 1980)) == 1000);
    /* and steeper than 1/f (superlinear): clamped at 1 */
    hk_elastic_init(&e);
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

static void test_damped(void) {
    hk_elastic e;
    hk_elastic_init(&e);
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

static void test_cost(void) {
    /* hk_limiter_cost: device time x SM fraction x clock factor, rounded up; never a refund */
    CHECK(hk_limiter_cost(1000000, HK_SM_PPM_FULL, 1320) == 1320000);
    CHECK(hk_limiter_cost(1000000, HK_SM_PPM_FULL, 900) == 1000000);
    CHECK(hk_limiter_cost(1000000, 500000, 1000) == 500000);
    CHECK(hk_limiter_cost(1000000, 0, 0) == 1000000);
    printf("ok limiter_cost\n");
}

static void test_board(void) {
    const int64_t now = 1000000000000LL;
    unsigned char m[HK_BOARD_MARK_BYTES];
    hk_board_encode(now + 5000000, m);
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now) == now + 5000000);
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES - 1, now) == 0);       /* a short read (truncated board) */
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now + 5000000) == 0); /* expired */
    m[3] ^= 1;
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now) == 0); /* torn or scribbled: fails its complement */
    hk_board_encode(now + HK_PRIORITY_HOLD_MAX_NS + 1, m);
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now) == 0); /* further ahead than any honest mark */
    memset(m, 0, sizeof m);
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now) == 0); /* as the daemon makes it: zeroes */

    char path[] = "/tmp/hk-board-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && ftruncate(fd, HK_BOARD_BYTES) == 0);
    close(fd);
    hk_board hi, lo;
    CHECK(hk_board_open(&hi, path, 1) == 0 && hk_board_open(&lo, path, 0) == 0);
    CHECK(hk_board_high_until(&lo, now, 1) == 0);
    CHECK(hk_board_mark(&hi, now, 0, 1) == HK_PRIORITY_HOLD_NS);
    CHECK(hk_board_high_until(&lo, now, 0) == 0); /* cached: read at most every HK_PRIORITY_READ_NS */
    CHECK(hk_board_high_until(&lo, now, 1) == now + HK_PRIORITY_HOLD_NS);
    /* a mark that moved by less than HK_PRIORITY_WRITE_NS is not written (a syscall per ms at most) */
    hk_board_mark(&hi, now + 1000, 0, 1);
    CHECK(hk_board_high_until(&lo, now + 1000, 1) == now + HK_PRIORITY_HOLD_NS);
    /* the normal side reads at most every HK_PRIORITY_READ_NS: a cached answer in between */
    hk_board_mark(&hi, now + 2000000, 0, 1);
    CHECK(hk_board_high_until(&lo, now + 1000 + HK_PRIORITY_READ_NS / 2, 0) == now + HK_PRIORITY_HOLD_NS);
    CHECK(hk_board_high_until(&lo, now + 2000000, 1) == now + 2000000 + HK_PRIORITY_HOLD_NS);
    /* a normal claim never writes: its mark goes nowhere */
    hk_board_mark(&lo, now, 50000000, 0);
    CHECK(hk_board_high_until(&lo, now + 2000000, 1) == now + 2000000 + HK_PRIORITY_HOLD_NS);
    /* a loop that pauses 15 ms between its bursts (waiting for the work it queued) holds twice that,
       and a wait for its own share holds past its end; an idle second is not a pause */
    CHECK(hk_board_mark(&hi, now + 17000000, 0, 1) == 30000000);
    CHECK(hk_board_high_until(&lo, now + 17000000, 1) == now + 47000000);
    CHECK(hk_board_mark(&hi, now + 18000000, 5000000, 0) > 2 * 14000000);
    CHECK(hk_board_high_until(&lo, now + 18000000, 1) > now + 47000000);
    CHECK(hk_board_mark(&hi, now + 1018000000, 0, 1) <= 30000000);
    /* truncated behind the readers' backs (no mapping: nothing faults): no high claim at work */
    CHECK(truncate(path, 0) == 0);
    CHECK(hk_board_high_until(&lo, now + 2000000, 1) == 0);
    close(hi.fd);
    close(lo.fd);
    /* a normal claim's board that is missing: no board, no wait */
    unlink(path);
    CHECK(hk_board_open(&lo, path, 0) == -1 && hk_board_high_until(&lo, now, 1) == 0);
    printf("ok board: marks reach normal claims; forged, torn, far-ahead, stale and truncated marks do not\n");
}

int main(void) {
    test_converges();
    test_prior_without_variation();
    test_contended_batches_are_ignored();
    test_bounded();
    test_damped();
    test_cost();
    test_board();
    if (g_failures) {
        fprintf(stderr, "%d check(s) failed\n", g_failures);
        return 1;
    }
    printf("all limiter tests passed\n");
    return 0;
}
