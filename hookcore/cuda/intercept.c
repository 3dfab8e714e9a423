/* intercept.c - how calls reach the shim: dlsym, cuGetProcAddress(_v2) and the hook table.
 *
 * Three ways a program finds a driver function, all covered:
 *  1. linked with -lcuda: the dynamic linker binds to the exported interposer (LD_PRELOAD first);
 *  2. dlopen("libcuda.so.1") + dlsym(handle, name): a handle lookup skips the preload scope, so
 *     dlsym itself is interposed and answers policed cu* and nvml* names with the interposer;
 *  3. cuGetProcAddress (the CUDA runtime >= 11.3 resolves every entry point through it): the real
 *     cuGetProcAddress picks the variant for the caller's cudaVersion and flags (per-thread default
 *     stream -> _ptsz), then the shim swaps that real pointer for the interposer of the same
 *     variant. Unpoliced symbols get the driver's own pointer: no wrapper, no overhead, no ABI risk.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

hk_real_table hk_real;
int hk_shim_debug;
unsigned long hk_dlsym_calls, hk_gpa_calls;   /* statistics for HOOKCORE_LOG=debug (racy on purpose) */

/* ---------------------------------------------------------------------------
 * Logging
 * ------------------------------------------------------------------------- */
void hk_shim_log(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    fwrite("hookcore: ", 1, 10, stderr);
    fwrite(buf, 1, (size_t)n, stderr);
}

/* ---------------------------------------------------------------------------
 * The real dlsym. glibc >= 2.34 versions it GLIBC_2.34 (default) and keeps the old version
 * for compatibility; dlvsym(RTLD_NEXT, ...) from here finds libc's, never ours.
 * ------------------------------------------------------------------------- */
typedef void *(*hk_dlsym_fn)(void *, const char *);
static hk_dlsym_fn g_real_dlsym;

static hk_dlsym_fn real_dlsym(void) {
    hk_dlsym_fn f = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
    if (HK_LIKELY(f != NULL)) return f;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !f; i++)
        f = (hk_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    __atomic_store_n(&g_real_dlsym, f, __ATOMIC_RELEASE);
    return f;
}

/* ---------------------------------------------------------------------------
 * Hook table
 * ------------------------------------------------------------------------- */
typedef struct hk_hook {
    const char *name;
    void *hook;          /* our interposer */
    void **real;         /* slot in hk_real */
    int lib;             /* 0 libcuda, 1 libnvidia-ml */
} hk_hook;

static const hk_hook g_hooks[] = {
#define HK_ENTRY(n, l) {#n, (void *)&n, (void **)&hk_real.n, l},
    HK_HOOKS(HK_ENTRY)
#undef HK_ENTRY
};
#define HK_NHOOKS (sizeof g_hooks / sizeof g_hooks[0])

typedef struct hk_aux { const char *name; void **real; int lib; } hk_aux;
static const hk_aux g_aux[] = {
#define HK_AUX_ENTRY(n, l) {#n, (void **)&hk_real.n, l},
    HK_AUX(HK_AUX_ENTRY)
#undef HK_AUX_ENTRY
};

static const hk_hook *find_hook(const char *name) {
    for (size_t i = 0; i < HK_NHOOKS; i++)
        if (strcmp(g_hooks[i].name, name) == 0) return &g_hooks[i];
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Loading the real libraries
 * ------------------------------------------------------------------------- */
static pthread_once_t g_load_once[2] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
static __thread int t_loading;   /* recursion guard: the loader's own dlsym calls pass straight through */

static void load_lib(int lib) {
    static const char *const names[2] = {"libcuda.so.1", "libnvidia-ml.so.1"};
    t_loading = 1;
    hk_dlsym_fn rd = real_dlsym();
    void *h = dlopen(names[lib], RTLD_NOW | RTLD_NODELETE);
    if (h && rd) {
        for (size_t i = 0; i < HK_NHOOKS; i++)
            if (g_hooks[i].lib == lib) *g_hooks[i].real = rd(h, g_hooks[i].name);
        for (size_t i = 0; i < sizeof g_aux / sizeof g_aux[0]; i++)
            if (g_aux[i].lib == lib) *g_aux[i].real = rd(h, g_aux[i].name);
    }
    if (!h && hk_shim_debug) hk_shim_log("cannot load %s: %s", names[lib], dlerror());
    t_loading = 0;
}
static void load_cuda(void) { load_lib(0); }
static void load_nvml(void) { load_lib(1); }

void hk_shim_load(int lib) {
    pthread_once(&g_load_once[lib], lib == 0 ? load_cuda : load_nvml);
}

__attribute__((constructor)) static void hk_shim_ctor(void) {
    const char *l = getenv("HOOKCORE_LOG");
    hk_shim_debug = l && strcmp(l, "debug") == 0;
    real_dlsym();
}

/* ---------------------------------------------------------------------------
 * dlsym
 * ------------------------------------------------------------------------- */
static inline int maybe_policed(const char *name) {
    return name && ((name[0] == 'c' && name[1] == 'u') ||
                    (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l'));
}

/* Return the interposer for a policed name, or NULL to let the real dlsym answer. */
static __attribute__((noinline)) void *lookup_policed(void *handle, const char *name) {
    if (handle == RTLD_NEXT || t_loading) return NULL;
    const hk_hook *e = find_hook(name);
    if (!e) return NULL;
    hk_shim_load(e->lib);
    if (!*e->real) return NULL;                         /* the driver lacks it: answer as it would */
    return e->hook;
}

/* The pass-through is a tail call, so the real dlsym sees the caller's return address and
   RTLD_NEXT keeps its meaning for the caller. */
HK_EXPORT void *dlsym(void *handle, const char *name) {
    hk_dlsym_calls++;
    if (HK_UNLIKELY(maybe_policed(name))) {
        void *p = lookup_policed(handle, name);
        if (p) return p;
    }
    return real_dlsym()(handle, name);
}

/* ---------------------------------------------------------------------------
 * cuGetProcAddress(_v2)
 * ------------------------------------------------------------------------- */

/* Swap a real driver pointer for the interposer of the same variant. */
static void *to_hook(const char *symbol, void *real, int ver, cuuint64_t flags) {
    hk_gpa_calls++;
    for (size_t i = 0; i < HK_NHOOKS; i++) {
        if (g_hooks[i].lib == 0 && *g_hooks[i].real == real) {
            if (hk_shim_debug) hk_shim_log("cuGetProcAddress(%s, %d, %#llx) -> hook %s", symbol, ver,
                                           (unsigned long long)flags, g_hooks[i].name);
            return g_hooks[i].hook;
        }
    }
    if (hk_shim_debug) hk_shim_log("cuGetProcAddress(%s, %d, %#llx) -> real", symbol, ver,
                                   (unsigned long long)flags);
    return real;
}

HK_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status) {
    hk_shim_load(0);
    if (!hk_real.cuGetProcAddress_v2) {
        if (!hk_real.cuGetProcAddress) return CUDA_ERROR_NOT_INITIALIZED;
        CUresult r = hk_real.cuGetProcAddress(symbol, pfn, ver, flags);   /* pre-12.0 driver */
        if (status) *status = r == CUDA_SUCCESS ? CU_GET_PROC_ADDRESS_SUCCESS
                                                : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        if (r == CUDA_SUCCESS && pfn && *pfn) *pfn = to_hook(symbol, *pfn, ver, flags);
        return r;
    }
    CUresult r = hk_real.cuGetProcAddress_v2(symbol, pfn, ver, flags, status);
    if (r == CUDA_SUCCESS && pfn && *pfn) *pfn = to_hook(symbol, *pfn, ver, flags);
    return r;
}

HK_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
    hk_shim_load(0);
    CUresult r;
    if (hk_real.cuGetProcAddress) r = hk_real.cuGetProcAddress(symbol, pfn, ver, flags);
    else if (hk_real.cuGetProcAddress_v2) r = hk_real.cuGetProcAddress_v2(symbol, pfn, ver, flags, NULL);
    else return CUDA_ERROR_NOT_INITIALIZED;
    if (r == CUDA_SUCCESS && pfn && *pfn) *pfn = to_hook(symbol, *pfn, ver, flags);
    return r;
}
