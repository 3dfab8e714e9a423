/* atomic.h -- the only way hookcore code touches an atomic: the memory order is in the name.
 *
 * As in mimalloc (mi_atomic_load_acquire), spelling the order out at every call site shows which
 * orders are in use and why; tests/hook/test_atomics_style.py rejects the bare C11 forms
 * (atomic_load, atomic_fetch_add, ..._explicit), GCC's __atomic_* / __sync_* builtins and
 * atomic_flag anywhere else in hookcore's C sources.
 *
 * Every operation works on any _Atomic integer or pointer object (they are macros over C11
 * <stdatomic.h>). add/sub/exchange return the previous value. cas_* take a pointer to the expected
 * value, update it on failure, and return true on success; the failure order is the strongest
 * order the success order allows (acq_rel -> acquire, release -> relaxed).
 */
#ifndef HOOKCORE_ATOMIC_H
#define HOOKCORE_ATOMIC_H

#include <stdatomic.h>
#include <stdbool.h>

#define hk_atomic_load_relaxed(p) atomic_load_explicit((p), memory_order_relaxed)
#define hk_atomic_load_acquire(p) atomic_load_explicit((p), memory_order_acquire)
#define hk_atomic_load_seq_cst(p) atomic_load_explicit((p), memory_order_seq_cst)

#define hk_atomic_store_relaxed(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define hk_atomic_store_release(p, v) atomic_store_explicit((p), (v), memory_order_release)
#define hk_atomic_store_seq_cst(p, v) atomic_store_explicit((p), (v), memory_order_seq_cst)

#define hk_atomic_add_relaxed(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
#define hk_atomic_add_acq_rel(p, v) atomic_fetch_add_explicit((p), (v), memory_order_acq_rel)
#define hk_atomic_add_seq_cst(p, v) atomic_fetch_add_explicit((p), (v), memory_order_seq_cst)
#define hk_atomic_sub_relaxed(p, v) atomic_fetch_sub_explicit((p), (v), memory_order_relaxed)
#define hk_atomic_sub_acq_rel(p, v) atomic_fetch_sub_explicit((p), (v), memory_order_acq_rel)
#define hk_atomic_sub_seq_cst(p, v) atomic_fetch_sub_explicit((p), (v), memory_order_seq_cst)

#define hk_atomic_exchange_acquire(p, v) atomic_exchange_explicit((p), (v), memory_order_acquire)
#define hk_atomic_exchange_acq_rel(p, v) atomic_exchange_explicit((p), (v), memory_order_acq_rel)

#define hk_atomic_cas_weak_relaxed(p, e, d) \
    atomic_compare_exchange_weak_explicit((p), (e), (d), memory_order_relaxed, memory_order_relaxed)
#define hk_atomic_cas_weak_release(p, e, d) \
    atomic_compare_exchange_weak_explicit((p), (e), (d), memory_order_release, memory_order_relaxed)
#define hk_atomic_cas_weak_acq_rel(p, e, d) \
    atomic_compare_exchange_weak_explicit((p), (e), (d), memory_order_acq_rel, memory_order_acquire)
#define hk_atomic_cas_weak_seq_cst(p, e, d) \
    atomic_compare_exchange_weak_explicit((p), (e), (d), memory_order_seq_cst, memory_order_seq_cst)
#define hk_atomic_cas_strong_acq_rel(p, e, d) \
    atomic_compare_exchange_strong_explicit((p), (e), (d), memory_order_acq_rel, memory_order_acquire)
#define hk_atomic_cas_strong_seq_cst(p, e, d) \
    atomic_compare_exchange_strong_explicit((p), (e), (d), memory_order_seq_cst, memory_order_seq_cst)

#endif /* HOOKCORE_ATOMIC_H */
