/* nvml_stub_events.c - health events of the stub libnvidia-ml.so.1: what a test injects through
 * HOOKCORE_STUB_NVML_EVENTS (nvml_stub.c's header has the lines) and the NVML event sets that deliver
 * XID events to the driver's health monitor.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "nvml_stub.h"

#define STUB_MAX_SETS 16
#define STUB_QUEUE    256

struct nvmlEventSet_st {
    int used;
    unsigned long long mask[STUB_MAX_DEVICES];
    nvmlEventData_t queue[STUB_QUEUE];
    unsigned head, tail;
};

static struct nvmlEventSet_st g_sets[STUB_MAX_SETS];
static long g_events_off;
static char g_events_path[4096]; /* the events file g_events_off is an offset into */

/* ---------------------------------------------------------------------------------------------
 * Injected health events
 * ------------------------------------------------------------------------------------------- */
static void deliver(struct nvmlDevice_st *d, unsigned long long type, unsigned long long data) {
    unsigned i = (unsigned)(d - g_dev);
    for (int s = 0; s < STUB_MAX_SETS; s++) {
        struct nvmlEventSet_st *set = &g_sets[s];
        if (!set->used || !(set->mask[i] & type) || set->tail - set->head >= STUB_QUEUE) continue;
        nvmlEventData_t *e = &set->queue[set->tail++ % STUB_QUEUE];
        memset(e, 0, sizeof *e);
        e->device = d;
        e->eventType = type;
        e->eventData = data;
        e->gpuInstanceId = e->computeInstanceId = 0xFFFFFFFFu;
    }
}

static void apply_line(const char *line) {
    char verb[16], uuid[96];
    unsigned long long a = 0, b = 0;
    int n = sscanf(line, "%15s %95s %llu %llu", verb, uuid, &a, &b);
    if (n < 2) return;
    struct nvmlDevice_st *d = stub_nvml_by_uuid(uuid);
    if (!d) return;
    if (!strcmp(verb, "xid") && n >= 3) {
        d->recovery = n >= 4 ? (unsigned)b : 0;
        deliver(d, EV_XID, a);
    } else if (!strcmp(verb, "lost")) {
        d->lost = 1;
        d->recovery = 1; /* NVML_GPU_RECOVERY_ACTION_GPU_RESET */
        deliver(d, EV_XID, 79);
    } else if (!strcmp(verb, "action") && n >= 3) {
        d->recovery = (unsigned)a;
    } else if (!strcmp(verb, "reset")) {
        d->lost = 0;
        d->recovery = 0;
    }
}

/* Read the complete lines appended to the events file since the last call (lock held). */
void stub_nvml_sync_events(void) {
    const char *path = getenv("HOOKCORE_STUB_NVML_EVENTS");
    if (!path || !*path) return;
    if (strcmp(path, g_events_path) != 0) { /* another file than at init: only what comes after now */
        struct stat st0;
        snprintf(g_events_path, sizeof g_events_path, "%s", path);
        g_events_off = stat(path, &st0) == 0 ? (long)st0.st_size : 0;
    }
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size <= g_events_off) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fseek(f, g_events_off, SEEK_SET) == 0) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            size_t len = strlen(line);
            if (!len || line[len - 1] != '\n') break; /* a partial line: read it next time */
            g_events_off += (long)len;
            apply_line(line);
        }
    }
    fclose(f);
}

/* At nvmlInit (lock held): only what is appended to the events file from now on is read. */
void stub_nvml_events_init(void) {
    struct stat st;
    const char *path = getenv("HOOKCORE_STUB_NVML_EVENTS");
    g_events_off = (path && *path && stat(path, &st) == 0) ? (long)st.st_size : 0; /* only what comes after init */
    snprintf(g_events_path, sizeof g_events_path, "%s", path ? path : "");
}

/* ---------------------------------------------------------------------------------------------
 * Events
 * ------------------------------------------------------------------------------------------- */
STUB_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    ENTER(d);
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = EV_XID;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER_SYS();
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g_lock);
    for (int s = 0; s < STUB_MAX_SETS; s++) {
        if (!g_sets[s].used) {
            memset(&g_sets[s], 0, sizeof g_sets[s]);
            g_sets[s].used = 1;
            *set = &g_sets[s];
            pthread_mutex_unlock(&g_lock);
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return NVML_ERROR_MEMORY;
}

static int valid_set(nvmlEventSet_t s) { return s >= g_sets && s < g_sets + STUB_MAX_SETS && s->used; }

STUB_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    ENTER(d);
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = NVML_SUCCESS;
    if (!valid_set(set))
        r = NVML_ERROR_INVALID_ARGUMENT;
    else if (types & ~EV_XID)
        r = NVML_ERROR_NOT_SUPPORTED;
    else
        set->mask[d - g_dev] |= types;
    pthread_mutex_unlock(&g_lock);
    return r;
}

STUB_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    ENTER_SYS();
    if (!data) return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        pthread_mutex_lock(&g_lock);
        if (!valid_set(set)) {
            pthread_mutex_unlock(&g_lock);
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        stub_nvml_sync_events();
        if (set->head != set->tail) {
            *data = set->queue[set->head++ % STUB_QUEUE];
            pthread_mutex_unlock(&g_lock);
            return NVML_SUCCESS;
        }
        pthread_mutex_unlock(&g_lock);
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ms = (now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000LL;
        if (ms >= (long long)timeoutms) return NVML_ERROR_TIMEOUT;
        struct timespec nap = {0, 10 * 1000000L};
        nanosleep(&nap, NULL);
    }
}
STUB_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

STUB_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    ENTER_SYS();
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = valid_set(set) ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) set->used = 0;
    pthread_mutex_unlock(&g_lock);
    return r;
}
