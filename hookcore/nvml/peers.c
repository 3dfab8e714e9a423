/* peers.c - whether this process is alone on a device, for the contention estimate (core/meter.h).
 *
 * The meter charges a batch its contention estimate only where another process's work may run
 * inside its window. NVML's per-process utilization samples say which processes ran kernels on the
 * device lately (every process on the device, also those of other containers: NVML answers for the
 * whole device). At most one process with SM utilization in the last second, and no MPS client,
 * means nothing else was time-sliced into this process's windows: it is alone (an idle process that
 * only holds a context does not count). Sampled at most every 100 ms per device by whichever
 * charging thread gets there first. -1 (unknown: no NVML, no UUID, no per-process utilization on
 * this device, an error) keeps the estimate on.
 *
 * A tenant can make this 0 (run a second busy process on the device) but never 1 while another
 * process runs kernels there: the estimate it can switch on only ever charges what it did before.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <time.h>

#include "../core/limiter.h"
#include "nvml.h"

#define PEERS_SAMPLE_NS 100000000LL /* ask NVML at most every 100 ms */
#define PEERS_WINDOW_US 1000000ULL  /* processes that ran kernels in the last second */
#define PEERS_MAX       64          /* samples read per query (more: not alone) */

static struct {
    _Atomic int64_t xsampled_ns; /* last sample, 0 = never; -1 = device not found (final); -2 = being found */
    _Atomic int xalone;          /* the last answer */
    nvmlDevice_t handle;         /* written before the first xsampled_ns publication */
} g_peers[HK_MAX_DEVICES];

/* Distinct processes with SM utilization among NVML's samples newer than a second: 0.., or -1. */
static int busy_processes(nvmlDevice_t h) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* NVML stamps samples with the CPU's wall clock, in us */
    unsigned long long now_us = (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
    nvmlProcessUtilizationSample_t s[PEERS_MAX];
    unsigned int n = PEERS_MAX;
    nvmlReturn_t r = hk_nvml.nvmlDeviceGetProcessUtilization(h, s, &n, now_us - PEERS_WINDOW_US);
    if (r == NVML_ERROR_NOT_FOUND) return 0; /* no sample that new: nobody ran kernels */
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) return PEERS_MAX;
    if (r != NVML_SUCCESS || n > PEERS_MAX) return -1;
    unsigned int pids[PEERS_MAX], busy = 0;
    for (unsigned int i = 0; i < n; i++) {
        if (!s[i].smUtil) continue;
        unsigned int j = 0;
        while (j < busy && pids[j] != s[i].pid) j++;
        if (j == busy) pids[busy++] = s[i].pid;
    }
    return (int)busy;
}

/* MPS clients on the device (their kernels share the SMs at once, not by slices): 0.., or -1. */
static int mps_clients(nvmlDevice_t h) {
    if (!hk_nvml.nvmlDeviceGetMPSComputeRunningProcesses_v3) return 0;
    unsigned int n = 0;
    nvmlReturn_t r = hk_nvml.nvmlDeviceGetMPSComputeRunningProcesses_v3(h, &n, NULL);
    return r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE ? (int)n : 0;
}

int hk_nvml_device_alone(int ldev) {
    if (ldev < 0 || ldev >= HK_MAX_DEVICES) return -1;
    int64_t now = hk_limiter_now_ns(), last = hk_atomic_load_acquire(&g_peers[ldev].xsampled_ns);
    if (last == -1 || last == -2) return -1;
    if (last != 0 && now - last < PEERS_SAMPLE_NS) return hk_atomic_load_relaxed(&g_peers[ldev].xalone);
    if (!hk_atomic_cas_strong_acq_rel(&g_peers[ldev].xsampled_ns, &last, last == 0 ? -2 : now))
        return hk_atomic_load_relaxed(&g_peers[ldev].xalone);
    if (last == 0) { /* first sample: find the device */
        const char *uuid = hk_device_uuid(ldev);
        nvmlDevice_t h = NULL;
        if (!hk_nvml_ready() || !uuid[0] || !hk_nvml.nvmlDeviceGetProcessUtilization ||
            hk_nvml.nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS) {
            hk_atomic_store_relaxed(&g_peers[ldev].xalone, -1);
            hk_atomic_store_release(&g_peers[ldev].xsampled_ns, -1);
            return -1;
        }
        g_peers[ldev].handle = h;
    }
    int busy = busy_processes(g_peers[ldev].handle);
    int alone = busy < 0 ? -1 : busy <= 1 && mps_clients(g_peers[ldev].handle) == 0 ? 1 : 0;
    hk_atomic_store_relaxed(&g_peers[ldev].xalone, alone);
    hk_atomic_store_release(&g_peers[ldev].xsampled_ns, now);
    return alone;
}
