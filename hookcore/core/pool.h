/* pool.h - the books of memory pools that keep freed memory.
 *
 * A stream-ordered allocator's pool with a release threshold keeps up to that much freed memory
 * reserved on the device (the default pool's threshold is 0: it keeps nothing). Its freed
 * allocations therefore stay charged, as the pool's "retained" bytes, up to the threshold; the
 * pool's next allocations are charged against what it retains first, so reuse costs nothing.
 * Lowering the threshold, trimming the pool, destroying it and resetting its device give the
 * excess back.
 *
 * Pools are keyed by the API's pool handle (a pointer-sized value, never 0). The shim resolves the
 * pool of every stream-ordered allocation when it is made and remembers it (HK_KIND_POOLPTR), so
 * an allocation made before its pool was given a threshold is still kept by the pool when freed.
 * At most HK_MAX_POOLS pools keep freed memory at once: a threshold for one more is refused before
 * the API sees it (a pool keeping memory the books do not follow would hold memory past the quota).
 * Lock free: a free, an allocation and a trim of one pool race on a CAS of its retained bytes.
 */
#ifndef HOOKCORE_POOL_H
#define HOOKCORE_POOL_H
#include <stdint.h>

#define HK_MAX_POOLS    256
#define HK_KIND_POOLPTR 11u /* hk_track: a stream-ordered allocation -> its pool's key | 1 */

typedef struct hk_pool hk_pool;

/* Some pool keeps freed memory (a threshold above 0 was set since the process started). */
int hk_pool_any(void);
/* The books of the pool keyed `key` if it keeps freed memory now, else NULL. */
hk_pool *hk_pool_retaining(uintptr_t key);
/* Take up to `want` bytes of what the pool retains (already charged) for a new allocation. */
uint64_t hk_pool_take(hk_pool *p, uint64_t want);
/* `bytes` charged on ledger device `dev` were freed into the pool (dev < 0: bytes taken from it by
   an allocation that then failed, charged where the pool's are): kept as retained memory up to the
   threshold, the rest released. */
void hk_pool_keep(hk_pool *p, int dev, uint64_t bytes);
/* Before the API is asked to give pool `key` a release threshold of `threshold` bytes (read once by
   the caller, which passes the API that copy): HK_OK with *books (made now for a threshold above 0;
   NULL: none needed), or HK_ENOSPC when no more pools can be followed: refuse the call. */
int hk_pool_threshold_begin(uintptr_t key, uint64_t threshold, hk_pool **books);
/* After: the API `applied` it (retained memory above the threshold is released), or refused it
   (books made for it are dropped again). */
void hk_pool_threshold_end(hk_pool *books, uint64_t threshold, int applied);
/* The API trimmed pool `key` to `keep` bytes: retained memory above that is released. */
void hk_pool_trim(uintptr_t key, uint64_t keep);
/* The API destroyed pool `key`: everything it retained is released, its books freed. */
void hk_pool_destroyed(uintptr_t key);
/* Ledger device `dev` was reset: every pool's memory on it went, so what they retained is
   released (their thresholds stay: a pool that outlives the reset keeps freed memory again). */
void hk_pool_device_gone(int dev);

#endif
