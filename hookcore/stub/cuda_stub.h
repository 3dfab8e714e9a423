/* cuda_stub.h - what the files of the stub libcuda.so.1 share (cuda_stub.c has the overview):
 *   cuda_stub.c              state, allocation bookkeeping, devices, contexts, the helpers below;
 *   cuda_stub_memory.c       allocations, VMM, pools, arrays;
 *   cuda_stub_engine.c       streams, events, the simulated engine, launches, copies;
 *   cuda_engine.c            the engine shared by processes (HOOKCORE_STUB_ENGINE_FILE, cuda_engine.h);
 *   cuda_stub_procaddress.c  cuGetProcAddress.
 * Only the driver API is exported (STUB_API); everything declared here is hidden.
 */
#ifndef HOOKCORE_CUDA_STUB_H
#define HOOKCORE_CUDA_STUB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/atomic.h"
#include "../cuda/cuda_abi.h"
#include "../cuda/copy.h"
#include "cuda_engine.h"
#include "stub_devices.h"

#define STUB_API    __attribute__((visibility("default")))
#define STUB_HIDDEN __attribute__((visibility("hidden")))

typedef struct stub_device {
    int physical;          /* index before CUDA_VISIBLE_DEVICES */
    stub_device_desc desc; /* uuid, name, memory */
    size_t total;
    _Atomic size_t used;
    _Atomic int64_t busy_until_ns; /* simulated engine: end of the last queued work */
    int ctx_tag;                   /* primary context is &devices[i] */
    unsigned sms;                  /* the device's SMs (key `sms`, default 132) */
    unsigned primary_sms;          /* SMs of the primary context; 0 = not made yet (reads the env then) */
    unsigned primary_serial;       /* the primary context's instance (a reset or release makes a new one) */
} stub_device;

typedef struct stub_event {
    int64_t t_ns; /* completion time on the simulated clock; -1 = never recorded */
    /* shared engine (cuda_engine.h): the op it waits for on its stream, and when it was recorded */
    int se, dev;
    uint64_t key, op;
    int64_t rec_ns;
    CUcontext ctx;   /* the context current when it was made (NULL: none) ... */
    unsigned serial; /* ... and its instance: once that context is gone the event is dead too */
} stub_event;

typedef struct stub_stream {
    int dev;
    int64_t last_end_ns;
    CUcontext ctx; /* the context it was created in (NULL: a default stream, the current one's) */
    int destroyed; /* cuStreamDestroy'd: kept (no reuse), and an event recorded on it is refused */
} stub_stream;

/* A context made by cuCtxCreate: its own handle, on a device. */
#define STUB_CTX_MAGIC 0x43545831
typedef struct stub_ctx {
    int magic;
    int dev;
    unsigned sms;          /* the SMs it may use */
    unsigned serial;       /* this instance of the handle (a destroyed context's handle comes back) */
    struct stub_ctx *next; /* destroyed: the next handle on the free list */
} stub_ctx;

/* cuda_stub.c: the devices CUDA_VISIBLE_DEVICES leaves (g_ndev is -1 until cuInit), under g_lock */
extern int g_ndev STUB_HIDDEN;
extern stub_device g_dev[STUB_MAX_DEVICES] STUB_HIDDEN;
extern pthread_mutex_t g_lock STUB_HIDDEN;
extern stub_stream g_default_stream[STUB_MAX_DEVICES] STUB_HIDDEN;
extern unsigned long long g_next_handle STUB_HIDDEN; /* the next VMM or array handle */

int64_t stub_now_ns(void) STUB_HIDDEN;
void stub_sleep_until(int64_t t_ns) STUB_HIDDEN;
/* Take `size` bytes (rounded up to 512) on device `dev`: a fake address, or a handle when
   `is_handle`, into *key_out; CUDA_ERROR_OUT_OF_MEMORY when the device is full. */
CUresult stub_take(int dev, size_t size, unsigned long long *key_out, int is_handle) STUB_HIDDEN;
/* The same for a device pointer or array that dies with the calling thread's current context
   (cuMemAlloc, pitch, managed; arrays): a destroyed context, or a primary context released or
   reset, gives it back. */
CUresult stub_take_in_context(int dev, size_t size, unsigned long long *key_out, int is_handle) STUB_HIDDEN;
/* Context `ctx` went: give back the device pointers and arrays taken in it. */
void stub_context_memory_gone(CUcontext ctx) STUB_HIDDEN;
/* Give back what `key` took (CUDA_ERROR_INVALID_VALUE when it took nothing). */
CUresult stub_give(unsigned long long key) STUB_HIDDEN;
/* The current context's device (-1: none, or not initialised) and handle (NULL: none). */
int stub_cur_dev(void) STUB_HIDDEN;
CUcontext stub_cur_ctx(void) STUB_HIDDEN;
/* SMs context `c` may use. */
unsigned stub_ctx_sms(CUcontext c) STUB_HIDDEN;
/* The instance of the context behind handle `c` now (a primary context's changes at each reset or
   release; a created one's when its handle is destroyed and handed out again). */
unsigned stub_ctx_serial(CUcontext c) STUB_HIDDEN;
/* HOOKCORE_STUB_CUDA_FAIL: the CUresult `call` is told to return, or 0. */
CUresult stub_fail(const char *call) STUB_HIDDEN;

#define NEED_INIT()                                        \
    do {                                                   \
        if (g_ndev < 0) return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)
#define NEED_CTX(d)         \
    int d = stub_cur_dev(); \
    if (d < 0) return CUDA_ERROR_INVALID_CONTEXT

/* cuGetProcAddress's table (cuda_stub_procaddress.c) must hold the stub's own functions even when a
   preloaded library interposes the same names (as the shim does): taking the address of an exported
   function in a shared object goes through the GOT and would yield the interposer. Hidden aliases
   bind locally; an alias is made where its function is defined, so each file lists the functions
   it defines and makes its part of the table (stub_syms_<file>, ended by a NULL name). */
typedef struct {
    const char *name;
    void *fn;
} stub_sym;
#define STUB_ALIAS(n) extern __typeof__(n) stub_local_##n __attribute__((alias(#n), visibility("hidden")));
#define STUB_SYM(n)   {#n, (void *)&stub_local_##n},
extern const stub_sym stub_syms_devices[] STUB_HIDDEN;
extern const stub_sym stub_syms_memory[] STUB_HIDDEN;
extern const stub_sym stub_syms_engine[] STUB_HIDDEN;
extern const stub_sym stub_syms_procaddress[] STUB_HIDDEN;

#endif /* HOOKCORE_CUDA_STUB_H */
