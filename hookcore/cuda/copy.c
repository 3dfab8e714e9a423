/* copy.c - copies (host-to-device, device-to-host, device-to-device, peer, 2D/3D; synchronous,
 * asynchronous and per-thread-stream variants) and memsets through the compute limiter.
 *
 * A copy moves bytes with the device's copy engines or SMs; its device time is what the share
 * is of, exactly as for a kernel. So each entry point is metered like a launch (gate.h): the
 * meter records its events around the call on the stream the copy runs on and charges the
 * measured time, and a tenant in debt waits before its next copy as before its next kernel.
 * Before this a process at a 30% share could copy at full memory bandwidth (measured on the
 * H200: 1 GiB device-to-device copy_ at 100% of native with a 30% share).
 *
 * Synchronous copies run on the legacy default stream (the _ptds variants on the per-thread
 * stream): the events go there and the end event completes when the copy has, so the charge is
 * its device time, not the host's wait. A peer copy is charged to the calling context's device.
 * Copy-engine time counts like SM time: a claim that overlaps copies with kernels on other
 * streams is charged for both. A copy or memset is charged its whole device time, never the
 * context's SM fraction that kernels are charged at (an MPS client's share of the SMs does not
 * partition the copy engines); it goes in a batch of its own (HK_WORK_COPY).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "gate.h"

/* Signature of one copy: what it was and how much it moved. */
#define HK_COPY_SIG(kind, bytes) (((uint64_t)(kind) << 56) ^ ((uint64_t)(bytes) * 0x9e3779b97f4a7c15ULL))

#define HK_COPY_DEF(name, params, args, stream, bytes, kind)                                           \
    HK_EXPORT CUresult name params {                                                                   \
        GATED_WORK(hk_real.name, (stream), HK_COPY_SIG(kind, bytes), HK_WORK_COPY, hk_real.name args); \
    }
HK_COPIES(HK_COPY_DEF)
#undef HK_COPY_DEF
