/* cnrt_stub.c - a stub CNRT (libcnrt.so): the few runtime calls a workload needs to see the
 * memory it is given and be refused past it, on the MLUs of HOOKCORE_STUB_MLUS (the container's,
 * in container order; cambricon_devices.h).
 *
 * It stands in for the vendor's runtime and driver together, so it holds a container to its sMLU
 * instance as they do: VIRTUAL_DEVICES (what Cambricon's device plugin hands a dynamic-sMLU
 * container: "<mlu node>,<ipcm node>,<instance node>" per MLU, separated by ';') names the
 * instance node of an MLU (/dev/cambricon-caps/cap_dev<slot>_mi<id>), and the instance's memory
 * is read from the sMLU table the node's CNDev keeps (HOOKCORE_STUB_CNDEV_SMLU), never from the
 * container's own description. An MLU without an instance node has its whole memory; an instance
 * node the table does not know is an MLU the runtime cannot open (cnrtErrorNoDevice).
 *
 * cnrtGetDeviceCount, cnrtSetDevice, cnrtGetDevice, cnrtMemGetInfo (free, total), cnrtMalloc
 * (cnrtErrorNoMem past the total), cnrtFree, cnrtGetErrorStr. Allocations are counted in this
 * process only (the vendor's driver counts an instance's across processes). Return codes are
 * CNRT's public values (cnrtSuccess 0, cnrtErrorNoDevice 100004, cnrtErrorDeviceInvalid 100005,
 * cnrtErrorArgsInvalid 100006, cnrtErrorNoMem 100100). Private to the stubs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cambricon_devices.h"

#define CNRT_API __attribute__((visibility("default")))

typedef int cnrtRet_t;
enum {
    cnrtSuccess = 0,
    cnrtErrorNoDevice = 100004,
    cnrtErrorDeviceInvalid = 100005,
    cnrtErrorArgsInvalid = 100006,
    cnrtErrorNoMem = 100100,
};
#define MAX_ALLOCS 1024

static cmb_device g_dev[CMB_MAX_DEVICES];
static int g_n = -1, g_current;
static unsigned long long g_used[CMB_MAX_DEVICES];
static struct {
    uintptr_t addr;
    size_t size;
    int dev;
} g_alloc[MAX_ALLOCS];
static uintptr_t g_next = 0x100000000ull;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void load(void) {
    if (g_n < 0) g_n = cmb_from_env(g_dev, CMB_MAX_DEVICES);
}

/* The instance node VIRTUAL_DEVICES names for host slot `slot`, in out; 1 found, 0 none. */
static int instance_node(int slot, char *out, size_t len) {
    const char *spec = getenv("VIRTUAL_DEVICES");
    char want[64];
    snprintf(want, sizeof want, "/dev/cambricon_dev%d,", slot);
    for (const char *p = spec; p && *p;) {
        const char *end = strchr(p, ';');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *last = memrchr(p, ',', n);
        if (strncmp(p, want, strlen(want)) == 0 && last && (size_t)(p + n - last - 1) < len) {
            memcpy(out, last + 1, (size_t)(p + n - last - 1));
            out[p + n - last - 1] = 0;
            return 1;
        }
        p += n + (end ? 1 : 0);
    }
    return 0;
}

/* Bytes container MLU `d` may hold: its instance's memory, or the MLU's; 0 when its instance node
   names no instance of the table. */
static unsigned long long total_of(int d) {
    char node[CMB_NAME_MAX], want[CMB_NAME_MAX];
    if (!instance_node(g_dev[d].slot, node, sizeof node)) return g_dev[d].memory;
    cmb_table t;
    if (cmb_table_read(&t) != 0) return 0;
    for (int i = 0; i < t.ninstances; i++) {
        cmb_instance_node(t.instances[i].slot, t.instances[i].id, want, sizeof want);
        const cmb_profile *p = cmb_profile_of(&t, t.instances[i].slot, t.instances[i].profile);
        if (strcmp(want, node) == 0 && p) return p->memory;
    }
    return 0;
}

CNRT_API cnrtRet_t cnrtGetDeviceCount(unsigned int *count) {
    if (!count) return cnrtErrorArgsInvalid;
    pthread_mutex_lock(&g_lock);
    load();
    *count = (unsigned)g_n;
    pthread_mutex_unlock(&g_lock);
    return g_n ? cnrtSuccess : cnrtErrorNoDevice;
}

CNRT_API cnrtRet_t cnrtSetDevice(int ordinal) {
    pthread_mutex_lock(&g_lock);
    load();
    cnrtRet_t r = ordinal < 0 || ordinal >= g_n ? cnrtErrorDeviceInvalid
                  : total_of(ordinal)           ? cnrtSuccess
                                                : cnrtErrorNoDevice;
    if (!r) g_current = ordinal;
    pthread_mutex_unlock(&g_lock);
    return r;
}

CNRT_API cnrtRet_t cnrtGetDevice(int *ordinal) {
    if (!ordinal) return cnrtErrorArgsInvalid;
    *ordinal = g_current;
    return cnrtSuccess;
}

CNRT_API cnrtRet_t cnrtMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    pthread_mutex_lock(&g_lock);
    load();
    unsigned long long total = g_current < g_n ? total_of(g_current) : 0;
    if (total && free_bytes) *free_bytes = (size_t)(total > g_used[g_current] ? total - g_used[g_current] : 0);
    if (total && total_bytes) *total_bytes = (size_t)total;
    pthread_mutex_unlock(&g_lock);
    return total ? cnrtSuccess : cnrtErrorNoDevice;
}

CNRT_API cnrtRet_t cnrtMalloc(void **ptr, size_t bytes) {
    if (!ptr || bytes == 0) return cnrtErrorArgsInvalid;
    pthread_mutex_lock(&g_lock);
    load();
    unsigned long long total = g_current < g_n ? total_of(g_current) : 0;
    cnrtRet_t r = total ? cnrtErrorNoMem : cnrtErrorNoDevice; /* unless a slot is taken below */
    for (int i = 0; total && g_used[g_current] + bytes <= total && i < MAX_ALLOCS; i++) {
        if (g_alloc[i].addr) continue;
        g_alloc[i].addr = g_next, g_alloc[i].size = bytes, g_alloc[i].dev = g_current;
        g_next += (bytes + 0xfffu) & ~(uintptr_t)0xfffu;
        g_used[g_current] += bytes;
        *ptr = (void *)g_alloc[i].addr;
        r = cnrtSuccess;
        break;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

CNRT_API cnrtRet_t cnrtFree(void *ptr) {
    cnrtRet_t r = cnrtErrorArgsInvalid;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; ptr && i < MAX_ALLOCS; i++) {
        if (g_alloc[i].addr != (uintptr_t)ptr) continue;
        g_used[g_alloc[i].dev] -= g_alloc[i].size;
        g_alloc[i].addr = 0;
        r = cnrtSuccess;
        break;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

CNRT_API const char *cnrtGetErrorStr(cnrtRet_t r) {
    switch (r) {
        case cnrtSuccess: return "cnrtSuccess";
        case cnrtErrorNoDevice: return "cnrtErrorNoDevice";
        case cnrtErrorDeviceInvalid: return "cnrtErrorDeviceInvalid";
        case cnrtErrorArgsInvalid: return "cnrtErrorArgsInvalid";
        case cnrtErrorNoMem: return "cnrtErrorNoMem";
        default: return "cnrtError (stub)";
    }
}
