/* hip_api.h - the slice of the HIP runtime API that hip_client.c calls, declared from AMD's public
 * HIP reference (no HIP header is needed to build the tests): handles are pointers, enums ints. */
#ifndef HIP_CLIENT_API_H
#define HIP_CLIENT_API_H
#include <stddef.h>
#include <stdint.h>

typedef int hipError_t;
typedef struct {
    uint32_t x, y, z;
} dim3;
typedef struct {
    size_t width, height, depth;
} hipExtent;
typedef struct {
    void *ptr;
    size_t pitch, xsize, ysize;
} hipPitchedPtr;
typedef struct {
    int x, y, z, w, f;
} hipChannelFormatDesc;
typedef struct {
    int type, handle_type;
    struct {
        int type, id;
    } location;
    void *win32;
    unsigned char flags[4];
} hipMemAllocationProp;

hipError_t hipSetDevice(int);
hipError_t hipMalloc(void **, size_t);
hipError_t hipMallocPitch(void **, size_t *, size_t, size_t);
hipError_t hipMemAllocPitch(void **, size_t *, size_t, size_t, unsigned int);
hipError_t hipMalloc3D(hipPitchedPtr *, hipExtent);
hipError_t hipMallocManaged(void **, size_t, unsigned int);
hipError_t hipMallocAsync(void **, size_t, void *);
hipError_t hipMallocFromPoolAsync(void **, size_t, void *, void *);
hipError_t hipExtMallocWithFlags(void **, size_t, unsigned int);
hipError_t hipMallocArray(void **, const hipChannelFormatDesc *, size_t, size_t, unsigned int);
hipError_t hipMalloc3DArray(void **, const hipChannelFormatDesc *, hipExtent, unsigned int);
hipError_t hipFree(void *);
hipError_t hipFreeAsync(void *, void *);
hipError_t hipFreeArray(void *);
hipError_t hipMallocMipmappedArray(void **, const hipChannelFormatDesc *, hipExtent, unsigned int, unsigned int);
hipError_t hipFreeMipmappedArray(void *);
typedef struct {
    size_t width, height;
    int format;
    unsigned int channels;
} array_desc; /* HIP_ARRAY_DESCRIPTOR */
typedef struct {
    size_t width, height, depth;
    int format;
    unsigned int channels, flags;
} array3d_desc; /* HIP_ARRAY3D_DESCRIPTOR */
hipError_t hipArrayCreate(void **, const array_desc *);
hipError_t hipArray3DCreate(void **, const array3d_desc *);
hipError_t hipArrayDestroy(void *);
#define U8 0x01 /* HIP_AD_FORMAT_UNSIGNED_INT8 */
hipError_t hipMemCreate(void **, size_t, const hipMemAllocationProp *, unsigned long long);
hipError_t hipMemRelease(void *);
hipError_t hipMemAddressReserve(void **, size_t, size_t, void *, unsigned long long);
hipError_t hipMemMap(void *, size_t, size_t, void *, unsigned long long);
hipError_t hipMemUnmap(void *, size_t);
hipError_t hipMemRetainAllocationHandle(void **, void *);
hipError_t hipMemGetInfo(size_t *, size_t *);
hipError_t hipGetProcAddress(const char *, void **, int, uint64_t, void *);
hipError_t hipMemPoolCreate(void **, const hipMemAllocationProp *);
hipError_t hipMemPoolDestroy(void *);
hipError_t hipMemPoolSetAttribute(void *, int, void *);
hipError_t hipMemPoolTrimTo(void *, size_t);
hipError_t hipDeviceGetMemPool(void **, int);
hipError_t hipDeviceTotalMem(size_t *, int);
hipError_t hipDeviceGetPCIBusId(char *, int, int);
hipError_t hipStreamCreate(void **);
hipError_t hipStreamSynchronize(void *);
hipError_t hipDeviceSynchronize(void);
hipError_t hipDeviceReset(void);
hipError_t hipStreamBeginCapture(void *, int);
hipError_t hipStreamEndCapture(void *, void **);
hipError_t hipGraphInstantiate(void **, void *, void *, char *, size_t);
hipError_t hipGraphLaunch(void *, void *);
hipError_t hipModuleLaunchCooperativeKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                            unsigned, void *, void **);
typedef struct {
    dim3 grid, block;
    size_t shmem;
    void *stream, *attrs;
    unsigned int nattrs;
} launch_config; /* hipLaunchConfig_t */
typedef struct {
    unsigned int gx, gy, gz, bx, by, bz, shmem;
    void *stream, *attrs;
    unsigned int nattrs;
} drv_launch_config; /* HIP_LAUNCH_CONFIG */
hipError_t hipLaunchKernelExC(const launch_config *, const void *, void **);
hipError_t hipDrvLaunchKernelEx(const drv_launch_config *, void *, void **, void **);
hipError_t hipEventCreate(void **);
hipError_t hipLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
hipError_t hipExtLaunchKernel(const void *, dim3, dim3, void **, size_t, void *, void *, void *, int);
hipError_t hipLaunchCooperativeKernel(const void *, dim3, dim3, void **, unsigned int, void *);
hipError_t hipModuleLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                                 void **, void **);
hipError_t hipExtModuleLaunchKernel(void *, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, size_t, void *,
                                    void **, void **, void *, void *, uint32_t);
hipError_t hipMemcpy(void *, const void *, size_t, int);
hipError_t hipLaunchKernel_spt(const void *, dim3, dim3, void **, size_t, void *);
hipError_t hipLaunchCooperativeKernel_spt(const void *, dim3, dim3, void **, unsigned int, void *);
hipError_t hipGraphLaunch_spt(void *, void *);
hipError_t hipMemcpyAsync_spt(void *, const void *, size_t, int, void *);
hipError_t hipMemsetAsync_spt(void *, int, size_t, void *);
hipError_t hipMemcpy_spt(void *, const void *, size_t, int);
#define PER_THREAD ((void *)2) /* hipStreamPerThread */
hipError_t hipMemcpyAsync(void *, const void *, size_t, int, void *);
hipError_t hipMemcpyHtoDAsync(void *, void *, size_t, void *);
hipError_t hipMemsetAsync(void *, int, size_t, void *);
hipError_t hipMemsetD32Async(void *, int, size_t, void *);
hipError_t hipMemcpyToSymbolAsync(const void *, const void *, size_t, size_t, int, void *);
hipError_t hipMemset2DAsync(void *, size_t, int, size_t, size_t, void *);
hipError_t hipMemset3DAsync(hipPitchedPtr, int, hipExtent, void *);
typedef struct {
    void *src_array;
    size_t src_pos[3];
    hipPitchedPtr src;
    void *dst_array;
    size_t dst_pos[3];
    hipPitchedPtr dst;
    hipExtent extent;
    int kind;
} memcpy3d_params; /* hipMemcpy3DParms */
hipError_t hipMemcpy3DAsync(const memcpy3d_params *, void *);
hipError_t hipMemset2DAsync_spt(void *, size_t, int, size_t, size_t, void *);
hipError_t hipMemcpy3DAsync_spt(const memcpy3d_params *, void *);
hipError_t hipMemExportToShareableHandle(void *, void *, int, unsigned long long);
hipError_t hipMemImportFromShareableHandle(void **, void *, int);
#define POSIX_FD 1 /* hipMemHandleTypePosixFileDescriptor */

/* hipMemAllocNodeParams as AMD's HIP lays it out: 88 bytes of pool properties, then the node's. */
typedef struct {
    int alloc_type, handle_types;
    struct {
        int type, id;
    } location;
    void *win32;
    size_t max_size;
    unsigned char reserved[56];
    const void *access;
    size_t access_count, bytesize;
    void *dptr;
} alloc_node_params;
hipError_t hipGraphAddMemAllocNode(void **, void *, const void *, size_t, alloc_node_params *);

#endif
