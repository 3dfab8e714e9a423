/* table.c - the NVML shim as the preload layer sees it: libnvidia-ml.so.1 and hooks.def. */
#include "nvml.h"

hk_nvml_table hk_nvml;

#define HK_SHIM_REAL hk_nvml
#include "preload/shim_table.h"

const hk_shim hk_shim_nvml = {
    .name = "nvml",
    .library = "libnvidia-ml.so.1",
    .prefix = "nvml",
    .clock_ratio_milli = hk_nvml_clock_ratio_milli,
    .device_alone = hk_nvml_device_alone,
    HK_SHIM_FIELDS,
};
