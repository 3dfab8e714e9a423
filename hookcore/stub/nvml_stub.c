/* nvml_stub.c - a stub libnvidia-ml.so.1: fake GPUs for tests and the demo, no GPU needed.
 *
 * It answers the NVML calls that hookcore's NVML shim, the hami-core-gpu driver's discovery
 * (through nvidia-ml-py) and its health monitor make, with the ABI of the real library, so the
 * driver's real NVML code path is what runs against it. Like the real NVML it enumerates every
 * device of the node and ignores CUDA_VISIBLE_DEVICES.
 *
 * Devices (see README.md in this directory for every key), parsed by stub_devices.c:
 *   HOOKCORE_STUB_DEVICES  "uuid=GPU-..,memory=141Gi,name=NVIDIA H200,index=0,minor=0,
 *                           pci=0000:19:00.0,arch=9,cc=9.0,brand=2,mig=off,serial=..;uuid=..."
 *   unset: the legacy STUB_CUDA_DEVICES / STUB_CUDA_MEMORY, as in cuda_stub.c.
 *   HOOKCORE_STUB_NVML_DRIVER  driver version (default 580.95.05)
 *   HOOKCORE_STUB_NVML_CUDA    CUDA driver version as NVML encodes it (default 13000 = 13.0)
 *   STUB_NVML_USED             memory in use on every device (bytes or Ki/Mi/Gi), default 0
 *   HOOKCORE_STUB_NVML_FAIL    "call[@uuid]=code,...": make a call fail with an NVML return code
 *                              (e.g. nvmlDeviceGetBrand=999, nvmlDeviceGetMemoryInfo@GPU-1=3)
 *
 * Health (events a test injects): HOOKCORE_STUB_NVML_EVENTS names a file the test appends lines
 * to; every call reads the lines added since the last call, in order:
 *   xid <uuid> <code> [<recovery action>]  an XID critical error event (action default 0 = none)
 *   lost <uuid>                             the GPU falls off the bus: XID 79 event, then every
 *                                           query of that GPU returns NVML_ERROR_GPU_IS_LOST
 *   action <uuid> <n>                       NVML_FI_DEV_GET_GPU_RECOVERY_ACTION becomes n
 *   reset <uuid>                            the GPU was reset: answers again, recovery action 0
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "stub_devices.h"
#include "nvml_stub_mig.h"

#define STUB_API      __attribute__((visibility("default")))
#define STUB_MAX_SETS 16
#define STUB_QUEUE    256

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef union {
    double d;
    unsigned int ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    int si;
    unsigned short us;
} nvmlValue_t;
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_UNKNOWN = 999,
};
#define EV_XID             0x8ULL
#define FI_RECOVERY_ACTION 230u
#define VALUE_TYPE_UINT    1

struct nvmlDevice_st {
    char uuid[96], name[96], serial[32], pci[16];
    unsigned long long total;
    unsigned index, minor, arch, brand, domain, bus, dev, fn, pci_id;
    int cc_major, cc_minor;
    int mig; /* -1 unsupported, 0 off, 1 on */
    int lost;
    unsigned recovery;
    unsigned sms; /* the description's `sms` */
};

struct nvmlEventSet_st {
    int used;
    unsigned long long mask[STUB_MAX_DEVICES];
    nvmlEventData_t queue[STUB_QUEUE];
    unsigned head, tail;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init;
static unsigned g_count;
static struct nvmlDevice_st g_dev[STUB_MAX_DEVICES];
static struct nvmlEventSet_st g_sets[STUB_MAX_SETS];
static long g_events_off;
static char g_events_path[4096]; /* the events file g_events_off is an offset into */

/* ---------------------------------------------------------------------------------------------
 * Devices: the shared HOOKCORE_STUB_DEVICES parser (stub_devices.c), plus the NVML keys
 * ------------------------------------------------------------------------------------------- */
static unsigned long long parse_size(const char *s, unsigned long long dflt) {
    unsigned long long v = 0;
    char why[200];
    return s && *s && stub_quantity(s, &v, why, sizeof why) == 0 ? v : dflt;
}

static void set_str(char *dst, size_t n, const char *val) { /* truncates, like NVML's buffers */
    size_t len = strnlen(val, n - 1);
    memcpy(dst, val, len);
    dst[len] = 0;
}

static void set_pci(struct nvmlDevice_st *d, const char *v) {
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(v, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) == 4) {
        d->domain = dom;
        d->bus = bus;
        d->dev = dev;
        d->fn = fn;
    }
}

static void device_from(struct nvmlDevice_st *d, unsigned i, const stub_device_desc *desc) {
    memset(d, 0, sizeof *d);
    set_str(d->uuid, sizeof d->uuid, desc->uuid);
    set_str(d->name, sizeof d->name, desc->name);
    d->total = desc->memory;
    d->sms = desc->sms;
    d->index = d->minor = i;
    d->bus = 0x10 + i;
    d->arch = 9;   /* Hopper */
    d->brand = 14; /* NVML_BRAND_NVIDIA */
    d->cc_major = 9;
    d->pci_id = 0x233510deu;
    d->mig = -1;
    snprintf(d->serial, sizeof d->serial, "STUB%08u", i);
    const char *v;
    if ((v = stub_device_get(desc, "index"))) d->index = (unsigned)strtoul(v, NULL, 10);
    if ((v = stub_device_get(desc, "minor"))) d->minor = (unsigned)strtoul(v, NULL, 10);
    if ((v = stub_device_get(desc, "pci"))) set_pci(d, v);
    if ((v = stub_device_get(desc, "pciid"))) d->pci_id = (unsigned)strtoul(v, NULL, 0);
    if ((v = stub_device_get(desc, "arch"))) d->arch = (unsigned)strtoul(v, NULL, 10);
    if ((v = stub_device_get(desc, "brand"))) d->brand = (unsigned)strtoul(v, NULL, 10);
    if ((v = stub_device_get(desc, "serial"))) set_str(d->serial, sizeof d->serial, v);
    if ((v = stub_device_get(desc, "cc"))) sscanf(v, "%d.%d", &d->cc_major, &d->cc_minor);
    if ((v = stub_device_get(desc, "mig"))) d->mig = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -1;
}

static void load_devices(void) {
    stub_device_desc descs[STUB_MAX_DEVICES];
    int n = stub_devices_from_env(descs, STUB_MAX_DEVICES);
    g_count = n > 0 ? (unsigned)n : 0;
    for (unsigned i = 0; i < g_count; i++) device_from(&g_dev[i], i, &descs[i]);
}

/* HOOKCORE_STUB_NVML_FAIL: the return code a call is told to give (for this device), or 0. */
static nvmlReturn_t injected(const char *call, const struct nvmlDevice_st *d) {
    const char *spec = getenv("HOOKCORE_STUB_NVML_FAIL");
    if (!spec || !*spec) return NVML_SUCCESS;
    size_t clen = strlen(call);
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > clen && !strncmp(p, call, clen) && (p[clen] == '=' || p[clen] == '@')) {
            const char *eq = memchr(p, '=', len);
            int match = 1;
            if (p[clen] == '@') {
                size_t ulen = eq ? (size_t)(eq - p - clen - 1) : 0;
                match = d && ulen == strlen(d->uuid) && !strncmp(p + clen + 1, d->uuid, ulen);
            }
            if (match && eq) return (nvmlReturn_t)strtol(eq + 1, NULL, 10);
        }
        if (!end) break;
        p = end + 1;
    }
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * Injected health events
 * ------------------------------------------------------------------------------------------- */
static struct nvmlDevice_st *by_uuid(const char *uuid) {
    for (unsigned i = 0; i < g_count; i++)
        if (!strcmp(g_dev[i].uuid, uuid)) return &g_dev[i];
    return NULL;
}

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
    struct nvmlDevice_st *d = by_uuid(uuid);
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
static void sync_events(void) {
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

/* ---------------------------------------------------------------------------------------------
 * Common checks
 * ------------------------------------------------------------------------------------------- */
static int valid(nvmlDevice_t d) { return d >= g_dev && d < g_dev + g_count; }

/* Before a query of device `d`: initialised, valid handle, not lost, no injected failure. */
static nvmlReturn_t enter(const char *call, nvmlDevice_t d) {
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = NVML_SUCCESS;
    if (!g_init)
        r = NVML_ERROR_UNINITIALIZED;
    else if (d && !valid(d))
        r = NVML_ERROR_INVALID_ARGUMENT;
    else {
        sync_events();
        if (d && d->lost)
            r = NVML_ERROR_GPU_IS_LOST;
        else
            r = injected(call, d);
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}
#define ENTER(dev)                                \
    do {                                          \
        nvmlReturn_t r_ = enter(__func__, (dev)); \
        if (r_ != NVML_SUCCESS) return r_;        \
    } while (0)
#define ENTER_SYS() ENTER(NULL)

/* For the stub's other files (nvml_stub_procs.c, nvml_stub_mig.c): `enter`, and the device's NVML
   index when `index` is not NULL. */
nvmlReturn_t stub_nvml_enter(const char *call, nvmlDevice_t d, unsigned *index) {
    nvmlReturn_t r = enter(call, d);
    if (r == NVML_SUCCESS && d && index) *index = d->index;
    return r;
}

/* ---------------------------------------------------------------------------------------------
 * Init, errors, system
 * ------------------------------------------------------------------------------------------- */
STUB_API nvmlReturn_t nvmlInit_v2(void) {
    pthread_mutex_lock(&g_lock);
    if (!g_init) {
        load_devices();
        struct stat st;
        const char *path = getenv("HOOKCORE_STUB_NVML_EVENTS");
        g_events_off = (path && *path && stat(path, &st) == 0) ? (long)st.st_size : 0; /* only what comes after init */
        snprintf(g_events_path, sizeof g_events_path, "%s", path ? path : "");
    }
    g_init++;
    nvmlReturn_t r = injected("nvmlInit", NULL);
    if (r != NVML_SUCCESS) g_init--;
    pthread_mutex_unlock(&g_lock);
    return r;
}
STUB_API nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
STUB_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}
STUB_API nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = g_init ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (g_init) g_init--;
    pthread_mutex_unlock(&g_lock);
    return r;
}

STUB_API const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_NOT_FOUND: return "Not Found";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_TIMEOUT: return "Timeout";
        case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
        case NVML_ERROR_MEMORY: return "Insufficient Memory";
        case 19: return "In use by another client"; /* NVML_ERROR_IN_USE (MIG) */
        case 23: return "Insufficient resources";   /* NVML_ERROR_INSUFFICIENT_RESOURCES (MIG) */
        default: return "Unknown Error";
    }
}

static nvmlReturn_t put_string(char *dst, unsigned int len, const char *s) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    ENTER_SYS();
    const char *s = getenv("HOOKCORE_STUB_NVML_DRIVER");
    return put_string(v, len, s && *s ? s : "580.95.05");
}

STUB_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) {
    ENTER_SYS();
    const char *s = getenv("HOOKCORE_STUB_NVML_DRIVER");
    char buf[96];
    snprintf(buf, sizeof buf, "13.%s", s && *s ? s : "580.95.05");
    return put_string(v, len, buf);
}

STUB_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    ENTER_SYS();
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    const char *s = getenv("HOOKCORE_STUB_NVML_CUDA");
    *v = s && *s ? atoi(s) : 13000;
    return NVML_SUCCESS;
}
STUB_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return nvmlSystemGetCudaDriverVersion_v2(v); }

/* ---------------------------------------------------------------------------------------------
 * Enumeration
 * ------------------------------------------------------------------------------------------- */
STUB_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER_SYS();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = g_count;
    return NVML_SUCCESS;
}
STUB_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

/* Handles stay obtainable for a lost GPU (as handles obtained before the loss stay valid);
   its queries fail with NVML_ERROR_GPU_IS_LOST. */
STUB_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *dev) {
    ENTER_SYS();
    if (!dev) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned k = 0; k < g_count; k++)
        if (g_dev[k].index == i) {
            *dev = &g_dev[k];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_INVALID_ARGUMENT;
}
STUB_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *dev) {
    return nvmlDeviceGetHandleByIndex_v2(i, dev);
}

STUB_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) {
    ENTER_SYS();
    if (!uuid || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlDevice_st *d = by_uuid(uuid);
    if (!d) return NVML_ERROR_NOT_FOUND;
    *dev = d;
    return NVML_SUCCESS;
}

static void bus_id(const struct nvmlDevice_st *d, char *out, size_t n, int domain_digits) {
    snprintf(out, n, "%0*X:%02X:%02X.%X", domain_digits, d->domain, d->bus, d->dev, d->fn);
}

STUB_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pci, nvmlDevice_t *dev) {
    ENTER_SYS();
    if (!pci || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned dom, bus, dv, fn;
    if (sscanf(pci, "%x:%x:%x.%x", &dom, &bus, &dv, &fn) != 4) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned k = 0; k < g_count; k++) {
        struct nvmlDevice_st *d = &g_dev[k];
        if (d->domain == dom && d->bus == bus && d->dev == dv && d->fn == fn) {
            *dev = d;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ---------------------------------------------------------------------------------------------
 * Device queries
 * ------------------------------------------------------------------------------------------- */
STUB_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) {
    int mig_r;
    if (stub_mig_device_uuid(d, uuid, len, &mig_r)) return mig_r; /* a MIG device (nvml_stub_mig.c) */
    ENTER(d);
    return put_string(uuid, len, d->uuid);
}

STUB_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    ENTER(d);
    return put_string(name, len, d->name);
}

STUB_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int len) {
    ENTER(d);
    return put_string(serial, len, d->serial);
}

STUB_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    ENTER(d);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = d->index;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    ENTER(d);
    if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = d->minor;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, int *brand) {
    ENTER(d);
    if (!brand) return NVML_ERROR_INVALID_ARGUMENT;
    *brand = (int)d->brand;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch) {
    ENTER(d);
    if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
    *arch = d->arch;
    return NVML_SUCCESS;
}

/* The GPU's FP32 cores: its `sms` times the cores per SM of its compute capability (64 before 8.6
   but 6.1/6.2, 128 from 8.6 on), as the driver answers (an H200: 16896 = 132 x 128). */
STUB_API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t d, unsigned int *cores) {
    ENTER(d);
    if (!cores) return NVML_ERROR_INVALID_ARGUMENT;
    int cc = d->cc_major * 10 + d->cc_minor;
    unsigned per_sm = (cc >= 86 || cc == 61 || cc == 62) ? 128 : 64;
    *cores = d->sms * per_sm;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    ENTER(d);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = d->cc_major;
    *minor = d->cc_minor;
    return NVML_SUCCESS;
}

static void fill_pci(const struct nvmlDevice_st *d, nvmlPciInfo_t *p) {
    memset(p, 0, sizeof *p);
    bus_id(d, p->busIdLegacy, sizeof p->busIdLegacy, 4);
    bus_id(d, p->busId, sizeof p->busId, 8); /* NVML's form: 8-digit domain, upper-case hex */
    p->domain = d->domain;
    p->bus = d->bus;
    p->device = d->dev;
    p->pciDeviceId = d->pci_id;
}

STUB_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    ENTER(d);
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(d, p);
    return NVML_SUCCESS;
}
STUB_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) {
    return nvmlDeviceGetPciInfo_v3(d, p);
}
STUB_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }

static unsigned long long stub_used(const struct nvmlDevice_st *d) {
    unsigned long long u = parse_size(getenv("STUB_NVML_USED"), 0);
    return u > d->total ? d->total : u;
}

STUB_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    ENTER(d);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = d->total;
    m->used = stub_used(d);
    m->free = d->total - m->used;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    ENTER(d);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = d->total;
    m->reserved = 0;
    m->used = stub_used(d);
    m->free = d->total - m->used;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    ENTER(d);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig < 0) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned)d->mig;
    return NVML_SUCCESS;
}

/* Only NVML_FI_DEV_GET_GPU_RECOVERY_ACTION is known; other fields answer NOT_SUPPORTED per field. */
STUB_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values) {
    ENTER(d);
    if (count < 0 || (count && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)time(NULL) * 1000000LL;
        v->latencyUsec = 0;
        if (v->fieldId == FI_RECOVERY_ACTION) {
            v->valueType = VALUE_TYPE_UINT;
            v->value.ull = 0;
            v->value.ui = d->recovery;
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
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
        sync_events();
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

/* ---------------------------------------------------------------------------------------------
 * For nvml_stub_mig.c (hidden; see nvml_stub_mig.h)
 * ------------------------------------------------------------------------------------------- */

static void view(const struct nvmlDevice_st *d, stub_gpu_view *out) {
    out->position = (unsigned)(d - g_dev);
    out->uuid = d->uuid;
    out->total = d->total;
    out->mig = d->mig;
}

int stub_nvml_gpu_at(unsigned position, stub_gpu_view *out, struct nvmlDevice_st **handle) {
    if (position >= g_count) return -1;
    view(&g_dev[position], out);
    *handle = &g_dev[position];
    return 0;
}

int stub_nvml_gpu_attributes(const char *call, nvmlDevice_t d, unsigned *sms, unsigned long long *mib) {
    nvmlReturn_t r = enter(call, d);
    if (r != NVML_SUCCESS) return r;
    *sms = d->sms;
    *mib = d->total >> 20;
    return NVML_SUCCESS;
}

int stub_nvml_gpu_of(const struct nvmlDevice_st *d, stub_gpu_view *out) {
    if (!valid((nvmlDevice_t)d)) return -1;
    view(d, out);
    return 0;
}
