/* nvml_stub.h - what nvml_stub.c (the GPUs, init, queries) and nvml_stub_events.c (health events)
 * share: the NVML ABI types both use, the GPUs, and the checks every call makes. Hidden: only the
 * NVML API is exported (STUB_API). nvml_stub_mig.h is what the MIG files ask of nvml_stub.c.
 */
#ifndef HOOKCORE_NVML_STUB_H
#define HOOKCORE_NVML_STUB_H

#include <pthread.h>

#include "nvml_stub_mig.h"
#include "stub_devices.h"

#define STUB_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

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
#define EV_XID 0x8ULL

struct nvmlDevice_st {
    char uuid[96], name[96], serial[32], pci[16];
    unsigned long long total;
    unsigned index, minor, arch, brand, domain, bus, dev, fn, pci_id;
    int cc_major, cc_minor;
    int mig; /* -1 unsupported, 0 off, 1 on */
    int lost;
    unsigned recovery;
    unsigned sms;                        /* the description's `sms` */
    unsigned power_mw, power_default_mw; /* keys `power`, `powerdefault` (W); 0: NOT_SUPPORTED */
};

#pragma GCC visibility push(hidden)

/* nvml_stub.c: the GPUs (g_count of them, from HOOKCORE_STUB_DEVICES), under g_lock */
extern pthread_mutex_t g_lock;
extern unsigned g_count;
extern struct nvmlDevice_st g_dev[STUB_MAX_DEVICES];
struct nvmlDevice_st *stub_nvml_by_uuid(const char *uuid);

/* nvml_stub_events.c (lock held): at init, skip what the events file holds already; before a
   query, apply the lines appended to it since. */
void stub_nvml_events_init(void);
void stub_nvml_sync_events(void);

#pragma GCC visibility pop

#define ENTER(dev)                                                \
    do {                                                          \
        nvmlReturn_t r_ = stub_nvml_enter(__func__, (dev), NULL); \
        if (r_ != NVML_SUCCESS) return r_;                        \
    } while (0)
#define ENTER_SYS() ENTER(NULL)

#endif /* HOOKCORE_NVML_STUB_H */
