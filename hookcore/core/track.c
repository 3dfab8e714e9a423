/* track.c -- process-local allocation table: (key, kind) -> (device, size, owner).
 *
 * Chained hash, 4096 buckets, one test-and-set spinlock per bucket held for a few instructions
 * (alloc/free are not the launch hot path). Nodes come from malloc and are recycled through a
 * small per-bucket free list. A forked child starts with an empty table (the parent's pointers
 * are not the child's to free).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define TRACK_BITS    12
#define TRACK_BUCKETS (1u << TRACK_BITS)

typedef struct track_node {
    uint64_t key;
    uint32_t kind;
    int32_t dev;
    uint64_t size;
    uint64_t owner; /* what the allocation dies with (a context), 0 = nothing */
    struct track_node *next;
} track_node;

typedef struct track_bucket {
    _Atomic int xlock; /* 1 = held */
    uint32_t nfree;
    track_node *head;
    track_node *free;
} track_bucket;

static track_bucket g_track[TRACK_BUCKETS];

static inline uint32_t bucket_of(uint64_t key, uint32_t kind) {
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> (64 - TRACK_BITS));
}

static inline void lock(track_bucket *b) {
    for (unsigned spins = 0; hk_atomic_exchange_acquire(&b->xlock, 1) != 0; spins++) {
        if (spins > 64) sched_yield();
    }
}

static inline void unlock(track_bucket *b) { hk_atomic_store_release(&b->xlock, 0); }

int hk_track_alloc(uint64_t key, uint32_t kind, int dev, uint64_t size) {
    return hk_track_alloc_owned(key, kind, dev, size, 0);
}

int hk_track_alloc_owned(uint64_t key, uint32_t kind, int dev, uint64_t size, uint64_t owner) {
    track_bucket *b = &g_track[bucket_of(key, kind)];
    lock(b);
    for (track_node *n = b->head; n; n = n->next) {
        if (n->key == key && n->kind == kind) {
            unlock(b);
            return HK_EEXIST;
        }
    }
    track_node *n = b->free;
    if (n) {
        b->free = n->next;
        b->nfree--;
    }
    unlock(b);
    if (n == NULL && (n = malloc(sizeof *n)) == NULL) return HK_ENOSPC;
    n->key = key;
    n->kind = kind;
    n->dev = dev;
    n->size = size;
    n->owner = owner;
    lock(b);
    for (track_node *m = b->head; m; m = m->next) { /* re-check: we dropped the lock to malloc */
        if (m->key == key && m->kind == kind) {
            n->next = b->free;
            b->free = n;
            b->nfree++;
            unlock(b);
            return HK_EEXIST;
        }
    }
    n->next = b->head;
    b->head = n;
    unlock(b);
    return HK_OK;
}

static int find(uint64_t key, uint32_t kind, int *dev, uint64_t *size, int remove) {
    track_bucket *b = &g_track[bucket_of(key, kind)];
    track_node *victim = NULL;
    lock(b);
    for (track_node **pn = &b->head; *pn; pn = &(*pn)->next) {
        track_node *n = *pn;
        if (n->key != key || n->kind != kind) continue;
        if (dev) *dev = n->dev;
        if (size) *size = n->size;
        if (remove) {
            *pn = n->next;
            if (b->nfree < 8) {
                n->next = b->free;
                b->free = n;
                b->nfree++;
            } else {
                victim = n;
            }
        }
        unlock(b);
        free(victim);
        return HK_OK;
    }
    unlock(b);
    return HK_ENOENT;
}

int hk_track_free(uint64_t key, uint32_t kind, int *dev, uint64_t *size) { return find(key, kind, dev, size, 1); }

int hk_track_lookup(uint64_t key, uint32_t kind, int *dev, uint64_t *size) { return find(key, kind, dev, size, 0); }

unsigned hk_track_drop_owner(uint64_t owner, uint32_t kind, void (*each)(int dev, uint64_t size)) {
    unsigned dropped = 0;
    if (owner == 0) return 0;
    for (uint32_t i = 0; i < TRACK_BUCKETS; i++) {
        track_bucket *b = &g_track[i];
        track_node *gone = NULL;
        lock(b);
        for (track_node **pn = &b->head; *pn;) {
            track_node *n = *pn;
            if (n->owner != owner || n->kind != kind) {
                pn = &n->next;
                continue;
            }
            *pn = n->next;
            n->next = gone;
            gone = n;
        }
        unlock(b);
        while (gone) { /* outside the lock: `each` may take others (the ledger's) */
            track_node *n = gone;
            gone = n->next;
            each(n->dev, n->size);
            free(n);
            dropped++;
        }
    }
    return dropped;
}

/* In a forked child: forget everything (nodes are leaked on purpose: a parent thread may have
   been inside malloc or held a bucket lock when fork() ran). */
void hk__track_atfork_child(void) {
    for (uint32_t i = 0; i < TRACK_BUCKETS; i++) {
        hk_atomic_store_relaxed(&g_track[i].xlock, 0);
        g_track[i].head = NULL;
        g_track[i].free = NULL;
        g_track[i].nfree = 0;
    }
}
