/* ascend_stub_engine.h - what the stub libascendcl.so (acl_stub.c) and the stub libruntime.so
 * (ascend_runtime_stub.c) share: CANN's runtime error codes (values of the public
 * rt_error_codes.h) and the simulated NPU's engine table, which libascendcl.so calls directly in
 * the "fused" layout (no rt* symbol in between). Stub-only; not part of any hook library.
 */
#ifndef HOOKCORE_ASCEND_STUB_ENGINE_H
#define HOOKCORE_ASCEND_STUB_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#define ACL_ERROR_RT_PARAM_INVALID           107000
#define ACL_ERROR_RT_INVALID_DEVICEID        107001
#define ACL_ERROR_RT_CONTEXT_NULL            107002
#define ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID 107006
#define ACL_ERROR_RT_STREAM_CAPTURED         107027
#define ACL_ERROR_RT_EVENT_CAPTURED          107028
#define ACL_ERROR_RT_STREAM_NOT_CAPTURED     107029
#define ACL_ERROR_RT_MEMORY_ALLOCATION       207001
#define ACL_ERROR_RT_EVENT_NOT_COMPLETE      507006

typedef struct stub_npu_engine {
    int (*set_device)(int32_t dev);
    int (*get_device)(int32_t *dev);
    int (*reset_device)(int32_t dev);
    int (*device_count)(uint32_t *n);
    int (*phy_id)(uint32_t dev, uint32_t *phy);
    int (*malloc)(void **ptr, uint64_t size, int physical);
    int (*free)(void *ptr, int physical);
    int (*mem_info)(size_t *free_b, size_t *total_b);
    int (*stream_create)(void **s);
    int (*stream_destroy)(void *s);
    int (*stream_sync)(void *s);
    int (*device_sync)(void);
    int (*submit)(void *stream, uint64_t us);
    int (*capture_begin)(void *stream);
    int (*capture_end)(void *stream, uint64_t *captured_us);
    int (*capturing)(void *stream);
    int (*event_create)(void **e);
    int (*event_destroy)(void *e);
    int (*event_record)(void *e, void *stream);
    int (*event_done)(void *e); /* 1 done, 0 not yet, -1 taken by a device reset */
    int (*event_sync)(void *e);
    int (*event_elapsed)(float *ms, void *a, void *b);
} stub_npu_engine;

const stub_npu_engine *stubNpuEngine(void);

#endif
