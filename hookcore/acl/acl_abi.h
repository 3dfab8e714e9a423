/* acl_abi.h - the slice of CANN's ACL and runtime ABI that libvnpu.so uses.
 *
 * Written from the public headers of the open-source CANN runtime (acl_rt.h, acl_mdl.h,
 * rt_error_codes.h, the runtime's mem.h/kernel.h/rt_model.h); no Huawei header is needed to build.
 * Handles are opaque pointers, enums are ints, as in the C ABI.
 */
#ifndef HOOKCORE_ACL_ABI_H
#define HOOKCORE_ACL_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtFuncHandle;
typedef void *aclrtDrvMemHandle;
typedef void *aclmdlRI;
typedef void aclmdlDataset;
typedef void aclrtLaunchKernelCfg;
typedef void aclrtMallocConfig;
typedef void aclrtPhysicalMemProp;
typedef int aclrtMemMallocPolicy;
typedef int aclrtMemAttr;
typedef int aclmdlRICaptureMode;

typedef int32_t rtError_t;
typedef void *rtStream_t;
typedef void *rtEvent_t;
typedef void *rtModel_t;
typedef void *rtDrvMemHandle;

#define ACL_SUCCESS                        0
#define ACL_ERROR_UNINITIALIZE             100001      /* libvnpu failed closed (ACL layer) */
#define ACL_ERROR_RT_MEMORY_ALLOCATION     207001      /* device out of memory: also over quota */
#define ACL_ERROR_RT_INTERNAL_ERROR        507000      /* libvnpu failed closed (runtime layer) */
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT   207000      /* the real library lacks the entry point */
#define ACL_EVENT_TIME_LINE                0x00000008u /* an event usable for elapsed time */
#define ACL_EVENT_RECORDED_STATUS_COMPLETE 1
#define ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE 1

#endif
