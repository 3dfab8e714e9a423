/* alloc.h - the one ladder every device-memory allocation of the CUDA shim climbs (memory.c,
 * mempool.c, vmm.c; the rungs are in alloc.c):
 *
 *   admit   the ledger device (the current context's, or the one an ordinal names), the process's
 *           context on it (context.c), then the charge reserved on the claim's ledger
 *           (hk_mem_reserve: lock free, refused over the quota);
 *   call    the real allocator;
 *   settle  the call failed: the charge goes back; it succeeded: remember key -> (device, charge),
 *           so the free knows what to give back, or, when that cannot be remembered, undo the
 *           allocation and answer CUDA_ERROR_OUT_OF_MEMORY.
 * Frees call the driver first and give back only on success (hk_alloc_forget).
 *
 * An interposer whose ladder has no step of its own is HK_ALLOC(...); the others (pitch, pools,
 * graph memory, VMM handles) climb the rungs with HK_ALLOC_CALL and HK_ALLOC_KEEP.
 */
#ifndef HOOKCORE_CUDA_ALLOC_H
#define HOOKCORE_CUDA_ALLOC_H

#include "shim.h"

#define HK_MIB2 ((uint64_t)2 << 20)

static inline uint64_t hk_round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* What an allocation of `size` bytes is charged: the size rounded up to 512 B, or to 2 MiB from
   2 MiB up (the driver's page size for large allocations). */
static inline uint64_t hk_charge_of(size_t size) {
    return size >= HK_MIB2 ? hk_round_up(size, HK_MIB2) : hk_round_up(size, 512);
}

/* One allocation on its way up the ladder. */
typedef struct hk_alloc {
    int dev;         /* the ledger device charged */
    int skip;        /* 1: nothing is charged (dormant, or no current context: the call says so) */
    uint64_t charge; /* bytes reserved */
    uint64_t ctx;    /* hk_alloc_admit: the current context, whose destruction frees a device pointer */
} hk_alloc;

/* An allocation that charges nothing (a graph node that allocates no memory). */
#define HK_ALLOC_NONE {.dev = -1, .skip = 1, .charge = 0, .ctx = 0}

/* Admit `charge` on the current context's device: CUDA_SUCCESS (with a->skip set when there is
   nothing to charge: dormant, or no current context, which the real call then reports),
   CUDA_ERROR_OUT_OF_MEMORY over the quota or on a GPU outside the claim, CUDA_ERROR_NOT_INITIALIZED
   when failed closed. */
CUresult hk_alloc_admit(hk_alloc *a, uint64_t charge) HK_HIDDEN;
/* The first rung alone, for a caller that found the device itself: ledger device `ldev` (negative:
   a GPU outside the claim, CUDA_ERROR_OUT_OF_MEMORY) and the process's context on it. */
CUresult hk_alloc_on(hk_alloc *a, int ldev) HK_HIDDEN;
/* The second rung: reserve `charge` on a->dev (CUDA_ERROR_OUT_OF_MEMORY over the quota). */
CUresult hk_alloc_reserve(hk_alloc *a, uint64_t charge) HK_HIDDEN;
/* After the real call answered `r`: a failed call gives the charge back. Returns `r`. */
CUresult hk_alloc_called(hk_alloc *a, CUresult r) HK_HIDDEN;
/* Remember a successful allocation as key -> (a->dev, a->charge) in the table `kind`. 0, or
   nonzero when it cannot be remembered: the charge is then given back and the caller undoes the
   allocation (it could never be accounted for). */
int hk_alloc_keep(const hk_alloc *a, uint64_t key, uint32_t kind) HK_HIDDEN;
/* A freed key: give back what it was charged (nothing when it is not remembered). */
void hk_alloc_forget(uint64_t key, uint32_t kind) HK_HIDDEN;
/* Context `ctx` was destroyed (or a primary context reset, or released to nothing): the device
   pointers allocated while it was current (cuMemAlloc, pitch, managed) went with it, and their
   charges go back. Called only after the driver said the context went (CUDA_SUCCESS). */
void hk_alloc_context_gone(void *ctx) HK_HIDDEN;

/* mempool.c: a freed device pointer's charge goes back to the quota, or to its pool's retained
   memory when the pool keeps freed memory. */
void hk_alloc_forget_ptr(CUdeviceptr p) HK_HIDDEN;

/* Rung "call": make the call; unless it allocated something charged, return its answer. */
#define HK_ALLOC_CALL(a, call)                          \
    do {                                                \
        CUresult r_ = hk_alloc_called((a), (call));     \
        if ((a)->skip || r_ != CUDA_SUCCESS) return r_; \
    } while (0)

/* Rung "settle": remember the allocation as `key` in `kind`, or undo it with `undo` and answer
   CUDA_ERROR_OUT_OF_MEMORY. */
#define HK_ALLOC_KEEP(a, key, kind, undo)        \
    do {                                         \
        if (hk_alloc_keep((a), (key), (kind))) { \
            undo;                                \
            return CUDA_ERROR_OUT_OF_MEMORY;     \
        }                                        \
    } while (0)

/* The whole ladder in an interposer: admit `charge` on the current context's device, `call`,
   remember `key` in `kind` (or `undo`), and return. */
#define HK_ALLOC(charge, call, key, kind, undo)       \
    do {                                              \
        hk_alloc a_;                                  \
        CUresult ra_ = hk_alloc_admit(&a_, (charge)); \
        if (ra_ != CUDA_SUCCESS) return ra_;          \
        HK_ALLOC_CALL(&a_, call);                     \
        HK_ALLOC_KEEP(&a_, key, kind, undo);          \
        return CUDA_SUCCESS;                          \
    } while (0)

#endif /* HOOKCORE_CUDA_ALLOC_H */
