/* limiter.h - the compute limiter: a claim-wide token bucket of device time (vendor-neutral).
 *
 * A device's compute share s (percent) is enforced as a duty cycle: over any long window the
 * claim's processes may keep the device busy for at most s% of wall time. Tokens are nanoseconds
 * of device time. They accrue at s/100 ns per wall-clock ns, up to a small burst; the meter
 * (meter.h) charges each measured stretch of device work after it completes, and a submitting
 * thread that finds the balance negative waits until it is repaid and HK_LIMITER_WAKE_NS more.
 *
 * What a stretch of work costs (hk_limiter_cost): its device time times the fraction of the device's
 * SMs its context may use, so the share bounds SM x time, a percentage of the device's compute (as
 * HAMi's gpucores means it). A context provisioned a part of the SMs by the driver (an MPS client
 * with an active-thread percentage, an affinity or green context) is charged that part of its time:
 * the share stays a ceiling without limiting such a client twice. The fraction is the driver's
 * (the shim asks it per context), never the environment; unknown means all SMs (a full charge).
 *
 * Strict cap (hk_limiter.strict, HOOKCORE_COMPUTE_MODE_<i>=strict): the meter charges each batch
 * its cost at the device's full-load clock rather than the time it took, so a claim alone on an
 * idle device, whose clock then boosts, gets s% of full-load throughput instead of s% of time. How
 * a batch's cost follows the clock is learned from the claim's own batches (elastic.h): the clock
 * factor is 1 / (1 - phi + phi x full-load clock / clock). Both factors multiply: device time x SM
 * fraction x clock factor.
 *
 * The state lives in the ledger's per-device limiter area (hk_limiter_area), so every process of
 * a claim draws on one bucket. Lock free: a CAS elects the refiller of each quantum, charges are
 * atomic subtractions. Clock: CLOCK_MONOTONIC, which all processes of a node share.
 */
#ifndef HOOKCORE_LIMITER_H
#define HOOKCORE_LIMITER_H

#include <stdatomic.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HK_LIMITER_VERSION    0x4c494d31u /* "LIM1": layout of hk_limiter_shared */
#define HK_LIMITER_BURST_NS   10000000LL  /* at most 10 ms of GPU time banked while idle */
#define HK_LIMITER_QUANTUM_NS 20000LL     /* refill at most every 20 us */
/* A thread the debt stopped sleeps until this much credit is there, not just until the debt is
   repaid: it then runs a burst of several batches per wake instead of one. A host-paced loop pays
   for waking (cold caches, an idle device's first launches) inside the window it is charged; woken
   once per batch at a 10% share it was charged ~1.3x its steady time per step (H200, 2026-12-06). */
#define HK_LIMITER_WAKE_NS 2000000LL
#define HK_SM_PPM_FULL     1000000u /* an SM fraction in millionths: all of the device's SMs */

/* Layout of the shared area (fits in HK_LIMITER_BYTES = 256). */
typedef struct hk_limiter_shared {
    _Atomic uint32_t xversion;       /* 0 = untouched, 1 = being set up, HK_LIMITER_VERSION */
    _Atomic uint32_t xshare;         /* percent, written at set-up (for inspection) */
    _Atomic int64_t xtokens_ns;      /* device-time credit; negative = debt */
    _Atomic int64_t xlast_refill_ns; /* CLOCK_MONOTONIC of the last refill */
    _Atomic int64_t xcharged_ns;     /* total GPU time charged (statistics) */
    _Atomic int64_t xthrottled_ns;   /* total time launching threads waited (statistics) */
    _Atomic int64_t xgranted_ns;     /* total credit the refills added, after the burst cap (statistics;
                                        appended in 2026-12: an area set up before reads 0) */
    /* Appended in 2026-12 (issue 25), same layout word: an area set up before reads 0. Statistics. */
    _Atomic int64_t xdevice_ns; /* device time of the charged work before its SM fraction and clock ratio
                                   (after the contention estimate): charged / device = the mean factor */
    _Atomic uint32_t xsm_ppm;   /* SM fraction (millionths) the last charged batch was charged at; 0 = none */
    uint32_t xreserved;
    /* Appended in 2026-12 (issue 26), same layout word: an area set up before reads 0. Statistics. */
    _Atomic uint32_t xfactor_milli;  /* strict cap: what the last batch was charged per ns of device time
                                        for the clock, x1000 (1000 = no boost); 0 = no strict charge yet */
    _Atomic uint32_t xelastic_milli; /* strict cap: the clock elasticity phi in use (elastic.h), x1000 */
    _Atomic uint32_t xelastic_fit;   /* 1 once phi moved from evidence (0: the prior) */
    uint32_t xreserved2;
    _Atomic int64_t xyielded_ns; /* time submitting threads waited for a higher-priority claim (priority) */
    _Atomic int64_t xelapsed_ns; /* the charged batches' event windows, before the contention estimate */
    /* Appended in 2026-12 (issue 26, the wake), same layout word: an area set up before reads 0. */
    _Atomic int64_t xthrottles; /* how many times a submitting thread waited for its share (statistics) */
} hk_limiter_shared;

/* A process-local handle on one device's bucket. The share comes from the process's own config
   (never from the shared area). Beside the claim-wide bucket, which every process of the claim can
   write, each process keeps a bucket of its own in process memory with the same share: the balance
   is the lower of the two, so no write to the shared file lets one process run above its share
   (a shared balance above the burst is also clamped on read). */
typedef struct hk_limiter {
    hk_limiter_shared *shared;        /* NULL = no limit on this device */
    uint32_t share;                   /* percent 1..99 */
    int strict;                       /* charge full-load cost (see above) */
    _Atomic int64_t xlocal_tokens_ns; /* this process's own bucket */
    _Atomic int64_t xlocal_last_ns;
    hk_limiter_shared own; /* stands in for a shared area written out of shape */
} hk_limiter;

/* What a reader (the wrapper, metrics, bench) may show of a device's bucket. */
typedef struct hk_limiter_stats {
    uint32_t active;        /* 1 if a limiter has been set up in this area */
    uint32_t share;         /* percent */
    int64_t tokens_ns;      /* current balance (negative = in debt) */
    int64_t charged_ns;     /* device time charged since the ledger was created */
    int64_t throttled_ns;   /* time submitting threads waited */
    int64_t granted_ns;     /* credit the bucket was given: share x time, less what the burst cap dropped.
                             charged - granted = the debt (= -tokens_ns unless the area was written) */
    int64_t device_ns;      /* device time of the charged work, before the SM fraction and clock ratio */
    uint32_t sm_ppm;        /* SM fraction of the last charged batch, millionths (0 = none yet / older area) */
    uint32_t factor_milli;  /* strict: the clock factor of the last batch, x1000 (0 = none yet) */
    uint32_t elastic_milli; /* strict: the clock elasticity in use, x1000 */
    uint32_t elastic_fit;   /* 1: learned from the claim's own batches; 0: the prior */
    int64_t yielded_ns;     /* time waited for a higher-priority claim */
    int64_t elapsed_ns;     /* the charged batches' windows as timed (other tenants' work inside included) */
    int64_t throttles;      /* how many times a submitting thread waited for its share */
} hk_limiter_stats;

/* Read the statistics of a limiter area (hk_limiter_area / hk_ledger_limiter_area); zeroes when
   the area is NULL or holds no limiter. Works on a read-only mapping. */
void hk_limiter_read(const void *area, hk_limiter_stats *out);

/* Monotonic clock in ns. */
int64_t hk_limiter_now_ns(void);

/* Attach to `area` (HK_LIMITER_BYTES, zeroed at ledger creation) with a share in percent.
   Shares >= 100 or a NULL area leave the limiter off (lim->shared = NULL). */
void hk_limiter_attach(hk_limiter *lim, void *area, uint32_t share_percent);

/* Accrue credit up to `now` and return the balance in ns of GPU time (negative = in debt). */
int64_t hk_limiter_balance(hk_limiter *lim, int64_t now_ns);

/* Charge measured GPU time. */
void hk_limiter_charge(hk_limiter *lim, int64_t gpu_ns);

/* The cost of `device_ns` of work that ran on `sm_ppm` millionths of the device's SMs at a clock
   `ratio_milli` / 1000 of its full-load clock: device_ns x sm_ppm / 10^6 x ratio_milli / 1000,
   rounded up. A fraction of 0 or above HK_SM_PPM_FULL counts as HK_SM_PPM_FULL (fail safe: full
   charge); a ratio of 1000 or less (0 = unknown) counts as 1000 (a boost is charged, never a
   slowdown refunded). */
int64_t hk_limiter_cost(int64_t device_ns, uint32_t sm_ppm, uint32_t ratio_milli);

/* Charge a batch: its cost (hk_limiter_cost), recorded with its device time and SM fraction in
   the statistics. Returns the cost charged. */
int64_t hk_limiter_charge_work(hk_limiter *lim, int64_t device_ns, uint32_t sm_ppm, uint32_t ratio_milli);

/* Record time a thread waited for a higher-priority claim (statistics only). */
void hk_limiter_note_yield(hk_limiter *lim, int64_t ns);

/* Record a batch's window as timed, before the contention estimate (statistics only). */
void hk_limiter_note_elapsed(hk_limiter *lim, int64_t ns);

/* Record a strict charge's clock factor and the elasticity it came from (statistics only). */
void hk_limiter_note_clock(hk_limiter *lim, uint32_t factor_milli, uint32_t elastic_milli, int fitted);

/* How long to wait, given a negative balance, until the debt is repaid (ns, capped at 20 ms so
   the caller re-checks; 0 if not in debt). */
int64_t hk_limiter_wait_ns(const hk_limiter *lim, int64_t balance);

/* Record one wait of a thread for its share and how long it took (statistics only). */
void hk_limiter_note_throttle(hk_limiter *lim, int64_t ns);

#ifdef __cplusplus
}
#endif
#endif /* HOOKCORE_LIMITER_H */
