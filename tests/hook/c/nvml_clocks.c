/* nvml_clocks.c - a test double of libnvidia-ml.so.1 for the strict cap and the contention
 * estimate's gate: the stub devices' UUIDs (legacy form, STUB_CUDA_DEVICES), an SM clock of
 * STUB_SM_MHZ (default application clock STUB_APP_MHZ), busy processes (STUB_NVML_PEERS) and
 * power (STUB_POWER_MW, STUB_POWER_LIMIT_MW, STUB_UTIL_GPU). Only what libvgpu.so's NVML shim
 * calls. (The project's NVML stub, owned by the GPU driver, does not model clocks; this file is the
 * tests' own.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct dev {
    int index;
} dev;
static dev g_dev[16];

static unsigned env_u(const char *name, unsigned dflt) {
    const char *v = getenv(name);
    return v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

int nvmlInit_v2(void) {
    for (int i = 0; i < 16; i++) g_dev[i].index = i;
    return 0;
}
int nvmlDeviceGetHandleByUUID(const char *uuid, dev **out) {
    unsigned n = env_u("STUB_CUDA_DEVICES", 1);
    for (unsigned i = 0; i < n && i < 16; i++) {
        char u[64];
        snprintf(u, sizeof u, "GPU-57554201-0000-4000-8000-0000000000%02x", i);
        if (!strcasecmp(u, uuid)) {
            *out = &g_dev[i];
            return 0;
        }
    }
    return 13; /* NVML_ERROR_NOT_FOUND */
}
int nvmlDeviceGetUUID(dev *d, char *uuid, unsigned len) {
    snprintf(uuid, len, "GPU-57554201-0000-4000-8000-0000000000%02x", d->index);
    return 0;
}
int nvmlDeviceGetIndex(dev *d, unsigned *i) {
    *i = (unsigned)d->index;
    return 0;
}
/* STUB_SM_MHZ: one clock, or a schedule "1800,1200,..." moving every STUB_SM_PERIOD_US (default
   20000) on the monotonic clock: what the stub libcuda runs kernels at (hookcore/stub/cuda_stub.c). */
int nvmlDeviceGetClockInfo(dev *d, int type, unsigned *mhz) {
    (void)d;
    if (type != 1) return 2; /* NVML_CLOCK_SM only */
    const char *sm = getenv("STUB_SM_MHZ");
    unsigned vals[16], n = 0;
    for (const char *p = sm; p && *p && n < 16;) {
        vals[n++] = (unsigned)strtoul(p, NULL, 10);
        const char *c = strchr(p, ',');
        if (!c) break;
        p = c + 1;
    }
    if (n <= 1) {
        *mhz = n ? vals[0] : 1500;
        return 0;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    long long period = (long long)env_u("STUB_SM_PERIOD_US", 20000) * 1000;
    *mhz = vals[(now / period) % n];
    return 0;
}
int nvmlDeviceGetClock(dev *d, int type, int id, unsigned *mhz) {
    (void)d;
    if (type != 1 || id != 2) return 2; /* SM, default application clock */
    *mhz = env_u("STUB_APP_MHZ", 0);
    return *mhz ? 0 : 3; /* NVML_ERROR_NOT_SUPPORTED */
}
/* STUB_NVML_PEERS=<n>: n processes ran kernels on every device lately (one utilization sample each,
   at 40% SM; 0: none, NVML's NOT_FOUND); unset: per-process utilization is not supported. */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} sample;
int nvmlDeviceGetProcessUtilization(dev *d, sample *s, unsigned *count, unsigned long long since) {
    (void)d;
    (void)since;
    const char *v = getenv("STUB_NVML_PEERS");
    if (!v) return 3; /* NVML_ERROR_NOT_SUPPORTED */
    unsigned n = (unsigned)strtoul(v, NULL, 10);
    if (!n) return 6; /* NVML_ERROR_NOT_FOUND */
    if (!s || *count < n) {
        *count = n;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (unsigned i = 0; i < n; i++) {
        memset(&s[i], 0, sizeof s[i]);
        s[i].pid = 1000 + i;
        s[i].timeStamp = (unsigned long long)ts.tv_sec * 1000000ULL;
        s[i].smUtil = 40;
    }
    *count = n;
    return 0;
}
/* STUB_POWER_MW, STUB_POWER_LIMIT_MW, STUB_UTIL_GPU: the device's power now, its enforced limit and
   its busy percent (unset: not supported, as on a device without power readings). STUB_POWER_IDLE_MW:
   the first reading instead (a device still idle when the process's first work arrives). */
int nvmlDeviceGetPowerUsage(dev *d, unsigned *mw) {
    static int read;
    (void)d;
    if (!getenv("STUB_POWER_MW")) return 3;
    *mw = !read++ && getenv("STUB_POWER_IDLE_MW") ? env_u("STUB_POWER_IDLE_MW", 0) : env_u("STUB_POWER_MW", 0);
    return 0;
}
int nvmlDeviceGetEnforcedPowerLimit(dev *d, unsigned *mw) {
    (void)d;
    if (!getenv("STUB_POWER_LIMIT_MW")) return 3;
    *mw = env_u("STUB_POWER_LIMIT_MW", 0);
    return 0;
}
typedef struct {
    unsigned gpu, memory;
} utilization;
int nvmlDeviceGetUtilizationRates(dev *d, utilization *u) {
    (void)d;
    if (!getenv("STUB_UTIL_GPU")) return 3;
    u->gpu = env_u("STUB_UTIL_GPU", 0);
    u->memory = 0;
    return 0;
}
