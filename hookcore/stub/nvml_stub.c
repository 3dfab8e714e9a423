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

#include "nvml_stub.h"

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

#define FI_RECOVERY_ACTION 230u
#define VALUE_TYPE_UINT    1

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init;
unsigned g_count;
struct nvmlDevice_st g_dev[STUB_MAX_DEVICES];

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
    if ((v = stub_device_get(desc, "power"))) d->power_mw = (unsigned)strtoul(v, NULL, 10) * 1000u;
    d->power_default_mw = d->power_mw;
    if ((v = stub_device_get(desc, "powerdefault"))) d->power_default_mw = (unsigned)strtoul(v, NULL, 10) * 1000u;
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

/* The GPU whose UUID is `uuid` (exactly), or NULL. */
struct nvmlDevice_st *stub_nvml_by_uuid(const char *uuid) {
    for (unsigned i = 0; i < g_count; i++)
        if (!strcmp(g_dev[i].uuid, uuid)) return &g_dev[i];
    return NULL;
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
        stub_nvml_sync_events();
        if (d && d->lost)
            r = NVML_ERROR_GPU_IS_LOST;
        else
            r = injected(call, d);
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* For ENTER (nvml_stub.h) and the stub's other files (nvml_stub_procs.c, nvml_stub_mig.c): `enter`,
   and the device's NVML index when `index` is not NULL. */
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
        stub_nvml_events_init();
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
    struct nvmlDevice_st *d = stub_nvml_by_uuid(uuid);
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
    if (stub_mig_device_uuid(d, uuid, len, &mig_r)) return mig_r; /* a MIG device (nvml_stub_mig_ci.c) */
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

/* The power limit in force and the board's default one, in mW (keys `power` and `powerdefault`, W;
   a device described without them answers NOT_SUPPORTED, as GPUs without power management do). */
STUB_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    ENTER(d);
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->power_mw) return NVML_ERROR_NOT_SUPPORTED;
    *mw = d->power_mw;
    return NVML_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t d, unsigned int *mw) {
    ENTER(d);
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->power_default_mw) return NVML_ERROR_NOT_SUPPORTED;
    *mw = d->power_default_mw;
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
 * For the MIG files (hidden; see nvml_stub_mig.h)
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
