/* clock.c - the SM clock boost a strict cap charges for (see core/limiter.h, "Strict cap").
 *
 * ratio = current SM clock / the device's clock under full load, x1000, sampled from NVML at most
 * every 2 ms per device by whichever charging thread gets there first (a strict cap learns how the
 * claim's work follows the clock from these samples, core/elastic.h). The full-load clock is
 * HOOKCORE_COMPUTE_REF_MHZ_<i> when the claim gives it, else NVML's default application clock.
 * The device is found by the claim's UUID (nvmlDeviceGetHandleByUUID). 0 = unknown (no NVML, no
 * UUID, no clock): the meter then charges device time, as without a strict cap.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../core/limiter.h"
#include "nvml.h"

#define SAMPLE_NS 2000000LL

static struct {
    _Atomic int64_t xsampled_ns; /* last sample, 0 = never; -1 = device not found (final) */
    _Atomic uint32_t xratio;     /* x1000 */
    nvmlDevice_t handle;         /* written before the first xsampled_ns publication */
    uint32_t ref;                /* MHz */
} g_clk[HK_MAX_DEVICES];

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
        if (hk_log_debug()) hk_log("strict cap on device %d: full-load SM clock %u MHz", ldev, ref);
    }
    unsigned mhz = 0;
    uint32_t ratio = 0;
    if (hk_nvml.nvmlDeviceGetClockInfo(g_clk[ldev].handle, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS && mhz)
        ratio = (uint32_t)((uint64_t)mhz * 1000u / g_clk[ldev].ref);
    hk_atomic_store_relaxed(&g_clk[ldev].xratio, ratio);
    hk_atomic_store_release(&g_clk[ldev].xsampled_ns, now);
    return ratio;
}
