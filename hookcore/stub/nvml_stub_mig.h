/* nvml_stub_mig.h - what the MIG files (nvml_stub_mig.c, nvml_stub_mig_ci.c) and nvml_stub.c (the
 * GPUs) ask of each other.
 *
 * Hidden symbols: the files are linked into the one stub libnvidia-ml.so.1 and nothing here is
 * exported. nvml_stub.c owns the physical GPUs; the MIG files own GPU instances, compute
 * instances and MIG device handles, whose state lives in the file HOOKCORE_STUB_NVML_MIG names
 * (nvml_stub_mig_state.h).
 */
#ifndef HOOKCORE_NVML_STUB_MIG_H
#define HOOKCORE_NVML_STUB_MIG_H

#pragma GCC visibility push(hidden)

struct nvmlDevice_st;

typedef struct {
    unsigned position; /* 0..count-1 */
    const char *uuid;
    unsigned long long total; /* framebuffer bytes */
    int mig;                  /* -1 unsupported, 0 off, 1 on */
} stub_gpu_view;

/* nvml_stub.c: the checks every call makes (initialised, valid handle, not lost, injected
   failures); d NULL for a call on no GPU; the device's NVML index into *index when index is not
   NULL. Returns an NVML return code. */
int stub_nvml_enter(const char *call, struct nvmlDevice_st *d, unsigned *index);
/* nvml_stub.c: the GPU at `position` (0 and its handle, or -1 past the end). */
int stub_nvml_gpu_at(unsigned position, stub_gpu_view *out, struct nvmlDevice_st **handle);
/* nvml_stub.c: the GPU behind a handle (0), or -1 when it is not a GPU handle. */
int stub_nvml_gpu_of(const struct nvmlDevice_st *d, stub_gpu_view *out);

/* nvml_stub.c: nvmlDeviceGetAttributes(_v2) of a GPU handle (`call` for the checks): its SM count
   (the description's `sms`, libcuda's source too) and framebuffer MiB. An NVML return code. */
int stub_nvml_gpu_attributes(const char *call, struct nvmlDevice_st *d, unsigned *sms, unsigned long long *mib);

/* nvml_stub_mig_ci.c: when `d` is a MIG device handle, answer nvmlDeviceGetUUID for it (return 1,
   *ret the NVML return code); 0 when it is not one. */
int stub_mig_device_uuid(const void *d, char *uuid, unsigned len, int *ret);
/* nvml_stub_mig_ci.c: when `d` is a MIG device handle (return 1), its GPU's handle and its GPU and
   compute instance IDs; *ret NOT_FOUND once its instance is destroyed, else SUCCESS (the caller
   makes the GPU's checks). 0 when it is not one (nvml_stub_procs.c: a process query's scope). */
int stub_mig_device_of(const void *d, struct nvmlDevice_st **gpu, unsigned *gi, unsigned *ci, int *ret);

#pragma GCC visibility pop

#endif
