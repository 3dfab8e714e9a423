/* PLACEHOLDER for hookcore/workload/cuda_workload.c (being written on the framework branch).
 *
 * dra.node.images builds this only while that file does not exist, so the node's image
 * pipeline runs end to end now; it is deleted once the real program is in main. Same output
 * contract: `quota_total_bytes=<N>` (cuMemGetInfo's total) and `over_quota_alloc=refused|allowed`
 * (an allocation of total + 1 MiB).
 */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*init_fn)(unsigned int);
typedef int (*device_get_fn)(int *, int);
typedef int (*retain_fn)(void **, int);
typedef int (*set_ctx_fn)(void *);
typedef int (*mem_info_fn)(size_t *, size_t *);
typedef int (*alloc_fn)(unsigned long long *, size_t);

int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        fprintf(stderr, "cannot load libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    init_fn init = (init_fn)dlsym(cuda, "cuInit");
    device_get_fn device_get = (device_get_fn)dlsym(cuda, "cuDeviceGet");
    retain_fn retain = (retain_fn)dlsym(cuda, "cuDevicePrimaryCtxRetain");
    set_ctx_fn set_ctx = (set_ctx_fn)dlsym(cuda, "cuCtxSetCurrent");
    mem_info_fn mem_info = (mem_info_fn)dlsym(cuda, "cuMemGetInfo_v2");
    alloc_fn alloc = (alloc_fn)dlsym(cuda, "cuMemAlloc_v2");
    if (!init || !device_get || !retain || !set_ctx || !mem_info || !alloc) {
        fprintf(stderr, "libcuda.so.1 lacks a driver API entry point\n");
        return 2;
    }
    int dev = 0;
    void *ctx = NULL;
    size_t free_b = 0, total_b = 0;
    int rc = init(0);
    if (rc == 0) rc = device_get(&dev, 0);
    if (rc == 0) rc = retain(&ctx, dev);
    if (rc == 0) rc = set_ctx(ctx);
    if (rc == 0) rc = mem_info(&free_b, &total_b);
    if (rc != 0) {
        fprintf(stderr, "CUDA driver call failed: %d\n", rc);
        return 3;
    }
    printf("quota_total_bytes=%zu\n", total_b);
    unsigned long long ptr = 0;
    printf("over_quota_alloc=%s\n", alloc(&ptr, total_b + ((size_t)1 << 20)) == 0 ? "allowed" : "refused");
    return 0;
}
