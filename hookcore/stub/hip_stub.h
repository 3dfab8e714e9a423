/* hip_stub.h - what the files of the stub HIP runtime (libamdhip64.so) share; hip_stub.c has the
 * overview. hip_stub.c: the devices HIP_VISIBLE_DEVICES leaves, the clock, the device calls;
 * hip_stub_memory.c: allocations and virtual memory; hip_stub_engine.c: streams, events, graphs,
 * launches, copies.
 */
#ifndef HOOKCORE_HIP_STUB_H
#define HOOKCORE_HIP_STUB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "../core/atomic.h"

#include "hip_devices.h"

#define HIP_API    __attribute__((visibility("default")))
#define HIP_HIDDEN __attribute__((visibility("hidden")))

typedef int hipError_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;

enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidResourceHandle = 400,
    hipErrorNotReady = 600,
    hipErrorContextIsDestroyed = 709,
    hipErrorStreamCaptureUnsupported = 900,
    hipErrorStreamCaptureUnmatched = 903,
};

typedef struct dim3 {
    uint32_t x, y, z;
} dim3;
typedef struct hipExtent {
    size_t width, height, depth;
} hipExtent;
typedef struct hipPitchedPtr {
    void *ptr;
    size_t pitch, xsize, ysize;
} hipPitchedPtr;
typedef struct hipChannelFormatDesc {
    int x, y, z, w, f;
} hipChannelFormatDesc;
typedef struct hipMemAllocationProp {
    int type, requestedHandleType;
    struct {
        int type, id;
    } location;
    void *win32HandleMetaData;
    unsigned char allocFlags[4];
} hipMemAllocationProp;

/* hipMemcpy3DParms, as AMD's HIP lays it out (a position is three size_t). */
typedef struct hs_memcpy3d {
    void *src_array;
    size_t src_pos[3];
    hipPitchedPtr src;
    void *dst_array;
    size_t dst_pos[3];
    hipPitchedPtr dst;
    hipExtent extent;
    int kind;
} hs_memcpy3d;

/* hipLaunchConfig_t (hipLaunchKernelExC) and HIP_LAUNCH_CONFIG (hipDrvLaunchKernelEx). */
typedef struct hs_launch_config {
    dim3 grid, block;
    size_t shmem;
    hipStream_t stream;
    void *attrs;
    unsigned int nattrs;
} hs_launch_config;
typedef struct hs_drv_launch_config {
    unsigned int gx, gy, gz, bx, by, bz, shmem;
    hipStream_t stream;
    void *attrs;
    unsigned int nattrs;
} hs_drv_launch_config;

#define PITCH_ALIGN 256

typedef struct hip_stream {
    int dev;
    int64_t last_end_ns;
    int capturing;
    int64_t captured_ns;
    unsigned gen; /* a created stream: its device's generation when it was made */
} hip_stream;

typedef struct hip_event {
    int64_t t_ns;
    int dev;
    unsigned gen; /* its device's generation when it was made */
} hip_event;

typedef struct hip_engine {
    int64_t busy_until_ns;
    uint64_t used;
    uint64_t resettable; /* of `used`: pointers and arrays of this generation (a reset frees them) */
    hip_stream null_stream;
    _Atomic unsigned gen; /* hipDeviceReset: streams and events of an older generation are gone */
} hip_engine;

/* hip_stub.c: the descriptions, the visible devices (ordinal -> description index), and under
   g_lock (one lock: a stub, not a hot path) each device's engine and the counts of launches and
   copies. t_dev: the thread's device (HIP: device 0 until hipSetDevice). */
extern hd_device g_desc[HD_MAX_DEVICES] HIP_HIDDEN;
extern int g_map[HD_MAX_DEVICES] HIP_HIDDEN;
extern int g_ndev HIP_HIDDEN;
extern pthread_mutex_t g_lock HIP_HIDDEN;
extern hip_engine g_dev[HD_MAX_DEVICES] HIP_HIDDEN;
extern uint64_t g_launches HIP_HIDDEN, g_copies HIP_HIDDEN;
extern __thread int t_dev HIP_HIDDEN;

/* hipGetProcAddress's table: each file names some of the functions it defines (hs_syms_<file>,
   ended by a NULL name) through hidden aliases, so the runtime hands out its own code, not what the
   dynamic linker binds the name to (a preloaded hook): a runtime that finds its entry points without
   dlsym, the case a hook must catch at hipGetProcAddress itself. */
typedef struct {
    const char *name;
    void *fn;
} hs_sym;
#define HS_ALIAS(n) extern __typeof__(n) hs_local_##n __attribute__((alias(#n), visibility("hidden")));
#define HS_SYM(n)   {#n, (void *)&hs_local_##n},
extern const hs_sym hs_syms_memory[] HIP_HIDDEN;
extern const hs_sym hs_syms_engine[] HIP_HIDDEN;

/* The devices read once (HOOKCORE_STUB_HIP_DEVICES, HIP_VISIBLE_DEVICES). */
void hs_ready(void) HIP_HIDDEN;
/* The thread's device, -1 when there is none. */
int hs_current(void) HIP_HIDDEN;
int64_t hs_now_ns(void) HIP_HIDDEN;
/* Wait for the clock to reach t. */
void hs_sleep_until(int64_t t) HIP_HIDDEN;

#endif
