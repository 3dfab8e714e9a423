/* hip_abi.h - the slice of the HIP runtime ABI that libvhip.so uses.
 *
 * Written from AMD's public HIP API reference (hip_runtime_api.h as documented for ROCm 5.x-7.x:
 * function signatures, enum values, struct layouts); no AMD or Hygon header is needed to build.
 * Handles are opaque pointers, enums are ints, as in the C ABI. The same API is served by ROCm's
 * libamdhip64.so (AMD Instinct) and by the HIP runtime of Hygon's DTK (DCU).
 */
#ifndef HOOKCORE_HIP_ABI_H
#define HOOKCORE_HIP_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int hipError_t;
typedef int hipDevice_t;
typedef int hipMemcpyKind;
typedef int hipStreamCaptureMode;
typedef int hipStreamCaptureStatus;
typedef void *hipStream_t;
typedef void *hipEvent_t;
typedef void *hipFunction_t;
typedef void *hipGraph_t;
typedef void *hipGraphExec_t;
typedef void *hipMemPool_t;
typedef void *hipArray_t;
typedef void *hipMipmappedArray_t;
typedef void *hipDeviceptr_t;
typedef void *hipMemGenericAllocationHandle_t;

typedef struct dim3 {
    uint32_t x, y, z;
} dim3;

typedef struct hipExtent {
    size_t width, height, depth; /* width in bytes for linear memory, in elements for arrays */
} hipExtent;

typedef struct hipPitchedPtr {
    void *ptr;
    size_t pitch, xsize, ysize;
} hipPitchedPtr;

typedef struct hipChannelFormatDesc {
    int x, y, z, w; /* bits per component */
    int f;          /* hipChannelFormatKind */
} hipChannelFormatDesc;

typedef struct hipMemLocation {
    int type; /* hipMemLocationType: 1 = device */
    int id;   /* the device ordinal */
} hipMemLocation;

typedef struct hipMemAllocationProp {
    int type;                /* hipMemAllocationType: 1 = pinned */
    int requestedHandleType; /* hipMemAllocationHandleType */
    hipMemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
    } allocFlags;
} hipMemAllocationProp;

/* The driver-style array descriptors (hipArrayCreate, hipArray3DCreate, hipMipmappedArrayCreate):
   Format is hipArray_Format (HIP_AD_FORMAT_*: the element's type, CUDA's numbering). */
typedef struct HIP_ARRAY_DESCRIPTOR {
    size_t Width, Height;
    int Format;
    unsigned int NumChannels;
} HIP_ARRAY_DESCRIPTOR;
typedef struct HIP_ARRAY3D_DESCRIPTOR {
    size_t Width, Height, Depth;
    int Format;
    unsigned int NumChannels, Flags;
} HIP_ARRAY3D_DESCRIPTOR;
#define hipArrayLayered 0x01 /* HIP_ARRAY3D_DESCRIPTOR.Flags: Depth counts layers, which levels do not halve */

/* The extensible launches' configurations: hipLaunchKernelExC's hipLaunchConfig_t and
   hipDrvLaunchKernelEx's HIP_LAUNCH_CONFIG (the stream is what the meter needs of them). */
typedef struct hipLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    hipStream_t stream;
    void *attrs;
    unsigned int numAttrs;
} hipLaunchConfig_t;
typedef struct HIP_LAUNCH_CONFIG {
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    hipStream_t hStream;
    void *attrs;
    unsigned int numAttrs;
} HIP_LAUNCH_CONFIG;

/* A stream-ordered pool's properties (hipMemPoolCreate) and a graph's memory allocation node
   (hipGraphAddMemAllocNode), as AMD's HIP lays them out: 88 bytes of pool properties (the reserved
   tail took `maxSize` from its first 8 bytes in HIP 6), then the node's fields. */
typedef void *hipGraphNode_t;
typedef struct hipMemPoolProps {
    int allocType;
    int handleTypes;
    hipMemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned char reserved[56];
} hipMemPoolProps;
typedef struct hipMemAllocNodeParams {
    hipMemPoolProps poolProps;
    const void *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    void *dptr;
} hipMemAllocNodeParams;

#define hipSuccess                     0
#define hipErrorInvalidValue           1
#define hipErrorOutOfMemory            2 /* device out of memory: also over quota */
#define hipErrorNotInitialized         3 /* libvhip failed closed */
#define hipErrorInvalidDevice          101
#define hipErrorNotReady               600 /* hipEventQuery: not complete yet */
#define hipErrorNotSupported           801 /* the real library lacks the entry point */
#define hipStreamCaptureStatusActive   1
#define hipMemLocationTypeDevice       1
#define hipMemPoolAttrReleaseThreshold 4                /* hipMemPoolAttr: bytes of freed memory a pool keeps */
#define hipStreamPerThread             ((hipStream_t)2) /* the calling thread's default stream */
#define HIP_PCI_BUS_ID_MAX             64

#endif
