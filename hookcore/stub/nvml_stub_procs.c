/* nvml_stub_procs.c - the stub libnvidia-ml's process list, for the node daemon's watchdog tests.
 *
 * STUB_NVML_PROCESSES names a file read on every query (so a test rewrites it while a daemon
 * polls), one process per line:
 *
 *     <device index> <host pid> <used memory bytes> [<utilization %>]
 *
 * The device index is NVML's (nvmlDeviceGetIndex); blank lines and lines starting with '#' are
 * skipped; a malformed line is skipped with one message on stderr naming it (so a test sees its
 * mistake). Every listed process is a compute process (graphics lists are always empty); a line
 * with a utilization answers nvmlDeviceGetProcessUtilization with one sample stamped now. Unset
 * or unreadable: no process runs anywhere.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STUB_API  __attribute__((visibility("default")))
#define PROCS_MAX 1024

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

enum { OK = 0, ERR_INVALID_ARGUMENT = 2, ERR_NOT_FOUND = 6, ERR_INSUFFICIENT_SIZE = 7 };
#define NO_INSTANCE 0xFFFFFFFFu

/* nvml_stub.c: the common checks of a device query, and the device's NVML index. */
nvmlReturn_t stub_nvml_enter(const char *call, nvmlDevice_t d, unsigned *index);

typedef struct {
    unsigned pid;
    unsigned long long used;
    int util;
} proc_t;

/* The processes of NVML device `index` now, at most `max`; returns how many. */
static unsigned read_procs(unsigned index, proc_t *out, unsigned max) {
    const char *path = getenv("STUB_NVML_PROCESSES");
    if (!path || !*path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    unsigned n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\n' || *p == 0) continue;
        unsigned dev = 0, pid = 0;
        unsigned long long used = 0;
        int util = -1, end = 0;
        int got = sscanf(p, "%u %u %llu %n", &dev, &pid, &used, &end);
        if (got == 3 && p[end] && p[end] != '\n') {
            int e2 = 0;
            if (sscanf(p + end, "%d %n", &util, &e2) != 1 || (p[end + e2] && p[end + e2] != '\n') || util < 0 ||
                util > 100)
                got = 0;
        }
        if (got != 3 || pid == 0) {
            fprintf(stderr,
                    "stub: STUB_NVML_PROCESSES %s line %u: expected '<device index> <host pid> "
                    "<used memory bytes> [<utilization 0-100>]', skipped\n",
                    path, lineno);
            continue;
        }
        if (dev != index || n >= max) continue;
        out[n].pid = pid;
        out[n].used = used;
        out[n].util = util;
        n++;
    }
    fclose(f);
    return n;
}

/* The size protocol of NVML's list calls: a short (or NULL) buffer gets INSUFFICIENT_SIZE and the
 * count; none running is SUCCESS with 0. `size` is one entry's, `fill` writes entry i. */
static nvmlReturn_t list(const char *call, nvmlDevice_t d, unsigned *count, void *buf, size_t size, int graphics,
                         void (*fill)(void *, const proc_t *)) {
    unsigned index = 0;
    nvmlReturn_t r = stub_nvml_enter(call, d, &index);
    if (r != OK) return r;
    if (!count) return ERR_INVALID_ARGUMENT;
    proc_t procs[PROCS_MAX]; /* 24 KiB of stack: no state shared between threads */
    unsigned n = graphics ? 0 : read_procs(index, procs, PROCS_MAX);
    if (n == 0) {
        *count = 0;
        return OK;
    }
    if (!buf || *count < n) {
        *count = n;
        return ERR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) fill((char *)buf + i * size, &procs[i]);
    *count = n;
    return OK;
}

static void fill_v1(void *dst, const proc_t *p) {
    nvmlProcessInfo_v1_t *e = dst;
    e->pid = p->pid;
    e->usedGpuMemory = p->used;
}
static void fill_v2(void *dst, const proc_t *p) {
    nvmlProcessInfo_v2_t *e = dst;
    e->pid = p->pid;
    e->usedGpuMemory = p->used;
    e->gpuInstanceId = e->computeInstanceId = NO_INSTANCE;
}

#define LIST(name, type, graphics, fill)                                           \
    STUB_API nvmlReturn_t name(nvmlDevice_t d, unsigned int *count, type *infos) { \
        return list(#name, d, count, infos, sizeof(type), graphics, fill);         \
    }
LIST(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_v2_t, 0, fill_v2)
LIST(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 0, fill_v2)
LIST(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, 0, fill_v1)
LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_v2_t, 1, fill_v2)
LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t, 1, fill_v2)
LIST(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t, 1, fill_v1)

/* One sample per process with a utilization, stamped now (µs, CLOCK_REALTIME as NVML's); none
 * newer than `since`: NOT_FOUND, as the real library answers. */
STUB_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *samples,
                                                      unsigned int *count, unsigned long long since) {
    unsigned index = 0;
    nvmlReturn_t r = stub_nvml_enter(__func__, d, &index);
    if (r != OK) return r;
    if (!count) return ERR_INVALID_ARGUMENT;
    proc_t procs[PROCS_MAX];
    unsigned total = read_procs(index, procs, PROCS_MAX), n = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long now = (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
    for (unsigned i = 0; i < total; i++)
        if (procs[i].util >= 0) procs[n++] = procs[i];
    if (n == 0 || now <= since) {
        *count = 0;
        return ERR_NOT_FOUND;
    }
    if (!samples || *count < n) {
        *count = n;
        return ERR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        memset(&samples[i], 0, sizeof samples[i]);
        samples[i].pid = procs[i].pid;
        samples[i].timeStamp = now;
        samples[i].smUtil = (unsigned)procs[i].util;
    }
    *count = n;
    return OK;
}
