/* cndev_stub.c - a stub CNDev library (libcndev.so): what the Cambricon MLU driver's discovery,
 * health and sMLU management ask of it, for the MLUs of HOOKCORE_STUB_MLUS (cambricon_devices.h).
 *
 * Prototypes, return codes, enum values and struct layouts are those of the public CNDev header
 * (cndev.h as Cambricon's open-source Kubernetes device plugin ships it); no Cambricon code is
 * used. drivers/cambricon_mlu/fake.py loads this library by path, so the driver's ctypes bindings
 * run unchanged against it. Device handles are not indices (index + 0x100), so a caller that
 * passes an index where a handle is due fails here as it would on a node.
 *
 * sMLU: profiles (a quota in percent and a memory size) and instances made from them live in the
 * table file HOOKCORE_STUB_CNDEV_SMLU (cambricon_devices.h), shared by every process. An instance
 * needs its MLU's sMLU mode on (else CNDEV_ERROR_NOT_SUPPORTED) and room for its memory (else
 * CNDEV_ERROR_INSUFFICIENT_SPACE; quotas are caps and may sum past 100); a name is unique per MLU
 * (CNDEV_ERROR_DUPLICATE), 1..99 characters without spaces (an empty name is stored as "-");
 * an identical profile is not made twice (CNDEV_ERROR_DUPLICATE); one in use is not destroyed
 * (CNDEV_ERROR_IN_USE). Instance handles are (instance id << 8) | slot.
 *
 * - HOOKCORE_STUB_CNDEV_DRIVER: the driver version cndevGetVersionInfo answers ("5.10.29").
 * - HOOKCORE_STUB_CNDEV_FAIL=call[@uuid]=code,...: the named call returns cndevRet_t `code`, for
 *   every MLU or the one with that UUID.
 * - HOOKCORE_STUB_CNDEV_STATE=<file>, re-read at every health query: lines `health <uuid> <0|1>`
 *   (deviceState: 0 in problem, 1 good) and `driver <uuid> <0..8>` (the driver's state, 4
 *   running); the last line of each kind for a UUID wins.
 * - HOOKCORE_STUB_CNDEV_PROCESSES=<file>, re-read at every cndevGetProcessInfo: the processes on the
 *   MLUs (cndev_stub_procs.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cndev_stub.h"

cmb_device g_dev[CMB_MAX_DEVICES];
int g_n, g_inited;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* HOOKCORE_STUB_CNDEV_FAIL: the code for `call` on MLU `d` (-1: none; d < 0 matches only `call`). */
static int injected(const char *call, int d) {
    const char *spec = getenv("HOOKCORE_STUB_CNDEV_FAIL");
    if (!spec) return -1;
    size_t cl = strlen(call);
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char item[200];
        if (n < sizeof item) {
            memcpy(item, p, n);
            item[n] = 0;
            char *eq = strchr(item, '=');
            char *at = strchr(item, '@');
            if (eq && (size_t)((at && at < eq ? at : eq) - item) == cl && strncmp(item, call, cl) == 0) {
                *eq = 0;
                if (!at || at > eq || (d >= 0 && strcasecmp(at + 1, g_dev[d].uuid) == 0)) return atoi(eq + 1);
            }
        }
        p += n + (end ? 1 : 0);
    }
    return -1;
}

/* The MLU of a handle: its index, or -1. */
static int index_of(cndevDevice_t handle) {
    int d = handle - HANDLE_BASE;
    return d >= 0 && d < g_n ? d : -1;
}

cndevRet_t cndev_stub_check(const char *call, cndevDevice_t handle, const void *out, const int32_t *version, int *d) {
    if (!g_inited) return CNDEV_ERROR_UNINITIALIZED;
    if (!out) return CNDEV_ERROR_INVALID_ARGUMENT;
    if ((*d = index_of(handle)) < 0) return CNDEV_ERROR_INVALID_DEVICE_ID;
    if (version && (*version < 1 || *version > VERSION_MAX)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    int code = injected(call, *d);
    return code >= 0 ? code : CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevInit(int32_t reserved) {
    (void)reserved;
    int code = injected("cndevInit", -1);
    if (code >= 0) return code;
    pthread_mutex_lock(&g_lock); /* every init reads the description again (a test's next fake node) */
    g_n = cmb_from_env(g_dev, CMB_MAX_DEVICES);
    g_inited = 1;
    pthread_mutex_unlock(&g_lock);
    return g_n ? CNDEV_SUCCESS : CNDEV_ERROR_NO_DEVICES;
}

CNDEV_API cndevRet_t cndevRelease(void) { return CNDEV_SUCCESS; }

CNDEV_API const char *cndevGetErrorString(cndevRet_t id) {
    switch (id) {
        case CNDEV_SUCCESS: return "CNDEV_SUCCESS";
        case CNDEV_ERROR_UNINITIALIZED: return "CNDEV_ERROR_UNINITIALIZED";
        case CNDEV_ERROR_INVALID_ARGUMENT: return "CNDEV_ERROR_INVALID_ARGUMENT";
        case CNDEV_ERROR_INSUFFICIENT_SPACE: return "CNDEV_ERROR_INSUFFICIENT_SPACE";
        case CNDEV_ERROR_NOT_SUPPORTED: return "CNDEV_ERROR_NOT_SUPPORTED";
        case CNDEV_ERROR_NOT_FOUND: return "CNDEV_ERROR_NOT_FOUND";
        default: return "CNDEV_ERROR (stub)";
    }
}

CNDEV_API cndevRet_t cndevGetDeviceCount(cndevCardInfo_t *info) {
    if (!g_inited) return CNDEV_ERROR_UNINITIALIZED;
    if (!info) return CNDEV_ERROR_INVALID_ARGUMENT;
    int code = injected("cndevGetDeviceCount", -1);
    if (code >= 0) return code;
    info->number = (uint32_t)g_n;
    return CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevGetDeviceHandleByIndex(int32_t index, cndevDevice_t *handle) {
    if (!g_inited) return CNDEV_ERROR_UNINITIALIZED;
    if (!handle || index < 0 || index >= g_n) return CNDEV_ERROR_INVALID_ARGUMENT;
    int code = injected("cndevGetDeviceHandleByIndex", index);
    if (code >= 0) return code;
    *handle = HANDLE_BASE + index;
    return CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevGetUUID(cndevUUID_t *u, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetUUID", dev, u, u ? &u->version : NULL, &d);
    if (r) return r;
    memset(u->uuid, 0, sizeof u->uuid);
    memcpy(u->uuid, g_dev[d].uuid + 4, strlen(g_dev[d].uuid + 4)); /* 36 characters: after "MLU-" */
    u->ncsUUID64 = 0;
    return CNDEV_SUCCESS;
}

/* cndevNameEnum_t of a card name: its family's value. */
static int name_id(const char *name) {
    static const struct {
        const char *prefix;
        int id;
    } ids[] = {{"MLU590", 26}, {"MLU370", 23}, {"MLU365", 24}, {"MLU290", 20}, {"MLU270", 1}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        if (strncasecmp(name, ids[i].prefix, strlen(ids[i].prefix)) == 0) return ids[i].id;
    }
    return 23;
}

CNDEV_API cndevRet_t cndevGetCardName(cndevCardName_t *n, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetCardName", dev, n, n ? &n->version : NULL, &d);
    if (r) return r;
    n->id = name_id(g_dev[d].name);
    return CNDEV_SUCCESS;
}

CNDEV_API const char *cndevGetCardNameStringByDevId(cndevDevice_t dev) {
    int d = g_inited ? index_of(dev) : -1;
    return d < 0 || injected("cndevGetCardNameStringByDevId", d) >= 0 ? "Unknown" : g_dev[d].name;
}

CNDEV_API cndevRet_t cndevGetCardSN(cndevCardSN_t *sn, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetCardSN", dev, sn, sn ? &sn->version : NULL, &d);
    if (r) return r;
    const char *v = cmb_get(&g_dev[d], "sn");
    sn->sn = v ? strtoul(v, NULL, 16) : 0x3e80000000ul + (unsigned long)d;
    v = cmb_get(&g_dev[d], "mbsn");
    sn->motherBoardSn = v ? strtoul(v, NULL, 16) : 0;
    return CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevGetMemoryUsageV2(cndevMemoryInfoV2_t *m, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetMemoryUsageV2", dev, m, NULL, &d);
    if (r) return r;
    memset(m, 0, sizeof *m);
    m->physicalMemoryTotal = (long)(g_dev[d].memory >> 20);
    m->virtualMemoryTotal = m->physicalMemoryTotal;
    return CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevGetCoreCount(cndevCardCoreCount_t *c, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetCoreCount", dev, c, c ? &c->version : NULL, &d);
    if (r) return r;
    c->count = (int32_t)cmb_get_int(&g_dev[d], "cores", 16);
    return CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevGetPCIeInfoV2(cndevPCIeInfoV2_t *p, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetPCIeInfoV2", dev, p, NULL, &d);
    if (r) return r;
    memset(p, 0, sizeof *p);
    unsigned dom = 0, bus = 0x10u + (unsigned)d, device = 0, fn = 0;
    const char *pci = cmb_get(&g_dev[d], "pci");
    if (pci && sscanf(pci, "%x:%x:%x.%x", &dom, &bus, &device, &fn) != 4) return CNDEV_ERROR_UNKNOWN;
    p->vendor = 0xcabc;
    p->deviceId = (uint32_t)cmb_get_int(&g_dev[d], "pciid", 0x0370);
    p->domain = dom, p->bus = bus, p->device = device, p->function = fn;
    p->slotId = 0xffff;
    return CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevGetVersionInfo(cndevVersionInfo_t *v, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetVersionInfo", dev, v, v ? &v->version : NULL, &d);
    if (r) return r;
    const char *text = getenv("HOOKCORE_STUB_CNDEV_DRIVER");
    unsigned a = 5, b = 10, c = 29;
    if (text && sscanf(text, "%u.%u.%u", &a, &b, &c) != 3) return CNDEV_ERROR_UNKNOWN;
    v->driverMajorVersion = a, v->driverMinorVersion = b, v->driverBuildVersion = c;
    v->mcuMajorVersion = 1, v->mcuMinorVersion = 1, v->mcuBuildVersion = 6;
    return CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevGetCardHealthState(cndevCardHealthState_t *h, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetCardHealthState", dev, h, h ? &h->version : NULL, &d);
    if (r) return r;
    int good = (int)cmb_get_int(&g_dev[d], "health", 1), driver = 4;
    const char *path = getenv("HOOKCORE_STUB_CNDEV_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[256], word[16], uuid[64];
    int value;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%15s %63s %d", word, uuid, &value) != 3 || strcasecmp(uuid, g_dev[d].uuid) != 0) continue;
        if (!strcmp(word, "health")) good = value;
        if (!strcmp(word, "driver")) driver = value;
    }
    if (f) fclose(f);
    h->deviceState = good ? 1 : 0;
    h->driverState = driver;
    h->health = good && driver == 4;
    return CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevGetSMLUMode(cndevSMLUMode_t *m, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetSMLUMode", dev, m, m ? &m->version : NULL, &d);
    if (r) return r;
    m->smluMode = cmb_get_int(&g_dev[d], "smlu", 1) ? 1 : 0;
    return CNDEV_SUCCESS;
}
