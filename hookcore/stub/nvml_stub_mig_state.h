/* nvml_stub_mig_state.h - the MIG fake's state and its helpers: nvml_stub_mig.c (GPU instances, the
 * state file) owns them, nvml_stub_mig_ci.c (compute instances, MIG device handles) uses them too.
 * Hidden, as everything of the stub but its NVML API.
 */
#ifndef HOOKCORE_NVML_STUB_MIG_STATE_H
#define HOOKCORE_NVML_STUB_MIG_STATE_H

#include "nvml_stub_mig.h"
#include "stub_devices.h"

#define STUB_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
    R_SUCCESS = 0,
    R_UNINITIALIZED = 1,
    R_INVALID_ARGUMENT = 2,
    R_NOT_SUPPORTED = 3,
    R_NOT_FOUND = 6,
    R_INSUFFICIENT_SIZE = 7,
    R_IN_USE = 19,
    R_INSUFFICIENT_RESOURCES = 23,
    R_UNKNOWN = 999,
};

#define MAX_GI     16 /* GPU instance IDs 1..15 */
#define MAX_CI     8  /* compute instance IDs 0..7 */
#define MEM_SLICES 8
#define NAME_LEN   96

typedef struct {
    unsigned start, size;
} placement_t;
typedef struct {
    unsigned id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} ci_profile_v1_t;
typedef struct {
    unsigned version, id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[NAME_LEN];
} ci_profile_v2_t;
typedef struct {
    unsigned multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount,
        sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} attributes_t;

/* One GPU instance profile: NVML_GPU_INSTANCE_PROFILE_* index, ID, shape, H200 name. */
typedef struct {
    unsigned index, id, compute, memory, count, sms, decoders, ofa;
    unsigned starts[8], nstarts;
    const char *h200;
} profile_t;

/* Handles: one per possible (GPU, GI id) and (GPU, GI id, CI id); MIG device = compute instance. */
struct nvmlGpuInstance_st {
    unsigned gpu, id;
};
struct nvmlComputeInstance_st {
    unsigned gpu, gi, id;
};
struct stub_mig_device {
    unsigned gpu, gi, ci;
};

typedef struct {
    int used;
    unsigned profile_id, start, size, seq;
} gi_state;
typedef struct {
    int used;
    unsigned profile_index;
} ci_state;

typedef struct {
    nvmlDevice_t device;
    unsigned id, profileId;
    placement_t placement;
} gi_info_t;
typedef struct {
    nvmlDevice_t device;
    struct nvmlGpuInstance_st *gpuInstance;
    unsigned id, profileId;
    placement_t placement;
} ci_info_t;

#pragma GCC visibility push(hidden)

/* The state (replayed from HOOKCORE_STUB_NVML_MIG between mig_begin and mig_end) and the handles. */
extern gi_state m_gi[STUB_MAX_DEVICES][MAX_GI];
extern ci_state m_ci[STUB_MAX_DEVICES][MAX_GI][MAX_CI];
extern struct stub_mig_device h_mig[STUB_MAX_DEVICES][MAX_GI][MAX_CI];

/* Profiles */
const profile_t *profile_by_id(unsigned id);
unsigned long long profile_mib(const profile_t *p, const stub_gpu_view *g);

/* Lock the file and load its state (mig_begin pairs with mig_end); record a change (lock held). */
void mig_begin(void);
void mig_end(void);
void mig_record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Checks and handles */
int mig_gpu(const char *call, nvmlDevice_t d, stub_gpu_view *g);
int valid_gi(const struct nvmlGpuInstance_st *gi);
int valid_ci(const struct nvmlComputeInstance_st *ci);
int is_mig_handle(const void *d);
int valid_mig(const struct stub_mig_device *m);
struct nvmlGpuInstance_st *gi_handle(unsigned gpu, unsigned id);
struct nvmlComputeInstance_st *ci_handle(unsigned gpu, unsigned gi, unsigned id);

#pragma GCC visibility pop

#endif /* HOOKCORE_NVML_STUB_MIG_STATE_H */
