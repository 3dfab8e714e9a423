/* shim_client_memory.c - the shim client's memory commands: quota, vmm, async, arrays, pitch, grab,
 * churn, fork, ctxmem (shim_client.c lists them). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim_client.h"

void cmd_quota(size_t chunk) {
    size_t f, t;
    meminfo(&f, &t);
    size_t quota = t;
    if (f != quota) fail("fresh free %zu != total %zu", f, t);
    printf("OK meminfo total=%zu\n", t);
    size_t n = quota / chunk, cap = n + 2;
    CUdeviceptr *p = calloc(cap, sizeof *p);
    for (size_t i = 0; i < n; i++) {
        CUresult r = cuMemAlloc_(&p[i], chunk);
        if (r != CUDA_SUCCESS) fail("alloc %zu of %zu = %d", i, n, r);
    }
    CUdeviceptr extra;
    CUresult r = cuMemAlloc_(&extra, chunk);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) fail("alloc past quota = %d, want 2", r);
    meminfo(&f, &t);
    if (f != quota - n * chunk || t != quota) fail("at quota free=%zu total=%zu", f, t);
    printf("OK oom after %zu allocations\n", n);
    if (cuMemFree_(p[0]) != CUDA_SUCCESS) fail("free");
    if ((r = cuMemAlloc_(&p[0], chunk)) != CUDA_SUCCESS) fail("alloc after free = %d", r);
    printf("OK free gives the quota back\n");
    for (size_t i = 0; i < n; i++) cuMemFree_(p[i]);
    meminfo(&f, &t);
    if (f != quota) fail("after freeing all free=%zu", f);
    size_t tm = 0;
    if (cuDeviceTotalMem_(&tm, 0) != CUDA_SUCCESS || tm != quota) fail("cuDeviceTotalMem = %zu", tm);
    printf("OK all freed\n");
}

void cmd_vmm(void) {
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) =
        sym("cuMemCreate", V, 0);
    CUresult (*release)(CUmemGenericAllocationHandle) = sym("cuMemRelease", V, 0);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t f, t;
    meminfo(&f, &t);
    size_t n = t / (2 * MiB);
    CUmemGenericAllocationHandle *h = calloc(n + 1, sizeof *h);
    for (size_t i = 0; i < n; i++)
        if (create(&h[i], 2 * MiB, &prop, 0) != CUDA_SUCCESS) fail("cuMemCreate %zu", i);
    CUmemGenericAllocationHandle x;
    CUresult r = create(&x, 2 * MiB, &prop, 0);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) fail("cuMemCreate past quota = %d", r);
    meminfo(&f, &t);
    if (f != 0) fail("vmm at quota free=%zu", f);
    printf("OK vmm oom after %zu handles\n", n);
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    if (create(&x, 2 * MiB, &prop, 0) != CUDA_SUCCESS) fail("host cuMemCreate must not be charged");
    release(x);
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    for (size_t i = 0; i < n; i++) release(h[i]);
    meminfo(&f, &t);
    if (f != t) fail("vmm after release free=%zu total=%zu", f, t);
    printf("OK vmm release gives the quota back\n");
}

void cmd_async(void) {
    CUresult (*aa)(CUdeviceptr *, size_t, CUstream) = sym("cuMemAllocAsync", V, 0);
    CUresult (*fa)(CUdeviceptr, CUstream) = sym("cuMemFreeAsync", V, 0);
    CUresult (*aa_pt)(CUdeviceptr *, size_t, CUstream) =
        sym("cuMemAllocAsync", V, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CUresult (*ap)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) = sym("cuMemAllocFromPoolAsync", V, 0);
    CUresult (*defpool)(CUmemoryPool *, CUdevice) = sym("cuDeviceGetDefaultMemPool", V, 0);
    const char *s1, *s2;
    if (strcmp(owner((void *)aa_pt, &s1), "libvgpu.so") || strcmp(s1, "cuMemAllocAsync_ptsz"))
        fail("per-thread cuMemAllocAsync -> %s:%s", owner((void *)aa_pt, NULL), s1);
    (void)s2;
    size_t f, t;
    meminfo(&f, &t);
    size_t chunk = 4 * MiB, n = t / chunk;
    CUdeviceptr *p = calloc(n + 1, sizeof *p);
    CUmemoryPool pool;
    if (defpool(&pool, 0) != CUDA_SUCCESS) fail("default pool");
    for (size_t i = 0; i < n; i++) {
        CUresult r = (i % 3 == 0)   ? aa(&p[i], chunk, NULL)
                     : (i % 3 == 1) ? aa_pt(&p[i], chunk, NULL)
                                    : ap(&p[i], chunk, pool, NULL);
        if (r != CUDA_SUCCESS) fail("async alloc %zu = %d", i, r);
    }
    CUdeviceptr x;
    CUresult r1 = aa(&x, chunk, NULL), r2 = ap(&x, chunk, pool, NULL);
    if (r1 != CUDA_ERROR_OUT_OF_MEMORY || r2 != CUDA_ERROR_OUT_OF_MEMORY) fail("async past quota = %d %d", r1, r2);
    printf("OK async oom after %zu allocations\n", n);
    for (size_t i = 0; i < n; i++) fa(p[i], NULL);
    meminfo(&f, &t);
    if (f != t) fail("async after free free=%zu", f);
    printf("OK async free gives the quota back\n");
}

void cmd_arrays(void) {
    CUresult (*ac)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *) = sym("cuArrayCreate", V, 0);
    CUresult (*a3)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *) = sym("cuArray3DCreate", V, 0);
    CUresult (*ad)(CUarray) = sym("cuArrayDestroy", V, 0);
    CUresult (*mc)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned) = sym("cuMipmappedArrayCreate", V, 0);
    CUresult (*md)(CUmipmappedArray) = sym("cuMipmappedArrayDestroy", V, 0);
    size_t f0, f, t;
    meminfo(&f0, &t);
    CUDA_ARRAY_DESCRIPTOR d = {1024, 1024, 0x20 /* float */, 4}; /* 16 MiB */
    CUarray a, b;
    if (ac(&a, &d) != CUDA_SUCCESS) fail("cuArrayCreate");
    meminfo(&f, &t);
    if (f0 - f != 16 * MiB) fail("2D array charged %zu", f0 - f);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {256, 256, 64, 0x01 /* u8 */, 1, 0}; /* 4 MiB */
    if (a3(&b, &d3) != CUDA_SUCCESS) fail("cuArray3DCreate");
    meminfo(&f, &t);
    if (f0 - f != 20 * MiB) fail("3D array charged %zu", f0 - f - 16 * MiB);
    CUDA_ARRAY3D_DESCRIPTOR big = {t, 1, 1, 0x01, 1, 0}; /* the whole quota */
    CUarray c;
    CUresult r = a3(&c, &big);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) fail("array past quota = %d", r);
    CUmipmappedArray m;
    CUDA_ARRAY3D_DESCRIPTOR dm = {1024, 1024, 0, 0x20, 1, 0}; /* 4 MiB + levels */
    if (mc(&m, &dm, 11) != CUDA_SUCCESS) fail("mipmapped");
    meminfo(&f, &t);
    if (f0 - f < 24 * MiB) fail("mipmapped charged too little");
    ad(a);
    ad(b);
    md(m);
    meminfo(&f, &t);
    if (f != f0) fail("arrays after destroy free=%zu want %zu", f, f0);
    printf("OK arrays charged and given back\n");
}

void cmd_pitch(void) {
    CUresult (*ap)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) = sym("cuMemAllocPitch", V, 0);
    size_t f0, f, t, pitch = 0;
    meminfo(&f0, &t);
    CUdeviceptr p;
    if (ap(&p, &pitch, 1000, 4096, 4) != CUDA_SUCCESS) fail("pitch alloc");
    meminfo(&f, &t);
    if (pitch != 1024 || f0 - f != 1024 * 4096) fail("pitch %zu charged %zu", pitch, f0 - f);
    cuMemFree_(p);
    meminfo(&f, &t);
    if (f != f0) fail("pitch free");
    printf("OK pitch charged pitch x height\n");
}

void cmd_grab(size_t chunk) {
    size_t n = 0;
    CUdeviceptr p;
    CUresult r;
    while ((r = cuMemAlloc_(&p, chunk)) == CUDA_SUCCESS) n++;
    if (r != CUDA_ERROR_OUT_OF_MEMORY) fail("grab stopped with %d", r);
    printf("GOT %zu\n", n);
    fflush(stdout);
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {}
}

void cmd_churn(size_t chunk, size_t n) {
    CUdeviceptr *p = calloc(n, sizeof *p);
    for (size_t i = 0; i < n; i++)
        if (cuMemAlloc_(&p[i], chunk) != CUDA_SUCCESS) fail("churn alloc");
    printf("READY\n");
    fflush(stdout);
    for (size_t i = 0;; i = (i + 1) % n) {
        cuMemFree_(p[i]);
        if (cuMemAlloc_(&p[i], chunk) != CUDA_SUCCESS) fail("churn realloc");
    }
}

void cmd_fork(size_t chunk) {
    CUdeviceptr a, b;
    if (cuMemAlloc_(&a, chunk) != CUDA_SUCCESS) fail("parent alloc");
    size_t f0, f, t;
    meminfo(&f0, &t);
    printf("FORK parent free=%zu total=%zu\n", f0, t);
    fflush(stdout);
    int up[2], down[2]; /* child -> parent: "allocated"; parent -> child: "exit now" */
    if (pipe(up) || pipe(down)) fail("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        size_t before, after, ct;
        char c = 0;
        meminfo(&before, &ct);
        if (cuMemAlloc_(&b, chunk) != CUDA_SUCCESS) _exit(11);
        meminfo(&after, &ct);
        printf("FORK child free=%zu then=%zu\n", before, after);
        fflush(stdout);
        if (write(up[1], "a", 1) != 1 || read(down[0], &c, 1) != 1) _exit(12);
        _exit(0); /* exits holding the allocation: its slot dies with it */
    }
    char c = 0;
    if (read(up[0], &c, 1) != 1) fail("the child never allocated");
    meminfo(&f, &t);
    printf("FORK parent-while-child free=%zu\n", f);
    fflush(stdout);
    if (write(down[1], "x", 1) != 1) fail("write");
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail("child status %d", WEXITSTATUS(st));
    meminfo(&f, &t);
    printf("FORK parent-after-child free=%zu\n", f);
    /* The dead child's charge is reclaimed: the parent can fill the rest of the quota. */
    size_t n = 0, most = t / chunk;
    CUdeviceptr *p = calloc(most + 1, sizeof *p);
    while (n <= most && cuMemAlloc_(&p[n], chunk) == CUDA_SUCCESS) n++;
    for (size_t i = 0; i < n; i++) cuMemFree_(p[i]);
    free(p);
    printf("FORK refilled %zu\n", n);
    printf("OK fork\n");
}

/* Allocate `chunk` in a context, let the context go (`how`: reset = cuDevicePrimaryCtxReset of the
   primary context; destroy = cuCtxDestroy of a created one), then allocate `chunk` again in the
   primary context. Prints "GONE <rc of the reset or destroy>" and "AGAIN <rc of the second alloc>". */
/* CHUNK bytes as a device pointer, or (`array`) as a 2D array of 4096-byte rows of u8. */
static CUresult ctxmem_take(int array, size_t chunk) {
    static CUresult (*ac)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    if (!array) {
        CUdeviceptr p;
        return cuMemAlloc_(&p, chunk);
    }
    if (!ac) ac = sym("cuArrayCreate", V, 0);
    CUDA_ARRAY_DESCRIPTOR d = {4096, chunk / 4096, 0x01 /* u8 */, 1};
    CUarray a;
    return ac(&a, &d);
}

void cmd_ctxmem(const char *how, size_t chunk, int array) {
    CUresult (*reset)(CUdevice) = sym("cuDevicePrimaryCtxReset", V, 0);
    CUresult (*create)(CUcontext *, unsigned, CUdevice) = sym("cuCtxCreate", V, 0);
    CUresult (*destroy)(CUcontext) = sym("cuCtxDestroy", V, 0);
    CUcontext primary = NULL, own = NULL;
    CUresult r, gone;
    if (!strcmp(how, "destroy") && create(&own, 0, 0) != CUDA_SUCCESS) fail("create");
    if ((r = ctxmem_take(array, chunk)) != CUDA_SUCCESS) fail("first alloc = %d", r);
    gone = !strcmp(how, "reset") ? reset(0) : destroy(own);
    printf("GONE %d\n", gone);
    if (cuPrimaryRetain_(&primary, 0) != CUDA_SUCCESS || cuCtxSetCurrent_(primary) != CUDA_SUCCESS) fail("primary");
    printf("AGAIN %d\n", ctxmem_take(array, chunk));
}
