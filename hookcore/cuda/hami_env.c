/* hami_env.c - HAMi's environment names for the neutral keys (read from the environment only;
 * the config file takes the neutral names). HAMi's device plugin writes CUDA_DEVICE_MEMORY_LIMIT_<i>
 * in MiB ("3000m"), CUDA_DEVICE_SM_LIMIT and CUDA_DEVICE_MEMORY_SHARED_CACHE. */
#include "hami_env.h"

const hk_env_alias hk_hami_env_aliases[] = {
    {"CUDA_DEVICE_MEMORY_LIMIT", "HOOKCORE_MEMORY_LIMIT"},
    {"CUDA_DEVICE_SM_LIMIT", "HOOKCORE_COMPUTE_LIMIT"},
    {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "HOOKCORE_LEDGER"},
    {NULL, NULL},
};
