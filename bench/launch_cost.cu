// launch_cost.cu - what one kernel launch costs the host, and what the driver calls the compute
// meter adds to a launch cost on their own (bench/launch_cost.py runs it native and under the
// preload). Not part of the shim.
//
//   nvcc -O2 -o launch_cost bench/launch_cost.cu -lcuda && ./launch_cost
//
// Each operation is timed over rounds of 256 calls on the host (the queue is drained between
// rounds, outside the timing, so a launch never waits for the device); it prints one JSON line
// with the median ns per call of each:
//   launch          an empty kernel <<<1, 32>>> on a created stream (the runtime's launch path,
//                   which the preload interposes)
//   launch_default  the same kernel on the legacy default stream (where the meter defers its end
//                   event: hookcore/core/meter.h)
//   is_capturing    cuStreamIsCapturing on that stream
//   ctx_get_current cuCtxGetCurrent
//   event_record    cuEventRecord of one event on that stream
//   event_query     cuEventQuery of that (finished) event
//   clock_gettime   CLOCK_MONOTONIC
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#define RK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t r_ = (x);                                                                   \
        if (r_ != cudaSuccess) {                                                                \
            printf("{\"error\": \"%s = %s line %d\"}\n", #x, cudaGetErrorString(r_), __LINE__); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void empty_kernel() {}

static long long now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

template <typename F> static double median_ns(cudaStream_t s, F op, int rounds = 200, int per = 256) {
    std::vector<double> v;
    for (int r = 0; r < rounds; r++) {
        long long t0 = now_ns();
        for (int i = 0; i < per; i++) op();
        long long t1 = now_ns();
        RK(cudaStreamSynchronize(s));
        if (r >= rounds / 10) v.push_back(double(t1 - t0) / per); // the first tenth warms up
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main() {
    RK(cudaFree(0));
    cudaStream_t s;
    RK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUevent ev;
    if (cuEventCreate(&ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return 1;
    int cap = 0;
    CUcontext c = nullptr;
    double launch = median_ns(s, [&] { empty_kernel<<<1, 32, 0, s>>>(); });
    double launch_default = median_ns(0, [&] { empty_kernel<<<1, 32>>>(); });
    double capturing = median_ns(s, [&] { cuStreamIsCapturing(s, (CUstreamCaptureStatus *)&cap); });
    double ctx = median_ns(s, [&] { cuCtxGetCurrent(&c); });
    double rec = median_ns(s, [&] { cuEventRecord(ev, s); });
    RK(cudaStreamSynchronize(s));
    double query = median_ns(s, [&] { cuEventQuery(ev); });
    double clk = median_ns(s, [&] { (void)now_ns(); });
    // launch and record together, as the meter does per launch (its end event re-recorded)
    double both = median_ns(s, [&] {
        empty_kernel<<<1, 32, 0, s>>>();
        cuEventRecord(ev, s);
    });
    RK(cudaGetLastError());
    printf("{\"launch\": %.1f, \"is_capturing\": %.1f, \"ctx_get_current\": %.1f, \"event_record\": %.1f, "
           "\"event_query\": %.1f, \"clock_gettime\": %.1f, \"launch_and_record\": %.1f, \"launch_default\": %.1f}\n",
           launch, capturing, ctx, rec, query, clk, both, launch_default);
    return 0;
}
