/* acl_stub.c - a stub libascendcl.so: CANN's public ACL runtime API (aclrt*, aclmdl*) on the stub
 * NPU of libruntime.so (ascend_runtime_stub.c).
 *
 * Prototypes and error codes are those of the public acl_rt.h / acl_mdl.h (written from the
 * open-source CANN runtime's headers; no Huawei code). Two layouts, chosen by
 * HOOKCORE_STUB_ACL_LAYOUT, reproduce how real CANN versions connect the two layers:
 *
 *   split (default)  CANN 8.x: libascendcl.so calls libruntime.so's rt* functions through the
 *                    PLT (aclrtMalloc -> rtMalloc, aclrtGetMemInfo -> rtMemGetInfoEx, launches ->
 *                    rtKernelLaunch, model execution -> rtModelExecute), so a preloaded rt*
 *                    interposer sees the ACL calls a second time;
 *   fused            the open-source CANN runtime: aclrt* forward to implementations inside
 *                    libruntime.so, linked -Bsymbolic, which reach the runtime without any rt*
 *                    symbol lookup -- a preloaded rt* interposer never sees an ACL call.
 *
 * Durations and devices: see ascend_runtime_stub.c (a kernel's aclrtFuncHandle, a model's ID and
 * an aclmdlRI are their duration in microseconds).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ascend_stub_engine.h"

#define ACL_API __attribute__((visibility("default")))

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtFuncHandle;
typedef void *aclmdlRI;
typedef void *aclrtDrvMemHandle;

#define ACL_SUCCESS                         0
#define ACL_ERROR_INVALID_PARAM             100000
#define ACL_EVENT_RECORDED_STATUS_NOT_READY 0
#define ACL_EVENT_RECORDED_STATUS_COMPLETE  1

/* libruntime.so's rt* functions: called through the PLT in the split layout. */
int32_t rtMalloc(void **ptr, uint64_t size, int type, const uint16_t module);
int32_t rtMallocCached(void **ptr, uint64_t size, int type, const uint16_t module);
int32_t rtsMalloc(void **ptr, uint64_t size, int policy, int advise, void *cfg);
int32_t rtFree(void *ptr);
int32_t rtFreeWithDevSync(void *ptr);
int32_t rtMallocPhysical(void **handle, size_t size, void *prop, uint64_t flags);
int32_t rtFreePhysical(void *handle);
int32_t rtMemGetInfoEx(int type, size_t *free_b, size_t *total_b);
int32_t rtKernelLaunch(const void *stub_func, uint32_t blocks, void *args, uint32_t args_size, void *sm, void *s);
int32_t rtModelExecute(void *model, void *s, uint32_t flag);

static const stub_npu_engine *E;
static int g_fused;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
    E = stubNpuEngine();
    const char *layout = getenv("HOOKCORE_STUB_ACL_LAYOUT");
    g_fused = layout && strcmp(layout, "fused") == 0;
}

static inline const stub_npu_engine *eng(void) {
    pthread_once(&g_once, load);
    return E;
}

static inline int fused(void) {
    pthread_once(&g_once, load);
    return g_fused;
}

ACL_API aclError aclInit(const char *config) {
    (void)config;
    eng();
    return ACL_SUCCESS;
}
ACL_API aclError aclFinalize(void) { return ACL_SUCCESS; }

ACL_API aclError aclrtSetDevice(int32_t dev) { return eng()->set_device(dev); }
ACL_API aclError aclrtResetDevice(int32_t dev) { return eng()->reset_device(dev); }
ACL_API aclError aclrtGetDevice(int32_t *dev) { return eng()->get_device(dev); }
ACL_API aclError aclrtGetDeviceCount(uint32_t *n) { return eng()->device_count(n); }
ACL_API aclError aclrtGetPhyDevIdByLogicDevId(const int32_t logic, int32_t *const phy) {
    uint32_t p = 0;
    if (!phy || logic < 0) return ACL_ERROR_INVALID_PARAM;
    aclError r = eng()->phy_id((uint32_t)logic, &p);
    if (r == ACL_SUCCESS) *phy = (int32_t)p;
    return r;
}

ACL_API aclError aclrtCreateStream(aclrtStream *s) { return eng()->stream_create(s); }
ACL_API aclError aclrtDestroyStream(aclrtStream s) { return eng()->stream_destroy(s); }
ACL_API aclError aclrtSynchronizeStream(aclrtStream s) { return eng()->stream_sync(s); }
ACL_API aclError aclrtSynchronizeDevice(void) { return eng()->device_sync(); }

/* --- memory ---------------------------------------------------------------------------------- */
ACL_API aclError aclrtMalloc(void **ptr, size_t size, int policy) {
    (void)policy;
    return fused() ? eng()->malloc(ptr, size, 0) : rtMalloc(ptr, size, 0, 0);
}
ACL_API aclError aclrtMallocAlign32(void **ptr, size_t size, int policy) {
    (void)policy;
    return fused() ? eng()->malloc(ptr, size, 0) : rtMalloc(ptr, size, 0, 0);
}
ACL_API aclError aclrtMallocCached(void **ptr, size_t size, int policy) {
    (void)policy;
    return fused() ? eng()->malloc(ptr, size, 0) : rtMallocCached(ptr, size, 0, 0);
}
ACL_API aclError aclrtMallocWithCfg(void **ptr, size_t size, int policy, void *cfg) {
    return fused() ? eng()->malloc(ptr, size, 0) : rtsMalloc(ptr, size, policy, 0, cfg);
}
ACL_API aclError aclrtFree(void *ptr) { return fused() ? eng()->free(ptr, 0) : rtFree(ptr); }
ACL_API aclError aclrtFreeWithDevSync(void *ptr) {
    if (fused()) {
        eng()->device_sync();
        return eng()->free(ptr, 0);
    }
    return rtFreeWithDevSync(ptr);
}
ACL_API aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size, const void *prop, uint64_t flags) {
    return fused() ? eng()->malloc(handle, size, 1) : rtMallocPhysical(handle, size, (void *)prop, flags);
}
ACL_API aclError aclrtFreePhysical(aclrtDrvMemHandle handle) {
    return fused() ? eng()->free(handle, 1) : rtFreePhysical(handle);
}
ACL_API aclError aclrtGetMemInfo(int attr, size_t *free_b, size_t *total_b) {
    return fused() ? eng()->mem_info(free_b, total_b) : rtMemGetInfoEx(attr, free_b, total_b);
}
/* Host memory (pinned): plain host memory here; never charged by the hook. */
ACL_API aclError aclrtMallocHost(void **ptr, size_t size) {
    if (!ptr || !size) return ACL_ERROR_INVALID_PARAM;
    *ptr = malloc(size);
    return *ptr ? ACL_SUCCESS : ACL_ERROR_RT_MEMORY_ALLOCATION;
}
ACL_API aclError aclrtFreeHost(void *ptr) {
    free(ptr);
    return ACL_SUCCESS;
}

/* --- events ---------------------------------------------------------------------------------- */
ACL_API aclError aclrtCreateEvent(aclrtEvent *e) { return eng()->event_create(e); }
ACL_API aclError aclrtCreateEventWithFlag(aclrtEvent *e, uint32_t flag) {
    (void)flag;
    return eng()->event_create(e);
}
ACL_API aclError aclrtCreateEventExWithFlag(aclrtEvent *e, uint32_t flag) {
    (void)flag;
    return eng()->event_create(e);
}
ACL_API aclError aclrtDestroyEvent(aclrtEvent e) { return eng()->event_destroy(e); }
ACL_API aclError aclrtRecordEvent(aclrtEvent e, aclrtStream s) { return eng()->event_record(e, s); }
ACL_API aclError aclrtQueryEventStatus(aclrtEvent e, int *status) {
    if (!e || !status) return ACL_ERROR_INVALID_PARAM;
    int d = eng()->event_done(e);
    if (d < 0) return ACL_ERROR_INVALID_PARAM; /* taken by a device reset */
    *status = d ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
    return ACL_SUCCESS;
}
ACL_API aclError aclrtSynchronizeEvent(aclrtEvent e) { return eng()->event_sync(e); }
ACL_API aclError aclrtEventElapsedTime(float *ms, aclrtEvent a, aclrtEvent b) { return eng()->event_elapsed(ms, a, b); }

/* --- launches and models --------------------------------------------------------------------- */
static aclError launch(aclrtFuncHandle f, aclrtStream s) {
    if (!f) return ACL_ERROR_INVALID_PARAM;
    return fused() ? eng()->submit(s, (uint64_t)(uintptr_t)f) : rtKernelLaunch(f, 1, NULL, 0, NULL, s);
}
ACL_API aclError aclrtLaunchKernel(aclrtFuncHandle f, uint32_t blocks, const void *args, size_t args_size,
                                   aclrtStream s) {
    (void)blocks;
    (void)args;
    (void)args_size;
    return launch(f, s);
}
ACL_API aclError aclrtLaunchKernelV2(aclrtFuncHandle f, uint32_t blocks, const void *args, size_t args_size, void *cfg,
                                     aclrtStream s) {
    (void)blocks;
    (void)args;
    (void)args_size;
    (void)cfg;
    return launch(f, s);
}
ACL_API aclError aclrtLaunchKernelWithConfig(aclrtFuncHandle f, uint32_t blocks, aclrtStream s, void *cfg, void *args,
                                             void *reserve) {
    (void)blocks;
    (void)cfg;
    (void)args;
    (void)reserve;
    return launch(f, s);
}

static aclError execute(uint64_t us, aclrtStream s) {
    if (!us) return ACL_ERROR_INVALID_PARAM;
    return fused() ? eng()->submit(s, us) : rtModelExecute((void *)(uintptr_t)us, s, 0);
}
ACL_API aclError aclmdlExecuteAsync(uint32_t model, const void *in, void *out, aclrtStream s) {
    (void)in;
    (void)out;
    return execute(model, s);
}
ACL_API aclError aclmdlExecute(uint32_t model, const void *in, void *out) {
    (void)in;
    (void)out;
    aclError r = execute(model, NULL);
    return r ? r : eng()->stream_sync(NULL);
}
ACL_API aclError aclmdlRICaptureBegin(aclrtStream s, int mode) {
    (void)mode;
    return eng()->capture_begin(s);
}
ACL_API aclError aclmdlRICaptureEnd(aclrtStream s, aclmdlRI *ri) {
    uint64_t us = 0;
    aclError r = eng()->capture_end(s, &us);
    if (r == ACL_SUCCESS && ri) *ri = (aclmdlRI)(uintptr_t)us;
    return r;
}
ACL_API aclError aclmdlRICaptureGetInfo(aclrtStream s, int *status, aclmdlRI *ri) {
    if (!status) return ACL_ERROR_INVALID_PARAM;
    *status = eng()->capturing(s) ? 1 : 0; /* ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE : _NONE */
    if (ri) *ri = NULL;
    return ACL_SUCCESS;
}
ACL_API aclError aclmdlRIExecuteAsync(aclmdlRI ri, aclrtStream s) { return execute((uint64_t)(uintptr_t)ri, s); }
ACL_API aclError aclmdlRIExecute(aclmdlRI ri, int32_t timeout) {
    (void)timeout;
    aclError r = execute((uint64_t)(uintptr_t)ri, NULL);
    return r ? r : eng()->stream_sync(NULL);
}
ACL_API aclError aclmdlRIDestroy(aclmdlRI ri) {
    (void)ri;
    return ACL_SUCCESS;
}
