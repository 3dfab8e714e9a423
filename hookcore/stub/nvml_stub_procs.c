/* nvml_stub_procs.c - the stub libnvidia-ml's process list, for the node daemon's watchdog tests.
 *
 * STUB_NVML_PROCESSES names a file read on every query (so a test rewrites it while a daemon
 * polls), one process per line:
 *
 *     <device index>[/<gi>/<ci>] <host pid> <used memory bytes> [<utilization %>]
 *
 * The device index is NVML's (nvmlDeviceGetIndex); `/<gi>/<ci>` places the process in the MIG
 * device of GPU instance <gi> and compute instance <ci> of that GPU (decimal IDs, as
 * nvmlDeviceGetGpuInstanceId and nvmlDeviceGetComputeInstanceId answer them; 0xFFFFFFFF, NVML's
 * "no instance", is refused). Blank lines and lines starting with '#' are skipped; a malformed
 * line is skipped with one message on stderr naming it (so a test sees its mistake). Every listed
 * process is a compute process (graphics lists are always empty).
 *
 * What each query lists, as NVML documents it (nvml.h, nvmlDeviceGetComputeRunningProcesses_v3
 * and nvmlProcessInfo_t):
 *   - a GPU with MIG off (or unsupported): its lines without an instance, gpuInstanceId and
 *     computeInstanceId 0xFFFFFFFF; a line with a utilization answers
 *     nvmlDeviceGetProcessUtilization with one sample stamped now;
 *   - a GPU with MIG on, by its own handle: every line of the GPU (NVML's aggregate, which the
 *     real library gives only to a privileged caller), each with the instance IDs its line names
 *     (0xFFFFFFFF where it names none); nvmlDeviceGetProcessUtilization answers NOT_SUPPORTED
 *     ("not currently supported" on MIG-enabled GPUs);
 *   - a MIG device handle (nvmlDeviceGetMigDeviceHandleByIndex): the lines naming its GPU and
 *     instance IDs; once its instance is destroyed, NOT_FOUND, as every query of it. Its queries
 *     pass its GPU's checks: HOOKCORE_STUB_NVML_FAIL's `call@<uuid>` names the GPU's UUID.
 * A line naming an instance that does not exist is listed by the GPU's aggregate only. Unset or
 * unreadable: no process runs anywhere.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvml_stub_mig.h"

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

enum { OK = 0, ERR_INVALID_ARGUMENT = 2, ERR_NOT_SUPPORTED = 3, ERR_NOT_FOUND = 6, ERR_INSUFFICIENT_SIZE = 7 };
#define NO_INSTANCE 0xFFFFFFFFu

typedef struct {
    unsigned pid;
    unsigned long long used;
    int util;
    unsigned gi, ci; /* NO_INSTANCE: none named */
} proc_t;

/* What a query lists: the lines of NVML device `index` that are outside MIG (WHOLE), all of them
 * (AGGREGATE: its GPU is in MIG mode) or those of one MIG device (INSTANCE: `gi`, `ci`). */
typedef enum { WHOLE, AGGREGATE, INSTANCE } scope_kind;
typedef struct {
    scope_kind kind;
    unsigned index, gi, ci;
} scope_t;

/* One line into *dev and *out; 0 when it is malformed. */
static int parse(const char *p, unsigned *dev, proc_t *out) {
    int end = 0;
    out->gi = out->ci = NO_INSTANCE;
    out->util = -1;
    if (sscanf(p, "%u%n", dev, &end) != 1) return 0;
    p += end;
    if (*p == '/') {
        end = 0;
        if (sscanf(p, "/%u/%u%n", &out->gi, &out->ci, &end) != 2 || !end || out->gi == NO_INSTANCE ||
            out->ci == NO_INSTANCE)
            return 0;
        p += end;
    }
    if (*p != ' ' && *p != '\t') return 0;
    end = 0;
    if (sscanf(p, "%u %llu %n", &out->pid, &out->used, &end) != 2 || !end || out->pid == 0) return 0;
    p += end;
    if (*p && *p != '\n') {
        int e2 = 0;
        if (sscanf(p, "%d %n", &out->util, &e2) != 1 || (p[e2] && p[e2] != '\n') || out->util < 0 || out->util > 100)
            return 0;
    }
    return 1;
}

static int in_scope(const scope_t *s, unsigned dev, const proc_t *p) {
    if (dev != s->index) return 0;
    if (s->kind == WHOLE) return p->gi == NO_INSTANCE;
    if (s->kind == INSTANCE) return p->gi == s->gi && p->ci == s->ci;
    return 1;
}

/* The processes a query of scope `s` lists now, at most `max`; returns how many. */
static unsigned read_procs(const scope_t *s, proc_t *out, unsigned max) {
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
        unsigned dev = 0;
        proc_t one;
        if (!parse(p, &dev, &one)) {
            fprintf(stderr,
                    "stub: STUB_NVML_PROCESSES %s line %u: expected '<device index>[/<gi>/<ci>] <host pid> "
                    "<used memory bytes> [<utilization 0-100>]', skipped\n",
                    path, lineno);
            continue;
        }
        if (in_scope(s, dev, &one) && n < max) out[n++] = one;
    }
    fclose(f);
    return n;
}

/* The checks of a query of `d` (a GPU or a MIG device handle: its GPU's), and its scope. */
static nvmlReturn_t enter(const char *call, nvmlDevice_t d, scope_t *s) {
    nvmlDevice_t gpu = d;
    int gone = OK;
    s->kind = WHOLE;
    if (stub_mig_device_of(d, &gpu, &s->gi, &s->ci, &gone)) s->kind = INSTANCE;
    nvmlReturn_t r = stub_nvml_enter(call, gpu, &s->index);
    if (r != OK) return r;
    if (gone != OK) return gone;
    stub_gpu_view g;
    if (s->kind == WHOLE && stub_nvml_gpu_of(gpu, &g) == 0 && g.mig == 1) s->kind = AGGREGATE;
    return OK;
}

/* The size protocol of NVML's list calls: a short (or NULL) buffer gets INSUFFICIENT_SIZE and the
 * count; none running is SUCCESS with 0. `size` is one entry's, `fill` writes entry i. */
static nvmlReturn_t list(const char *call, nvmlDevice_t d, unsigned *count, void *buf, size_t size, int graphics,
                         void (*fill)(void *, const proc_t *)) {
    scope_t s;
    nvmlReturn_t r = enter(call, d, &s);
    if (r != OK) return r;
    if (!count) return ERR_INVALID_ARGUMENT;
    proc_t procs[PROCS_MAX]; /* 32 KiB of stack: no state shared between threads */
    unsigned n = graphics ? 0 : read_procs(&s, procs, PROCS_MAX);
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
    e->gpuInstanceId = p->gi;
    e->computeInstanceId = p->ci;
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
 * newer than `since`: NOT_FOUND, as the real library answers. In MIG mode (the GPU's handle or a
 * MIG device's): NOT_SUPPORTED. */
STUB_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *samples,
                                                      unsigned int *count, unsigned long long since) {
    scope_t s;
    nvmlReturn_t r = enter(__func__, d, &s);
    if (r != OK) return r;
    if (s.kind != WHOLE) return ERR_NOT_SUPPORTED;
    if (!count) return ERR_INVALID_ARGUMENT;
    proc_t procs[PROCS_MAX];
    unsigned total = read_procs(&s, procs, PROCS_MAX), n = 0;
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
