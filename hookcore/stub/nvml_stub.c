/* nvml_stub.c - a stub libnvidia-ml.so.1 matching the devices of cuda_stub.c.
 *
 * NVML enumerates physical devices (it ignores CUDA_VISIBLE_DEVICES, like the real one):
 * STUB_CUDA_DEVICES of them, STUB_CUDA_MEMORY each, UUIDs as in cuda_stub.c. Memory in use
 * is reported from STUB_NVML_USED (bytes, default 0) so tests can check that the shim
 * replaces it with the claim's usage.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STUB_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
       NVML_ERROR_INSUFFICIENT_SIZE = 7 };

static int g_init;
static unsigned g_count;
static unsigned long long g_total;
static struct nvmlDevice_st { int index; } g_dev[16];

static unsigned long long parse_size(const char *s, unsigned long long dflt) {
    if (!s || !*s) return dflt;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!strcmp(end, "Ki")) v <<= 10;
    else if (!strcmp(end, "Mi")) v <<= 20;
    else if (!strcmp(end, "Gi")) v <<= 30;
    else if (!strcmp(end, "Ti")) v <<= 40;
    return v;
}

STUB_API nvmlReturn_t nvmlInit_v2(void) {
    const char *n = getenv("STUB_CUDA_DEVICES");
    int c = n ? atoi(n) : 1;
    g_count = c < 0 ? 0 : c > 16 ? 16 : (unsigned)c;
    g_total = parse_size(getenv("STUB_CUDA_MEMORY"), 16ULL << 30);
    for (unsigned i = 0; i < g_count; i++) g_dev[i].index = (int)i;
    g_init = 1;
    return NVML_SUCCESS;
}
STUB_API nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
STUB_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }
STUB_API nvmlReturn_t nvmlShutdown(void) { g_init = 0; return NVML_SUCCESS; }

STUB_API const char *nvmlErrorString(nvmlReturn_t r) { return r == NVML_SUCCESS ? "Success" : "Stub error"; }

STUB_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = g_count;
    return NVML_SUCCESS;
}
STUB_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

STUB_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *dev) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    if (!dev || i >= g_count) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &g_dev[i];
    return NVML_SUCCESS;
}
STUB_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *dev) {
    return nvmlDeviceGetHandleByIndex_v2(i, dev);
}

STUB_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int len) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    if (!dev || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
    if (len < 41) return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(uuid, len, "GPU-57554201-0000-4000-8000-0000000000%02x", dev->index);
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    if (!dev || !index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)dev->index;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int len) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    if (!dev || !name) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(name, len, "Stub GPU %d", dev->index);
    return NVML_SUCCESS;
}

static unsigned long long stub_used(void) {
    unsigned long long u = parse_size(getenv("STUB_NVML_USED"), 0);
    return u > g_total ? g_total : u;
}

STUB_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    if (!dev || !m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = g_total;
    m->used = stub_used();
    m->free = g_total - m->used;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    if (!dev || !m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = g_total;
    m->reserved = 0;
    m->used = stub_used();
    m->free = g_total - m->used;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(v, len, "580.00.stub");
    return NVML_SUCCESS;
}
