// green_ctx.cu - how much of a GPU an SM partition (CUDA green context) gives, for the
// compute-limiter trade-off in hookcore/README.md. Not part of the shim.
//
//   nvcc -O2 -arch=sm_90 -o green_ctx bench/green_ctx.cu -lcuda && ./green_ctx
//
// For SM counts of about 10/30/50/70% of the device it creates a green context holding that many
// SMs and times, against the whole device (primary context):
//   fma  - a compute-bound kernel (FMA chains), grid = 8 blocks per SM of the whole device
//   copy - a memory-bound kernel (1 GiB device-to-device copy)
// and prints the throughput ratio for each.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s; cuGetErrorString(r_, &s); \
    printf("FAIL %s = %d (%s) line %d\n", #x, r_, s, __LINE__); exit(1); } } while (0)
#define RK(x) do { cudaError_t r_ = (x); if (r_ != cudaSuccess) { \
    printf("FAIL %s = %s line %d\n", #x, cudaGetErrorString(r_), __LINE__); exit(1); } } while (0)

__global__ void fma_kernel(float *out, int iters) {
    float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f, d = blockIdx.x * 1e-3f;
    for (int i = 0; i < iters; i++) {
        a = fmaf(a, b, c); d = fmaf(d, c, b); a = fmaf(a, c, d); d = fmaf(d, b, a);
    }
    if (a + d == 12345.f) out[0] = a;
}

__global__ void copy_kernel(const float4 *__restrict__ in, float4 *__restrict__ out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = in[i];
}

static float time_it(cudaStream_t s, int which, int blocks, float *scratch, const float4 *in, float4 *out,
                     size_t n) {
    cudaEvent_t e0, e1;
    RK(cudaEventCreate(&e0));
    RK(cudaEventCreate(&e1));
    for (int rep = 0; rep < 2; rep++) {   // first round warms up
        RK(cudaEventRecord(e0, s));
        for (int k = 0; k < 10; k++) {
            if (which == 0) fma_kernel<<<blocks, 256, 0, s>>>(scratch, 1 << 15);
            else copy_kernel<<<blocks, 256, 0, s>>>(in, out, n);
        }
        RK(cudaEventRecord(e1, s));
        RK(cudaEventSynchronize(e1));
    }
    float ms;
    RK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

int main() {
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext primary;
    CK(cuDevicePrimaryCtxRetain(&primary, dev));
    CK(cuCtxSetCurrent(primary));
    int sms;
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    int blocks = sms * 8;
    size_t n = (1ull << 30) / sizeof(float4);
    float *scratch;
    float4 *in, *out;
    RK(cudaMalloc(&scratch, 4));
    RK(cudaMalloc(&in, n * sizeof(float4)));
    RK(cudaMalloc(&out, n * sizeof(float4)));
    RK(cudaMemset(in, 1, n * sizeof(float4)));
    cudaStream_t s0;
    RK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    float full_fma = time_it(s0, 0, blocks, scratch, in, out, n);
    float full_copy = time_it(s0, 1, blocks, scratch, in, out, n);
    printf("device: %d SMs; whole device: fma %.3f ms, copy %.3f ms (%.0f GB/s)\n", sms, full_fma, full_copy,
           2.0 * 10 * n * sizeof(float4) / (full_copy * 1e6));

    CUdevResource res;
    CK(cuDeviceGetDevResource(dev, &res, CU_DEV_RESOURCE_TYPE_SM));
    printf("SM resource: %u SMs\n", res.sm.smCount);
    int pcts[] = {10, 30, 50, 70};
    for (int pct : pcts) {
        unsigned want = (unsigned)(res.sm.smCount * pct / 100);
        CUdevResource part, rest;
        unsigned groups = 1;
        CUresult r = cuDevSmResourceSplitByCount(&part, &groups, &res, &rest, 0, want);
        if (r != CUDA_SUCCESS || groups < 1) {
            printf("GREEN %d%%: split failed (%d)\n", pct, r);
            continue;
        }
        CUdevResourceDesc desc;
        CK(cuDevResourceGenerateDesc(&desc, &part, 1));
        CUgreenCtx g;
        CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
        CUcontext gc;
        CK(cuCtxFromGreenCtx(&gc, g));
        CK(cuCtxSetCurrent(gc));
        CUstream gs;
        CK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
        float *gscratch;
        float4 *gin, *gout;
        RK(cudaMalloc(&gscratch, 4));
        RK(cudaMalloc(&gin, n * sizeof(float4)));
        RK(cudaMalloc(&gout, n * sizeof(float4)));
        RK(cudaMemset(gin, 1, n * sizeof(float4)));
        float f = time_it((cudaStream_t)gs, 0, blocks, gscratch, gin, gout, n);
        float c = time_it((cudaStream_t)gs, 1, blocks, gscratch, gin, gout, n);
        RK(cudaFree(gscratch));
        RK(cudaFree(gin));
        RK(cudaFree(gout));
        printf("GREEN %d%% -> %u SMs (%.1f%%): fma throughput %.1f%%, copy throughput %.1f%%\n", pct,
               part.sm.smCount, 100.0 * part.sm.smCount / res.sm.smCount, 100.0 * full_fma / f,
               100.0 * full_copy / c);
        CK(cuStreamDestroy(gs));
        CK(cuCtxSetCurrent(primary));
        CK(cuGreenCtxDestroy(g));
    }
    return 0;
}
