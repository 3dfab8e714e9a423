/* event_pairs.c - the meter's timing events: the calls on them, their pairs, and the context
 * destructions that can take them (the design is in event_pairs.h). One mutex guards the pool and the destruction records; it is
 * never held across a driver call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "event_pairs.h"

#include <pthread.h>
#include <time.h>

#include "limiter.h"

#define HK_POOL    64
#define HK_VICTIMS 16

static const hk_meter_ops *g_ops;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static hk_pair g_pool[HK_POOL];
static unsigned g_npool;
static unsigned g_pool_epoch;         /* the epoch the pool was last swept in */
static _Atomic unsigned g_epoch;      /* destructions begun */
static _Atomic int g_going;           /* destructions in progress */
static _Atomic int64_t g_gone_end_ns; /* when the last one that took a context ended */
/* The context each of the last HK_VICTIMS destructions may take, by epoch: a handle,
   HK_METER_ANY_CONTEXT (not known which) or NULL (it took none after all). */
static void *g_victim[HK_VICTIMS];

void hk_pairs_use(const hk_meter_ops *ops) { g_ops = ops; }

/* ------------------------------------------------------------------------------------------- */
/* Event calls, relaxed while a capture is in progress                                          */

_Atomic int hk__captures;

static int relax(void) {
    if (hk_likely(hk_atomic_load_relaxed(&hk__captures) == 0) || !g_ops->capture_mode) return -1;
    return g_ops->capture_mode(HK_CAPTURE_MODE_RELAXED);
}
static void unrelax(int mode) {
    if (mode >= 0) g_ops->capture_mode(mode);
}
int hk_ev_record(void *ev, void *s) {
    int m = relax(), r = g_ops->event_record(ev, s);
    unrelax(m);
    return r;
}
int hk_ev_record_in(void *ev, void *s, void *ctx) {
    int m = relax(), r = g_ops->event_record_in(ev, s, ctx);
    unrelax(m);
    return r;
}
int hk_ev_done(void *ev) {
    int m = relax(), r = g_ops->event_done(ev);
    unrelax(m);
    return r;
}
void hk_ev_wait(void *ev) {
    int m = relax();
    g_ops->event_wait(ev);
    unrelax(m);
}
int hk_ev_elapsed_ns(void *a, void *b, int64_t *ns) {
    int m = relax(), r = g_ops->event_elapsed_ns(a, b, ns);
    unrelax(m);
    return r;
}

void hk_meter_capture_begun(int ok) {
    if (ok) hk_atomic_add_acq_rel(&hk__captures, 1);
}

void hk_meter_capture_ended(int was_capturing) {
    if (!was_capturing) return;
    int c = hk_atomic_load_acquire(&hk__captures);
    while (c > 0 && !hk_atomic_cas_weak_acq_rel(&hk__captures, &c, c - 1)) {}
}

unsigned hk_ctx_epoch(void) { return hk_atomic_load_acquire(&g_epoch); }

static int gone_locked(void *ctx, unsigned since) {
    unsigned now = hk_atomic_load_acquire(&g_epoch);
    if (now == since) return 0;
    if (now - since >= HK_VICTIMS) return 1; /* too many since to tell */
    for (unsigned e = since + 1; e != now + 1; e++) {
        void *v = g_victim[e % HK_VICTIMS];
        if (v == HK_METER_ANY_CONTEXT || v == ctx) return 1;
    }
    return 0;
}

int hk_ctx_gone_since(void *ctx, unsigned since) {
    if (hk_likely(hk_atomic_load_acquire(&g_epoch) == since)) return 0;
    pthread_mutex_lock(&g_lock);
    int r = gone_locked(ctx, since);
    pthread_mutex_unlock(&g_lock);
    return r;
}

unsigned hk_ctx_going(void *ctx) {
    pthread_mutex_lock(&g_lock);
    unsigned e = hk_atomic_load_relaxed(&g_epoch) + 1;
    g_victim[e % HK_VICTIMS] = ctx ? ctx : HK_METER_ANY_CONTEXT;
    hk_atomic_add_acq_rel(&g_going, 1);
    hk_atomic_store_release(&g_epoch, e);
    pthread_mutex_unlock(&g_lock);
    return e;
}

void hk_ctx_gone(unsigned token, int went) {
    pthread_mutex_lock(&g_lock);
    if (!went && hk_atomic_load_relaxed(&g_epoch) - token < HK_VICTIMS) g_victim[token % HK_VICTIMS] = NULL;
    if (went) hk_atomic_store_release(&g_gone_end_ns, hk_limiter_now_ns());
    hk_atomic_add_acq_rel(&g_going, -1);
    pthread_mutex_unlock(&g_lock);
}

int64_t hk_ctx_gone_end_ns(void) {
    while (hk_atomic_load_acquire(&g_going) > 0) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    return hk_atomic_load_acquire(&g_gone_end_ns);
}

/* Pooled pairs of a context that went since they were stamped are dropped, the others restamped:
   once per epoch (g_lock held). */
static void sweep_locked(unsigned epoch) {
    if (hk_likely(g_pool_epoch == epoch)) return;
    for (unsigned i = g_npool; i-- > 0;) {
        if (gone_locked(g_pool[i].ctx, g_pool[i].epoch))
            g_pool[i] = g_pool[--g_npool];
        else
            g_pool[i].epoch = epoch;
    }
    g_pool_epoch = epoch;
}

int hk_pair_get(void *ctx, hk_pair *out) {
    unsigned epoch = hk_atomic_load_acquire(&g_epoch);
    pthread_mutex_lock(&g_lock);
    sweep_locked(epoch);
    for (unsigned i = g_npool; i-- > 0;) {
        if (g_pool[i].ctx == ctx) {
            *out = g_pool[i];
            g_pool[i] = g_pool[--g_npool];
            pthread_mutex_unlock(&g_lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&g_lock);
    out->ctx = ctx;
    out->epoch = epoch;
    if (g_ops->event_create(&out->start) != 0) return -1;
    if (g_ops->event_create(&out->end) != 0) {
        g_ops->event_destroy(out->start);
        return -1;
    }
    return 0;
}

void hk_pair_give_up(const hk_pair *p) {
    pthread_mutex_lock(&g_lock);
    for (unsigned i = g_npool; i-- > 0;)
        if (g_pool[i].ctx == p->ctx) g_pool[i] = g_pool[--g_npool];
    pthread_mutex_unlock(&g_lock);
}

void hk_pair_put(const hk_pair *p) {
    pthread_mutex_lock(&g_lock);
    if (gone_locked(p->ctx, p->epoch)) { /* taken with its context */
        pthread_mutex_unlock(&g_lock);
        return;
    }
    if (g_npool < HK_POOL) {
        g_pool[g_npool] = *p;
        g_pool[g_npool++].epoch = hk_atomic_load_relaxed(&g_epoch);
        pthread_mutex_unlock(&g_lock);
        return;
    }
    pthread_mutex_unlock(&g_lock);
    g_ops->event_destroy(p->start);
    g_ops->event_destroy(p->end);
}

void hk_pairs_atfork_child(void) {
    /* The parent's events are not usable here: forgotten (leaked, by design). */
    pthread_mutex_init(&g_lock, NULL);
    g_npool = 0;
    hk_atomic_store_relaxed(&hk__captures, 0);
    hk_atomic_store_relaxed(&g_going, 0); /* a destruction in another thread of the parent is not ours */
}
