/* clock.c - the SM clock boost a strict cap charges for (see core/limiter.h, "Strict cap").
 *
 * ratio = current SM clock / the device's clock under full load, x1000, sampled from NVML at most
 * every 2 ms per device by whichever charging thread gets there first (a strict cap learns how the
 * claim's work follows the clock from these samples, core/elastic.h). The full-load clock is
 * HOOKCORE_COMPUTE_REF_MHZ_<i> when the claim gives it, else NVML's default application clock.
 * The device is found by the claim's UUID (nvmlDeviceGetHandleByUUID). 0 = unknown (no NVML, no
 * UUID, no clock): the meter then charges device time, as without a strict cap.
 *
 * That full-load clock is a power-hungry matmul's. Every 100 ms the sampler also reads the device's
 * power, power limit and utilization, and asks hk_power_bound (core/elastic.h) whether what runs
 * would hold the device at its power limit at full duty; where it would not, the work has no boost
 * to give back and the ratio is 1000 (charged device time). Unknown (no power reading) keeps the
 * given clock. Going from power-bound to not takes 15 agreeing samples in a row (NVML's power is a
 * ~1 s average, which lags a workload's start); the other way one sample.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../core/elastic.h"
#include "../core/limiter.h"
#include "nvml.h"

#define SAMPLE_NS       2000000LL
#define POWER_SAMPLE_NS 100000000LL
#define POWER_FREE_RUN  15

static struct {
    _Atomic int64_t xsampled_ns; /* last sample, 0 = never; -1 = device not found (final) */
    _Atomic uint32_t xratio;     /* x1000 */
    nvmlDevice_t handle;         /* written before the first xsampled_ns publication */
    uint32_t ref;                /* MHz */
    /* the power model, touched only by the elected sampler */
    int64_t power_ns;           /* last power sample */
    uint32_t idle_mw, limit_mw; /* lowest power seen (from a quarter of the limit down); the limit */
    int bound;                  /* hk_power_bound: 1, 0, -1 unknown */
    int free_run;               /* samples in a row that said "not power-bound" */
} g_clk[HK_MAX_DEVICES];

/* Whether the device's work is power-bound now (see the top): 1, 0 or -1 unknown. */
static int power_bound(int ldev, int64_t now) {
    typeof(g_clk[0]) *c = &g_clk[ldev];
    if (c->power_ns && now - c->power_ns < POWER_SAMPLE_NS) return c->bound;
    c->power_ns = now;
    if (!hk_nvml.nvmlDeviceGetPowerUsage || !hk_nvml.nvmlDeviceGetUtilizationRates) return c->bound = -1;
    if (!c->limit_mw) {
        if (!hk_nvml.nvmlDeviceGetEnforcedPowerLimit ||
            hk_nvml.nvmlDeviceGetEnforcedPowerLimit(c->handle, &c->limit_mw) != NVML_SUCCESS)
            c->limit_mw = 0;
        c->idle_mw = c->limit_mw / 4;
        c->bound = -1;
    }
    unsigned mw = 0;
    nvmlUtilization_t u = {0, 0};
    if (!c->limit_mw || hk_nvml.nvmlDeviceGetPowerUsage(c->handle, &mw) != NVML_SUCCESS ||
        hk_nvml.nvmlDeviceGetUtilizationRates(c->handle, &u) != NVML_SUCCESS)
        return c->bound;
    if (mw && mw < c->idle_mw) c->idle_mw = mw;
    int said = hk_power_bound(mw, c->idle_mw, c->limit_mw, u.gpu, -1);
    if (said == 0) {
        if (++c->free_run >= POWER_FREE_RUN) c->bound = 0;
    } else if (said == 1) {
        c->free_run = 0;
        c->bound = 1;
    }
    if (hk_log_debug())
        hk_log("strict cap on device %d: %u mW at %u%% busy (idle %u, limit %u mW): %s", ldev, mw, u.gpu, c->idle_mw,
               c->limit_mw,
               c->bound == 1   ? "power-bound"
               : c->bound == 0 ? "not power-bound"
                               : "unknown");
    return c->bound;
}

static _Atomic int g_nvml_init; /* 0 not tried, 1 ok, 2 failed */

int hk_nvml_ready(void) {
    int st = hk_atomic_load_acquire(&g_nvml_init);
    if (st) return st == 1;
    hk_preload_load(&hk_shim_nvml);
    int ok = hk_nvml.nvmlInit_v2 && hk_nvml.nvmlInit_v2() == NVML_SUCCESS && hk_nvml.nvmlDeviceGetHandleByUUID &&
             hk_nvml.nvmlDeviceGetClockInfo;
    int expect = 0;
    hk_atomic_cas_strong_acq_rel(&g_nvml_init, &expect, ok ? 1 : 2);
    return hk_atomic_load_acquire(&g_nvml_init) == 1;
}

uint32_t hk_nvml_clock_ratio_milli(int ldev) {
    if (ldev < 0 || ldev >= HK_MAX_DEVICES) return 0;
    int64_t now = hk_limiter_now_ns(), last = hk_atomic_load_acquire(&g_clk[ldev].xsampled_ns);
    if (last < 0) return 0;
    if (last != 0 && now - last < SAMPLE_NS) return hk_atomic_load_relaxed(&g_clk[ldev].xratio);
    /* Elect one sampler: the others use the previous ratio meanwhile. */
    if (!hk_atomic_cas_strong_acq_rel(&g_clk[ldev].xsampled_ns, &last, last == 0 ? -2 : now))
        return hk_atomic_load_relaxed(&g_clk[ldev].xratio);
    if (last == 0) { /* first sample: find the device and its reference clock */
        const char *uuid = hk_device_uuid(ldev);
        nvmlDevice_t h = NULL;
        unsigned ref = hk_compute_ref_mhz(ldev);
        if (!hk_nvml_ready() || !uuid[0] || hk_nvml.nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS) {
            hk_log("strict cap on device %d: cannot find it in NVML (%s); charging device time", ldev,
                   uuid[0] ? uuid : "the claim names no UUID");
            hk_atomic_store_release(&g_clk[ldev].xsampled_ns, -1);
            return 0;
        }
        if (!ref && hk_nvml.nvmlDeviceGetClock)
            hk_nvml.nvmlDeviceGetClock(h, NVML_CLOCK_SM, NVML_CLOCK_ID_APP_CLOCK_DEFAULT, &ref);
        if (!ref) {
            hk_log("strict cap on device %d: no full-load clock (set HOOKCORE_COMPUTE_REF_MHZ_%d); charging "
                   "device time",
                   ldev, ldev);
            hk_atomic_store_release(&g_clk[ldev].xsampled_ns, -1);
            return 0;
        }
        g_clk[ldev].handle = h;
        g_clk[ldev].ref = ref;
        g_clk[ldev].bound = -1;
        if (hk_log_debug()) hk_log("strict cap on device %d: full-load SM clock %u MHz", ldev, ref);
    }
    unsigned mhz = 0;
    uint32_t ratio = 0;
    if (hk_nvml.nvmlDeviceGetClockInfo(g_clk[ldev].handle, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS && mhz)
        ratio = power_bound(ldev, now) == 0 ? 1000u : (uint32_t)((uint64_t)mhz * 1000u / g_clk[ldev].ref);
    hk_atomic_store_relaxed(&g_clk[ldev].xratio, ratio);
    hk_atomic_store_release(&g_clk[ldev].xsampled_ns, now);
    return ratio;
}
