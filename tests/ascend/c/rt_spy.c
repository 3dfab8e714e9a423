/* rt_spy.c - a preloadable spy on the stub runtime's rt* entry points (tests of the stub's layouts).
 *
 * Counts how often rtMalloc, rtKernelLaunch and rtModelExecute are reached through the dynamic
 * linker and passes each call on (dlsym(RTLD_NEXT)). `rtSpyCounts()` reports "malloc launch model".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

static _Atomic int n_malloc, n_launch, n_model;

int32_t rtMalloc(void **ptr, uint64_t size, int type, const uint16_t module) {
    static int32_t (*real)(void **, uint64_t, int, const uint16_t);
    if (!real) real = dlsym(RTLD_NEXT, "rtMalloc");
    atomic_fetch_add(&n_malloc, 1);
    return real(ptr, size, type, module);
}

int32_t rtKernelLaunch(const void *f, uint32_t blocks, void *args, uint32_t n, void *sm, void *s) {
    static int32_t (*real)(const void *, uint32_t, void *, uint32_t, void *, void *);
    if (!real) real = dlsym(RTLD_NEXT, "rtKernelLaunch");
    atomic_fetch_add(&n_launch, 1);
    return real(f, blocks, args, n, sm, s);
}

int32_t rtModelExecute(void *model, void *s, uint32_t flag) {
    static int32_t (*real)(void *, void *, uint32_t);
    if (!real) real = dlsym(RTLD_NEXT, "rtModelExecute");
    atomic_fetch_add(&n_model, 1);
    return real(model, s, flag);
}

const char *rtSpyCounts(void) {
    static char buf[64];
    snprintf(buf, sizeof buf, "%d %d %d", n_malloc, n_launch, n_model);
    return buf;
}
