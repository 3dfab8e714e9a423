/* procaddress.c - hipGetProcAddress: how a program (or a framework's dispatch) asks the HIP runtime
 * for an entry point by name. The runtime may answer from its own tables rather than through dlsym
 * (which the preload layer already answers with the hooks), so the shim swaps the pointer it gets
 * for the interposer of the same function (hk_preload_swap: the real pointers resolved once from the
 * runtime). A function that is not policed gets the runtime's own pointer: no wrapper.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "hip.h"

HK_EXPORT hipError_t hipGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags, void *status) {
    HK_HIP_REAL(hk_hip.hipGetProcAddress);
    hipError_t r = HK_HIP_NESTED(hk_hip.hipGetProcAddress(symbol, pfn, version, flags, status));
    if (r == hipSuccess && pfn && *pfn) {
        void *got = *pfn;
        *pfn = hk_preload_swap(&hk_shim_hip, got);
        if (hk_log_debug())
            hk_log("hipGetProcAddress(%s, %d, %#llx) -> %s", symbol ? symbol : "(null)", version,
                   (unsigned long long)flags, *pfn != got ? "hook" : "real");
    }
    return r;
}
