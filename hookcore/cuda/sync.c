/* sync.c - the calls with which a thread waits for the device: its batch's deferred end event is
 * recorded first (core/meter.h, "Deferred end events").
 *
 * A launch onto a default stream leaves its batch's end event unrecorded until the batch is due to
 * close; a thread that then waits for the device (synchronize, or polls with a query) has submitted
 * the batch's last work, so the end is recorded here, right behind it, and the time the thread
 * waits stays outside the window. Without a compute limit each costs one load and one branch.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "gate.h"

#define FLUSHED(real_fn, call)                                        \
    do {                                                              \
        if (HK_UNLIKELY(!real_fn)) return CUDA_ERROR_NOT_INITIALIZED; \
        if (!fast_path()) hk_meter_flush();                           \
        return call;                                                  \
    } while (0)

HK_EXPORT CUresult cuStreamSynchronize(CUstream s) {
    FLUSHED(hk_real.cuStreamSynchronize, hk_real.cuStreamSynchronize(s));
}
HK_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) {
    FLUSHED(hk_real.cuStreamSynchronize_ptsz, hk_real.cuStreamSynchronize_ptsz(s));
}
HK_EXPORT CUresult cuStreamQuery(CUstream s) { FLUSHED(hk_real.cuStreamQuery, hk_real.cuStreamQuery(s)); }
HK_EXPORT CUresult cuStreamQuery_ptsz(CUstream s) {
    FLUSHED(hk_real.cuStreamQuery_ptsz, hk_real.cuStreamQuery_ptsz(s));
}
HK_EXPORT CUresult cuCtxSynchronize(void) { FLUSHED(hk_real.cuCtxSynchronize, hk_real.cuCtxSynchronize()); }
HK_EXPORT CUresult cuEventSynchronize(CUevent e) { FLUSHED(hk_real.cuEventSynchronize, hk_real.cuEventSynchronize(e)); }
HK_EXPORT CUresult cuEventQuery(CUevent e) { FLUSHED(hk_real.cuEventQuery, hk_real.cuEventQuery(e)); }
