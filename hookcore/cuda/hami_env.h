/* hami_env.h - HAMi's environment names, accepted by libvgpu.so as aliases of the neutral keys. */
#ifndef HOOKCORE_HAMI_ENV_H
#define HOOKCORE_HAMI_ENV_H

#include "../core/hookcore.h"

/* {"CUDA_DEVICE_MEMORY_LIMIT", "HOOKCORE_MEMORY_LIMIT"}, ... terminated by {NULL, NULL}. */
extern const hk_env_alias hk_hami_env_aliases[];

#endif
