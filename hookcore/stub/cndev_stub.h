/* cndev_stub.h - what the two halves of the stub CNDev library share (cndev_stub.c: discovery
 * and health; cndev_stub_smlu.c: sMLU profiles and instances): the API's types, as the public CNDev
 * header lays them out, and the parsed MLUs. Private to the stub.
 */
#ifndef HOOKCORE_CNDEV_STUB_H
#define HOOKCORE_CNDEV_STUB_H

#include <stdint.h>

#include "cambricon_devices.h"

#define CNDEV_API __attribute__((visibility("default")))

typedef int cndevRet_t;
typedef int32_t cndevDevice_t;
typedef int32_t cndevMluInstance_t;
enum {
    CNDEV_SUCCESS = 0,
    CNDEV_ERROR_UNSUPPORTED_API_VERSION = 3,
    CNDEV_ERROR_UNINITIALIZED = 4,
    CNDEV_ERROR_INVALID_ARGUMENT = 5,
    CNDEV_ERROR_INVALID_DEVICE_ID = 6,
    CNDEV_ERROR_UNKNOWN = 7,
    CNDEV_ERROR_INSUFFICIENT_SPACE = 9,
    CNDEV_ERROR_NOT_SUPPORTED = 10,
    CNDEV_ERROR_NO_DEVICES = 12,
    CNDEV_ERROR_NOT_FOUND = 14,
    CNDEV_ERROR_IN_USE = 15,
    CNDEV_ERROR_DUPLICATE = 16,
};
#define VERSION_MAX 6
#define UUID_SIZE   37
#define HANDLE_BASE 0x100

typedef struct {
    int32_t version;
    uint32_t number;
} cndevCardInfo_t;
typedef struct {
    int32_t version;
    uint8_t uuid[UUID_SIZE];
    unsigned long ncsUUID64;
} cndevUUID_t;
typedef struct {
    long physicalMemoryTotal, physicalMemoryUsed, reservedMemory, virtualMemoryTotal, virtualMemoryUsed; /* MB */
    unsigned long globalMemory;
    unsigned long reserved[16];
} cndevMemoryInfoV2_t;
typedef struct {
    int32_t version;
    int32_t count;
} cndevCardCoreCount_t;
typedef struct {
    int32_t version;
    int id;
} cndevCardName_t;
typedef struct {
    int32_t version;
    unsigned long sn, motherBoardSn;
} cndevCardSN_t;
typedef struct {
    uint32_t subsystemId, deviceId;
    uint16_t vendor, subsystemVendor;
    uint32_t domain, bus, device, function;
    uint16_t moduleId, slotId;
    uint32_t reserved[8];
} cndevPCIeInfoV2_t;
typedef struct {
    int32_t version;
    uint32_t mcuMajorVersion, mcuMinorVersion, mcuBuildVersion;
    uint32_t driverMajorVersion, driverMinorVersion, driverBuildVersion;
} cndevVersionInfo_t;
typedef struct {
    int32_t version;
    int32_t health;
    int deviceState; /* 0 in problem, 1 good */
    int driverState; /* 4 running */
} cndevCardHealthState_t;
typedef struct {
    int32_t version;
    int smluMode; /* 0 disabled, 1 enabled */
} cndevSMLUMode_t;
typedef struct {
    int32_t version;
    uint32_t mluQuota;
    unsigned long memorySize;
} cndevSMluSet_t;
typedef struct {
    int32_t version, profileId, instanceId;
    uint8_t uuid[UUID_SIZE];
    int32_t domain, bus, device, function;
    char profileName[CMB_NAME_MAX], instanceName[CMB_NAME_MAX], devNodeName[CMB_NAME_MAX];
    uint32_t mluQuota[2];
    unsigned long memorySize[2];
    uint32_t reserved[128];
} cndevSMluInfo_t;
typedef struct {
    int32_t version, count;
    int32_t profileId[128];
} cndevSMluProfileIdInfo_t;
typedef struct {
    int32_t version, profileId;
    char name[CMB_NAME_MAX];
    uint32_t totalCapacity, remainCapacity;
    uint32_t mluQuota[2];
    unsigned long memorySize[2];
} cndevSMluProfileInfo_t;

#pragma GCC visibility push(hidden)
extern cmb_device g_dev[CMB_MAX_DEVICES];
extern int g_n, g_inited;

/* The prologue of a per-MLU call: initialised, a known handle, a struct of a known version (when
   it has one), no injected failure. CNDEV_SUCCESS and the index in *d, or the code to return. */
cndevRet_t cndev_stub_check(const char *call, cndevDevice_t handle, const void *out, const int32_t *version, int *d);
#pragma GCC visibility pop

#endif
