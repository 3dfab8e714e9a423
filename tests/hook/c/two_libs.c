/* two_libs.c - a process using two vendors' APIs, each behind its own hookcore library:
 * CUDA (stub libcuda, libvgpu.so) and the demo API (libdemodrv.so.1, libvdemo.so). Both found
 * with dlopen + dlsym, so the dlsym chain of the two preloaded libraries is exercised.
 *
 *   two_libs MIB     print which library answers each lookup, both APIs' memory info, and the
 *                    result of allocating MIB MiB through each:
 *                      OWNER <symbol> <library>
 *                      CUDA <free> <total> ALLOC <CUresult>
 *                      DEMO <free> <total> ALLOC <rc>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../hookcore/cuda/cuda_abi.h"
#include "demo/demo.h"

static const char *owner(void *p) {
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname) return "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *gsym(gpa_t gpa, const char *name) {
    void *p = NULL;
    if (gpa(name, &p, 12000, 0, NULL) != CUDA_SUCCESS) return NULL;
    return p;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *cu = dlopen("libcuda.so.1", RTLD_NOW), *dm = dlopen("libdemodrv.so.1", RTLD_NOW);
    if (!cu || !dm) {
        printf("FAIL dlopen %s\n", dlerror());
        return 1;
    }
    gpa_t gpa = (gpa_t)dlsym(cu, "cuGetProcAddress_v2");
    int (*dinit)(void) = dlsym(dm, "demoInit");
    int (*dmalloc)(void **, size_t) = dlsym(dm, "demoMalloc");
    int (*dinfo)(size_t *, size_t *) = dlsym(dm, "demoMemInfo");
    void *cualloc = dlsym(cu, "cuMemAlloc_v2");
    printf("OWNER demoMalloc %s\nOWNER cuMemAlloc_v2 %s\nOWNER cuGetProcAddress_v2 %s\n", owner((void *)dmalloc),
           owner(cualloc), owner((void *)gpa));
    if (!gpa || !dinit || !dmalloc || !dinfo) {
        printf("FAIL symbols\n");
        return 1;
    }
    CUresult (*init)(unsigned) = gsym(gpa, "cuInit");
    CUresult (*get)(CUdevice *, int) = gsym(gpa, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = gsym(gpa, "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = gsym(gpa, "cuCtxSetCurrent");
    CUresult (*info)(size_t *, size_t *) = gsym(gpa, "cuMemGetInfo");
    CUresult (*alloc)(CUdeviceptr *, size_t) = gsym(gpa, "cuMemAlloc");
    CUdevice d;
    CUcontext ctx;
    size_t f = 0, t = 0;
    CUresult r = init(0);
    if (r == CUDA_SUCCESS && (r = get(&d, 0)) == CUDA_SUCCESS && (r = retain(&ctx, d)) == CUDA_SUCCESS) r = setcur(ctx);
    if (r == CUDA_SUCCESS) r = info(&f, &t);
    CUdeviceptr p = 0;
    CUresult ra = r == CUDA_SUCCESS ? alloc(&p, mib << 20) : r;
    printf("CUDA %zu %zu ALLOC %d\n", f, t, ra);
    int dr = dinit();
    size_t df = 0, dt = 0;
    if (dr == DEMO_OK) dr = dinfo(&df, &dt);
    void *q = NULL;
    int da = dr == DEMO_OK ? dmalloc(&q, mib << 20) : dr;
    printf("DEMO %zu %zu ALLOC %d\n", df, dt, da);
    return 0;
}
