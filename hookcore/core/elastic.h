/* elastic.h - how a claim's work's cost follows the SM clock, learned online (vendor-neutral).
 *
 * A strict cap (limiter.h) charges each batch its cost at the device's full-load clock. How much
 * a batch would have cost there depends on the work: a compute-bound kernel's time scales as
 * 1/clock, a memory-bound one's (a copy, an elementwise kernel over a large tensor) not at all, a
 * matmul's partly. The model: a batch that takes t at SM clock f would take
 *
 *     t_full = t x (1 - phi + phi x f / f_full)   ...   i.e. t(f) = A + B / f, phi = B / (A f_full + B)
 *
 * at the full-load clock f_full: phi is the part of its time at the full-load clock that scales
 * with the clock (0 = memory-bound, 1 = compute-bound). phi is the elasticity of the work's time
 * with respect to the clock at the full-load clock. Charged: t / (1 - phi + phi x), x = f_full / f
 * (a boost, x < 1, is charged; a clock below full load is never refunded: the factor is >= 1).
 *
 * Learning phi. The clock varies by itself as load comes and goes (a GPU boosts while part of it
 * idles, and drops back when other tenants fill it), so the same work is seen at several clocks.
 * Each batch arrives with its signature (a hash of what it submitted, meter.h), its device time t
 * and x then. Per signature the estimator keeps running means of x and t; a new batch's deviation
 * from them, (u, d) = (x - mean x, t / mean t - 1), is one point of a regression through the
 * origin shared by every signature of the claim: d = k u. phi follows from the slope k and the mean
 * clock xbar: phi = k / (1 - k (xbar - 1)). Guards, each a number below:
 *
 *   - bounded: phi is clamped to [0, 1]; a batch slower than any phi in [0, 1] explains
 *     (d > HK_ELASTIC_SLOPE_MAX |u| + HK_ELASTIC_NOISE: another tenant's work inside its window, a
 *     host stall) is rejected and moves nothing; one faster than that shows the signature's means
 *     were inflated (contention never speeds work up) and they start over from it; a signature
 *     rejected HK_ELASTIC_REF_RESET times in a row starts over too (its work changed); batches
 *     shorter than HK_ELASTIC_MIN_NS (timer noise) are not used;
 *   - evidence: the fit is used only once the decayed sum of u^2 reaches HK_ELASTIC_MIN_SXX
 *     (e.g. 100 batches with the clock 1% off their mean, or 4 with it 5% off); until then phi stays
 *     where it is, starting at the prior HK_ELASTIC_PRIOR_MILLI (1000: compute-bound, the old strict
 *     rule: an unproven claim is never charged less than its boost). The prior matters most where
 *     the clock never moves under the claim's load (an idle H100 at a share below ~70% stays at its
 *     top clock): there nothing is learned and the prior is what is charged;
 *   - a measured value wins: when the claim's config gives one (HOOKCORE_COMPUTE_ELASTICITY_<i>, the
 *     GPU model's power-bound matmul measured by the bench between its top and full-load clocks,
 *     set by the admin) phi is held there and nothing is learned. The fit sees only the clock's
 *     jitter around where the claim runs, and a matmul's time hardly follows that jitter: on an
 *     H100 at a 70% cap (clock 1755..1905 MHz) it fitted phi = 0.003 and gave 78.5% for 70, where
 *     the bench's value (0.374, from the same card's 1980 vs 1395 MHz throughput) gives ~71;
 *   - damped: the sums decay by 1/HK_ELASTIC_MEMORY per accepted batch (the fit follows a change of
 *     work), and phi moves towards the fit by at most HK_ELASTIC_STEP_MILLI per accepted batch.
 *
 * Limits: phi is one number per claim and device: a claim that mixes memory-bound and
 * compute-bound work is charged a mix; a device that never changes its clock while the claim runs
 * teaches nothing and the prior (or the last fit) holds; the clock is sampled (every 2 ms), not
 * read during the batch. Pure computation: no clock, no lock (the caller serialises), no I/O, so the
 * C tests feed it synthetic batches.
 */
#ifndef HOOKCORE_ELASTIC_H
#define HOOKCORE_ELASTIC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HK_ELASTIC_REFS        64     /* signatures tracked (a direct-mapped table) */
#define HK_ELASTIC_MIN_NS      20000  /* batches shorter than 20 us are timer noise */
#define HK_ELASTIC_SLOPE_MAX   1.5    /* |d| <= 1.5 |u| + noise: what any phi in [0, 1] explains */
#define HK_ELASTIC_NOISE       0.08   /* run-to-run noise of one batch's time, relative */
#define HK_ELASTIC_MIN_SXX     0.01   /* evidence before the fit is used (sum of u^2, decayed) */
#define HK_ELASTIC_MEMORY      128    /* the sums decay by 1/128 per accepted batch */
#define HK_ELASTIC_STEP_MILLI  50     /* phi moves at most 0.05 per accepted batch */
#define HK_ELASTIC_PRIOR_MILLI 1000   /* phi before any evidence: compute-bound */
#define HK_ELASTIC_REF_ALPHA   0.0625 /* a signature's running means move 1/16 per batch */
#define HK_ELASTIC_REF_RESET   8      /* rejected in a row: the signature's means start over */

typedef struct hk_elastic_ref {
    uint64_t sig; /* 0 = empty */
    double x, t;  /* running means of x = f_full / f and of the batch's time (ns) */
    uint32_t n, rejected;
} hk_elastic_ref;

typedef struct hk_elastic {
    double sxy, sxx; /* decayed sums of u d and u^2 */
    double xbar;     /* running mean of x over accepted batches */
    uint32_t phi_milli;
    int fitted; /* phi has moved from evidence at least once */
    int learn;  /* 0: phi is held at the given value (a measured one), evidence is not used */
    uint64_t accepted, rejected;
    hk_elastic_ref ref[HK_ELASTIC_REFS];
} hk_elastic;

/* Start at the prior, x1000 (clamped to 0..1000): HK_ELASTIC_PRIOR_MILLI unless the claim's config
   gives the GPU model's measured value (HOOKCORE_COMPUTE_ELASTICITY_<i>), which is held (learn 0). */
void hk_elastic_init(hk_elastic *e, uint32_t prior_milli, int learn);

/* One batch: its signature (0 = none: not used), device time (ns) and x = f_full / f when it ran
   (x1000; 0 = clock unknown: not used). Returns 1 if it was used for the fit, 0 if not (always 0
   when phi is held). */
int hk_elastic_observe(hk_elastic *e, uint64_t sig, int64_t t_ns, uint32_t x_milli);

/* What a batch at x (x1000) is charged per ns of device time, x1000: 1000 / (1 - phi + phi x),
   never below 1000 (x >= 1: no boost, no refund) and 1000 for x = 0 (clock unknown). */
uint32_t hk_elastic_factor_milli(const hk_elastic *e, uint32_t x_milli);

/* Whose full-load clock. The full-load clock a strict cap is given (HOOKCORE_COMPUTE_REF_MHZ, the
 * clock a power-hungry matmul settles at) is the clock of work that, at full duty, holds the device
 * at its power limit. Work that would not (a copy, an elementwise kernel, a launch-bound loop: on the
 * H100, 2026-12-05, none of them moved the SM clock off its 1980 MHz top even at 100% duty, while a
 * matmul fell to 1455) has no boost to give back: its full-load clock is the clock it runs at. The
 * device's power at full duty of what runs now is extrapolated from the power now, the device's
 * busy fraction (the management library's utilization) and the power of an awake device running
 * nothing:
 *
 *     p_awake = p_idle + HK_POWER_AWAKE_PCT of the limit
 *     p_full  = p_awake + (p_now - p_awake) / duty
 *
 * An awake device draws its clocks' and memory's power whatever it runs (H100, 2026-12-06: a
 * launch-bound loop held 117-130 W at every cap, idle 69-79 W: 38-61 W over idle, 6% of 700 W is
 * 42 W); only the rest scales with the duty. Without that term a launch-bound loop at 7% duty read
 * as ~740 W and was charged the boost at a 30% strict cap (25.6 instead of 30). H100 at 30% duty,
 * idle 85 W: a matmul 335 W -> 820 W; a 1 GiB copy 205 W -> 387 W; a launch loop 129 W -> 134 W;
 * limit 700 W. Power-bound from HK_POWER_BOUND_PCT of the limit, not any more below
 * HK_POWER_FREE_PCT (between: as before). Returns 1 power-bound (the given full-load clock holds),
 * 0 not (charge device time), or `prev` when the inputs cannot tell (no reading) or p_full lies
 * between the two. A device busy less than HK_POWER_MIN_DUTY_PCT, or drawing no more than p_awake,
 * is not power-bound (0): the extrapolation divides by the duty, and such work is charged its
 * device time, which errs by at most the duty times the boost. The awake offset is one figure for
 * every model (measured on the H100 only): a GPU whose awake offset is larger reads more light work
 * as power-bound (charged up to the boost), one whose offset is smaller may read power-bound work
 * at a low duty as not (charged its device time; the same bound). Pure arithmetic, for the C tests. */
#define HK_POWER_AWAKE_PCT    6
#define HK_POWER_BOUND_PCT    90
#define HK_POWER_FREE_PCT     80
#define HK_POWER_MIN_DUTY_PCT 5
int hk_power_bound(uint32_t p_now_mw, uint32_t p_idle_mw, uint32_t p_limit_mw, uint32_t duty_pct, int prev);

#ifdef __cplusplus
}
#endif
#endif /* HOOKCORE_ELASTIC_H */
