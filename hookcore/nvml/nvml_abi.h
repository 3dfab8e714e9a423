/* nvml_abi.h - the slice of the NVML API the NVML shim uses, written from NVML's public reference
 * (no NVIDIA header needed to build). */
#ifndef HOOKCORE_NVML_ABI_H
#define HOOKCORE_NVML_ABI_H

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned int gpu, memory; /* percent of the last sample period with a kernel running / memory busy */
} nvmlUtilization_t;
typedef struct {
    unsigned int pid;                               /* in the host's PID namespace */
    unsigned long long timeStamp;                   /* CPU timestamp, us */
    unsigned int smUtil, memUtil, encUtil, decUtil; /* percent over the sample's period */
} nvmlProcessUtilizationSample_t;
typedef enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 } nvmlClockType_t;
typedef enum {
    NVML_CLOCK_ID_CURRENT = 0,
    NVML_CLOCK_ID_APP_CLOCK_TARGET = 1,
    NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 2,
    NVML_CLOCK_ID_CUSTOMER_BOOST_MAX = 3,
} nvmlClockId_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7
};

#endif
