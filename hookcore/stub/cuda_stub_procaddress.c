/* cuda_stub_procaddress.c - cuGetProcAddress of the stub libcuda.so.1: base name + version + flags
 * -> variant, like the driver, over the table each file contributes (cuda_stub.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <string.h>

#include "cuda_stub.h"

/* ---------------------------------------------------------------------------
 * cuGetProcAddress: base name + version + flags -> variant, like the driver
 * ------------------------------------------------------------------------- */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);

/* This file's part of cuGetProcAddress's table (cuda_stub.h). */
#define SYMS(X)         \
    X(cuGetProcAddress) \
    X(cuGetProcAddress_v2)
SYMS(STUB_ALIAS)
const stub_sym stub_syms_procaddress[] = {SYMS(STUB_SYM){NULL, NULL}};
#undef SYMS

/* The whole table: each file's part, made where its functions are defined (cuda_stub.h says why). */
static const stub_sym *const g_tables[] = {stub_syms_devices, stub_syms_memory, stub_syms_engine,
                                           stub_syms_procaddress};

static void *find_sym(const char *name) {
    for (size_t t = 0; t < sizeof g_tables / sizeof g_tables[0]; t++)
        for (const stub_sym *s = g_tables[t]; s->name; s++)
            if (!strcmp(s->name, name)) return s->fn;
    return NULL;
}

/* The variant a caller built against `ver` gets: _ptsz for per-thread default stream,
 * the newest _vN that existed in `ver` (v2 of the 3.2-era APIs; a few are newer). */
static void *resolve(const char *symbol, int ver, cuuint64_t flags) {
    char buf[128];
    int v2_since = 3020;
    if (!strcmp(symbol, "cuGetProcAddress"))
        v2_since = 12000;
    else if (!strcmp(symbol, "cuDeviceGetUuid"))
        v2_since = 11040;
    else if (!strcmp(symbol, "cuEventElapsedTime"))
        v2_since = 12080;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        /* synchronous calls have _ptds variants, stream-taking ones _ptsz, after any _v2 */
        static const char *const forms[] = {"%s_v2_ptds", "%s_v2_ptsz", "%s_ptds", "%s_ptsz"};
        for (int i = ver >= v2_since ? 0 : 2; i < 4; i++) {
            snprintf(buf, sizeof buf, forms[i], symbol);
            void *p = find_sym(buf);
            if (p) return p;
        }
    }
    if (ver >= v2_since) {
        snprintf(buf, sizeof buf, "%s_v2", symbol);
        void *p = find_sym(buf);
        if (p) return p;
    }
    return find_sym(symbol);
}

STUB_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    void *p = resolve(symbol, ver, flags);
    *pfn = p;
    if (status) *status = p ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return p ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

STUB_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, ver, flags, NULL);
}
