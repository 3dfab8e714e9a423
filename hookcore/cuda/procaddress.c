/* procaddress.c - cuGetProcAddress(_v2): how the CUDA runtime (>= 11.3) finds every entry point.
 *
 * The real cuGetProcAddress picks the variant for the caller's cudaVersion and flags (per-thread
 * default stream -> _ptsz); the shim then swaps that real pointer for the interposer of the same
 * variant (hk_preload_swap: a table of real pointers resolved once from libcuda). A v1-ABI request
 * gets the v1 pointer untouched, a per-thread request the _ptsz hook, and every symbol that is not
 * policed the driver's own pointer: no wrapper, no overhead, no ABI guessing.
 * (The dlsym path and -lcuda linking are covered by the preload layer and the exports.)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "shim.h"

static void *to_hook(const char *symbol, void *real, int ver, cuuint64_t flags) {
    void *p = hk_preload_swap(&hk_shim_cuda, real);
    if (hk_log_debug()) {
        const char *as = "real";
        for (size_t i = 0; i < hk_shim_cuda.nhooks && p != real; i++)
            if (hk_shim_cuda.hooks[i].hook == p) as = hk_shim_cuda.hooks[i].name;
        hk_log("cuGetProcAddress(%s, %d, %#llx) -> %s%s", symbol, ver, (unsigned long long)flags,
               p != real ? "hook " : "", as);
    }
    return p;
}

HK_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status) {
    hk_preload_load(&hk_shim_cuda);
    if (!hk_real.cuGetProcAddress_v2) {
        if (!hk_real.cuGetProcAddress) return CUDA_ERROR_NOT_INITIALIZED;
        CUresult r = hk_real.cuGetProcAddress(symbol, pfn, ver, flags); /* pre-12.0 driver */
        if (status) *status = r == CUDA_SUCCESS ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        if (r == CUDA_SUCCESS && pfn && *pfn) *pfn = to_hook(symbol, *pfn, ver, flags);
        return r;
    }
    CUresult r = hk_real.cuGetProcAddress_v2(symbol, pfn, ver, flags, status);
    if (r == CUDA_SUCCESS && pfn && *pfn) *pfn = to_hook(symbol, *pfn, ver, flags);
    return r;
}

HK_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
    hk_preload_load(&hk_shim_cuda);
    CUresult r;
    if (hk_real.cuGetProcAddress)
        r = hk_real.cuGetProcAddress(symbol, pfn, ver, flags);
    else if (hk_real.cuGetProcAddress_v2)
        r = hk_real.cuGetProcAddress_v2(symbol, pfn, ver, flags, NULL);
    else
        return CUDA_ERROR_NOT_INITIALIZED;
    if (r == CUDA_SUCCESS && pfn && *pfn) *pfn = to_hook(symbol, *pfn, ver, flags);
    return r;
}
