/* nvml.h - internal interface of the NVML shim (part of libvgpu.so). */
#ifndef HOOKCORE_NVML_SHIM_H
#define HOOKCORE_NVML_SHIM_H

#include "../core/hookcore.h"
#include "../preload/preload.h"
#include "nvml_abi.h"

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m);

typedef struct hk_nvml_table {
#include "preload/shim_real.h"
} hk_nvml_table;

extern hk_nvml_table hk_nvml HK_HIDDEN;
extern const hk_shim hk_shim_nvml HK_HIDDEN;

/* Strict cap: SM clock now / at full load of ledger device `ldev`, x1000 (0 = unknown). clock.c */
uint32_t hk_nvml_clock_ratio_milli(int ldev) HK_HIDDEN;

/* 1 if at most one process (this one) ran kernels on ledger device `ldev` in the last second and no
   MPS client is there, 0 if more, -1 unknown (no NVML, no UUID, an error). Sampled every 100 ms. peers.c */
int hk_nvml_device_alone(int ldev) HK_HIDDEN;

/* NVML initialised (once); 0 when it cannot be. clock.c */
int hk_nvml_ready(void) HK_HIDDEN;

#endif
