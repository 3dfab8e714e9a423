/* meter.c - batches of device work, timed with the API's events, charged to the limiter.
 * (The design is in meter.h.) Process-local state: the pending ring, an event pool and the
 * per-signature cost estimates, under one mutex that is never held across a driver call that
 * can block. The claim-wide state is the limiter's bucket in the ledger.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "meter.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "elastic.h"
#include "event_pairs.h"
#include "internal.h"
#include "limiter.h"
#include "priority.h"

#define HK_BATCH_MAX_SUBMITS 32
#define HK_BATCH_MAX_AGE_NS  2000000LL
#define HK_BATCH_GAP_NS      100000LL
#define HK_BATCH_DEVICE_NS   500000LL /* a batch closes once its work is estimated at 0.5 ms of device time */
#define HK_METER_MAX_PENDING 4
/* finished batches are looked for at most every 20 us per thread (one event query each: a
 * launch-bound loop paid one per launch) */
#define HK_POLL_NS 20000LL
#define HK_RING    64
#define HK_EST     512

struct hk_meter_batch {
    int open;
    int ldev;
    int work;         /* HK_WORK_SM or HK_WORK_COPY: what opened it */
    uint32_t ctx_ppm; /* its context's SM fraction (sm_share_ppm) */
    uint32_t sm_ppm;  /* the SM fraction it is charged at: ctx_ppm for SM work, HK_SM_PPM_FULL for copies */
    uint32_t ratio;   /* strict cap: the clock ratio when it opened (0 = not strict or unknown) */
    uint64_t sig;     /* hash of what the batch submitted */
    void *stream;
    void *ctx;
    hk_pair ev;
    unsigned count;
    int64_t opened_ns, last_ns;
    unsigned open_epoch; /* the destruction epoch it opened in (event_pairs.h) */
    int untimed;         /* an end record failed: charged its host span at the close */
    int defer;           /* the submission in progress may leave the end event unrecorded (HK_WORK_DEFER) */
    int shared;          /* on a stream another thread may destroy or capture: listed in g_shared */
    /* Submissions counted, and how many of them the end event's last record is behind (a deferred
       tail when they differ). Atomic: another thread records a shared batch's end (flush_stream). */
    _Atomic unsigned xsubmitted, xcovered;
};

static const hk_meter_ops *g_ops;
static _Atomic int g_ops_state; /* 0 not set up, 1 usable, 2 unusable (logged) */
static __thread hk_meter_batch t_batch;
static __thread int64_t t_poll_ns; /* when this thread last looked for finished batches */
static pthread_key_t g_exit_key;   /* closes a thread's open batch when the thread exits */
static pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    hk_pair ev;
    int ldev;
    uint32_t sm_ppm;
    uint32_t ratio; /* the clock ratio when the batch opened */
    uint32_t count; /* its submissions */
    uint64_t sig;
    int64_t opened_ns, last_ns; /* on the host's clock: the charge if its events cannot be read */
    unsigned open_epoch;
} g_pending[HK_RING];
static unsigned g_head;
static _Atomic unsigned g_npending; /* written under g_lock; read without it where a stale count does no harm */
static _Atomic int g_late;          /* batches closed by a host pause with their end unrecorded */
static _Atomic uint64_t g_batches;
static _Atomic int64_t g_charged;

/* Lowest cost seen per batch signature (open addressing, overwrite on collision). */
static struct {
    uint64_t sig;
    int64_t ns;
} g_est[HK_EST];
static _Atomic int g_charge_elapsed = -1; /* HOOKCORE_LIMITER_CHARGE=elapsed */

static void sleep_ns(int64_t ns) {
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    nanosleep(&ts, NULL);
}

static hk_limiter g_lim[HK_MAX_DEVICES];
static hk_elastic g_elastic[HK_MAX_DEVICES];
/* Estimated device time of one submission per device (EWMA of charged batches' estimate / count; 0 =
   none yet): a batch closes at about HK_BATCH_DEVICE_NS of work, well inside a time slice, so that
   under contention most batches run without another tenant's slice in their window. */
static _Atomic int64_t g_unit_ns[HK_MAX_DEVICES]; /* strict cap: the clock elasticity of this process's work (g_lock) */
static _Atomic int g_lim_state[HK_MAX_DEVICES];   /* 0 unknown, 1 attached, 2 unlimited */

void hk_meter_setup(const hk_meter_ops *ops) {
    int expect = 0;
    if (!hk_atomic_cas_strong_acq_rel(&g_ops_state, &expect, 3)) return; /* 3: being set up */
    int ok = ops && ops->current && ops->capturing && ops->event_create && ops->event_destroy && ops->event_record &&
             ops->event_done && ops->event_wait && ops->event_elapsed_ns;
    g_ops = ops;
    hk_pairs_use(ops);
    hk_atomic_store_release(&g_ops_state, ok ? 1 : 2);
}

/* The charge of a batch of signature `sig` that took `elapsed`: the contention estimate, or `elapsed`
   itself when the process is alone on the device (`alone`; the estimate still learns). */
static int64_t charge_for(uint64_t sig, int64_t elapsed, int alone) {
    int ce = hk_atomic_load_relaxed(&g_charge_elapsed);
    if (ce < 0) {
        const char *v = getenv("HOOKCORE_LIMITER_CHARGE");
        ce = v && strcmp(v, "elapsed") == 0;
        hk_atomic_store_relaxed(&g_charge_elapsed, ce);
    }
    if (ce || sig == 0) return elapsed;
    pthread_mutex_lock(&g_lock);
    unsigned i = (unsigned)(sig ^ (sig >> 29)) % HK_EST;
    int64_t c = elapsed;
    if (g_est[i].sig == sig) {
        int64_t grown = g_est[i].ns + g_est[i].ns / 512 + 1;
        if (grown < c) c = grown;
    }
    g_est[i].sig = sig;
    g_est[i].ns = c;
    pthread_mutex_unlock(&g_lock);
    return alone ? elapsed : c;
}

/* The device's priority board when the claim takes part in priorities (hk_priority), else NULL. */
static hk_board g_board[HK_MAX_DEVICES];
static _Atomic int g_board_state[HK_MAX_DEVICES]; /* 0 unknown, 1 open, 2 none */

static hk_board *board_for(int ldev) {
    if (ldev < 0 || ldev >= HK_MAX_DEVICES) return NULL;
    int st = hk_atomic_load_acquire(&g_board_state[ldev]);
    if (hk_likely(st != 0)) return st == 1 ? &g_board[ldev] : NULL;
    pthread_mutex_lock(&g_lock);
    if (hk_atomic_load_relaxed(&g_board_state[ldev]) == 0) {
        char path[HK_PATH_MAX];
        uint32_t p = hk_priority(ldev, path, sizeof path);
        int ok = p != HK_PRIORITY_UNSET && hk_board_open(&g_board[ldev], path, p == HK_PRIORITY_HIGH) == 0;
        hk_atomic_store_release(&g_board_state[ldev], ok ? 1 : 2);
    }
    pthread_mutex_unlock(&g_lock);
    return hk_atomic_load_acquire(&g_board_state[ldev]) == 1 ? &g_board[ldev] : NULL;
}

static hk_limiter *limiter_for(int ldev) {
    if (ldev < 0 || ldev >= HK_MAX_DEVICES) return NULL;
    int st = hk_atomic_load_acquire(&g_lim_state[ldev]);
    if (hk_likely(st == 1)) return &g_lim[ldev];
    if (st == 2) return NULL;
    pthread_mutex_lock(&g_lock);
    if (hk_atomic_load_relaxed(&g_lim_state[ldev]) == 0) {
        hk_limiter_attach(&g_lim[ldev], hk_limiter_area(ldev), hk_sm_limit(ldev));
        g_lim[ldev].strict = hk_compute_strict(ldev);
        hk_elastic_init(&g_elastic[ldev], hk_compute_elasticity_milli(ldev), !hk_compute_elasticity_given(ldev));
        hk_atomic_store_release(&g_lim_state[ldev], g_lim[ldev].shared ? 1 : 2);
    }
    pthread_mutex_unlock(&g_lock);
    return hk_atomic_load_acquire(&g_lim_state[ldev]) == 1 ? &g_lim[ldev] : NULL;
}

/* The charge of a finished batch: the estimate x its SM fraction, x the clock factor under a strict
   cap (hk_limiter_cost). Under a strict cap the batch is first priced at the full-load clock (its
   device time x the factor the claim's learned elasticity gives for the clock now, elastic.h), and
   the contention estimate compares those prices, so batches seen at different clocks compare. */
static int64_t charge_batch(hk_limiter *lim, int ldev, uint64_t sig, uint32_t sm_ppm, uint32_t opened, int64_t elapsed,
                            int64_t *work_ns) {
    int alone = g_ops->device_alone ? g_ops->device_alone(ldev) == 1 : 0;
    uint32_t ratio = lim->strict && g_ops->clock_ratio_milli ? g_ops->clock_ratio_milli(ldev) : 0;
    if (!ratio) return hk_limiter_charge_work(lim, *work_ns = charge_for(sig, elapsed, alone), sm_ppm, 0);
    /* The clock when the batch opened and now: a batch that saw it move (by more than 2%) is charged
       at the mean of the two and teaches nothing (which clock its time belongs to is unknown). */
    int steady = opened && (opened > ratio ? opened - ratio : ratio - opened) * 50 <= ratio;
    if (opened) ratio = (ratio + opened + 1) / 2;
    uint32_t x = (uint32_t)(1000000u / ratio); /* f_full / f, x1000 */
    pthread_mutex_lock(&g_lock);
    hk_elastic *e = &g_elastic[ldev];
    if (steady) hk_elastic_observe(e, sig, elapsed, x);
    uint32_t factor = hk_elastic_factor_milli(e, x), phi = e->phi_milli;
    int fitted = e->fitted;
    pthread_mutex_unlock(&g_lock);
    int64_t full = hk_limiter_cost(elapsed, HK_SM_PPM_FULL, factor); /* its price at the full-load clock */
    int64_t est = charge_for(sig, full, alone) * 1000 / factor;      /* as device time at this clock */
    *work_ns = est;
    hk_limiter_note_clock(lim, factor, phi, fitted);
    return hk_limiter_charge_work(lim, est, sm_ppm, factor);
}

/* A batch whose events cannot be read (its context went, or a record failed) is charged its span on
   the host's clock: from its opening to `end_ns` or, if its context went (`gone`), to the end of the
   last destruction, once none is in progress (a destruction waits for its context's work), whichever
   is later. The work ran inside that span; it is charged in full (no contention estimate, nothing
   learnt). */
static void charge_span(int ldev, uint32_t sm_ppm, int64_t opened_ns, int64_t end_ns, int gone) {
    if (gone) {
        int64_t gone_end = hk_ctx_gone_end_ns();
        if (gone_end > end_ns) end_ns = gone_end;
    }
    hk_limiter *lim = limiter_for(ldev);
    int64_t span = end_ns - opened_ns;
    if (!lim || span <= 0) return;
    hk_limiter_note_elapsed(lim, span);
    hk_atomic_add_relaxed(&g_charged, hk_limiter_charge_work(lim, span, sm_ppm, 0));
    hk_atomic_add_relaxed(&g_batches, 1);
}

/* Charge the oldest closed batch if it is done (block = 0) or after waiting for it (block = 1).
   Returns 1 if one was charged, 0 if none was pending (or, non-blocking, not yet done). */
static int collect_one(int block) {
    pthread_mutex_lock(&g_lock);
    if (hk_atomic_load_relaxed(&g_npending) == 0) {
        pthread_mutex_unlock(&g_lock);
        return 0;
    }
    unsigned i = g_head;
    /* a batch of a context destroyed since it opened: its events are not touched */
    int gone = hk_ctx_gone_since(g_pending[i].ev.ctx, g_pending[i].open_epoch);
    if (!gone && !block && !hk_ev_done(g_pending[i].ev.end)) {
        pthread_mutex_unlock(&g_lock);
        return 0;
    }
    hk_pair ev = g_pending[i].ev;
    int ldev = g_pending[i].ldev;
    uint32_t sm_ppm = g_pending[i].sm_ppm, opened = g_pending[i].ratio, count = g_pending[i].count;
    uint64_t sig = g_pending[i].sig;
    int64_t opened_ns = g_pending[i].opened_ns, last_ns = g_pending[i].last_ns;
    g_head = (g_head + 1) % HK_RING;
    hk_atomic_store_relaxed(&g_npending, hk_atomic_load_relaxed(&g_npending) - 1);
    pthread_mutex_unlock(&g_lock);
    if (block && !gone) hk_ev_wait(ev.end);
    int64_t ns = 0;
    hk_limiter *lim = limiter_for(ldev);
    if (gone) {
        charge_span(ldev, sm_ppm, opened_ns, last_ns, 1);
        return 1; /* its pair went with its context */
    }
    if (!lim) {
    } else if (hk_ev_elapsed_ns(ev.start, ev.end, &ns) != 0) {
        charge_span(ldev, sm_ppm, opened_ns, last_ns, 0);
        hk_pair_give_up(&ev);
        return 1;
    } else if (ns > 0) {
        int64_t work = 0, c = charge_batch(lim, ldev, sig, sm_ppm, opened, ns, &work);
        hk_limiter_note_elapsed(lim, ns);
        if (count && ldev >= 0 && ldev < HK_MAX_DEVICES) {
            int64_t unit = work / (int64_t)count, old = hk_atomic_load_relaxed(&g_unit_ns[ldev]);
            hk_atomic_store_relaxed(&g_unit_ns[ldev], old ? old + (unit - old) / 8 : unit);
        }
        hk_atomic_add_relaxed(&g_batches, 1);
        hk_atomic_add_relaxed(&g_charged, c);
    }
    hk_pair_put(&ev);
    return 1;
}

/* Closed batches in flight: a hint for when to collect (no lock: a launch path asks it twice). */
static unsigned pending_count(void) { return hk_atomic_load_relaxed(&g_npending); }

/* ------------------------------------------------------------------------------------------- */
/* Deferred ends, and the batches on streams other threads can destroy or capture               */

static int has_tail(hk_meter_batch *b) {
    return hk_atomic_load_acquire(&b->xsubmitted) != hk_atomic_load_acquire(&b->xcovered);
}

/* The end's last record is behind the first `n` submissions (another thread's record may have
   covered more: the count only grows). */
static void cover(hk_meter_batch *b, unsigned n) {
    unsigned c = hk_atomic_load_relaxed(&b->xcovered);
    while ((int)(n - c) > 0 && !hk_atomic_cas_weak_acq_rel(&b->xcovered, &c, n)) {}
}

/* Record the batch's end behind every submission counted so far, from any thread (its context
   pushed if it is not current). A record is later than every submission made before it on the
   stream, so concurrent records of one end are harmless. 0 = ok, or nothing to record. */
static int record_end(hk_meter_batch *b) {
    unsigned n = hk_atomic_load_acquire(&b->xsubmitted);
    if (n == hk_atomic_load_acquire(&b->xcovered)) return 0;
    int r = hk_ev_record_in(b->ev.end, b->stream, b->ctx);
    if (r == 0) cover(b, n);
    return r;
}

/* Open batches that defer their end on a created stream. Another thread may destroy that stream
   or begin a capture on it, after which a late record would be undefined or captured: the shim
   calls hk_meter_flush_stream() first, which records each listed batch's end on it. A batch
   that finds no free entry records its end after every submission. A listed batch's stream,
   context, events and epoch are set before it is listed and stay until it is unlisted (under
   g_shared_lock); the flusher reads nothing else of it but the atomic counters. */
#define HK_SHARED_MAX 256
static pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static hk_meter_batch *g_shared[HK_SHARED_MAX];
static _Atomic int g_nshared;

static int list_shared(hk_meter_batch *b) {
    pthread_mutex_lock(&g_shared_lock);
    for (int i = 0; i < HK_SHARED_MAX; i++) {
        if (!g_shared[i]) {
            g_shared[i] = b;
            hk_atomic_add_relaxed(&g_nshared, 1);
            pthread_mutex_unlock(&g_shared_lock);
            return 1;
        }
    }
    pthread_mutex_unlock(&g_shared_lock);
    return 0;
}

static void unlist_shared(hk_meter_batch *b) {
    pthread_mutex_lock(&g_shared_lock);
    for (int i = 0; i < HK_SHARED_MAX; i++) {
        if (g_shared[i] == b) {
            g_shared[i] = NULL;
            hk_atomic_add_relaxed(&g_nshared, -1);
            break;
        }
    }
    pthread_mutex_unlock(&g_shared_lock);
    b->shared = 0;
}

void hk_meter_flush_stream(void *s) {
    if (hk_atomic_load_acquire(&g_ops_state) != 1 || hk_atomic_load_relaxed(&g_nshared) == 0) return;
    pthread_mutex_lock(&g_shared_lock);
    for (int i = 0; i < HK_SHARED_MAX; i++) {
        hk_meter_batch *b = g_shared[i];
        if (b && b->stream == s && !hk_ctx_gone_since(b->ctx, b->open_epoch)) record_end(b);
    }
    pthread_mutex_unlock(&g_shared_lock);
}

/* A batch that closes with its end unrecorded: record it now (later than the work, never earlier),
   or, where its context may be gone (or a record failed), charge the batch its whole span on the
   host's clock (charge_span: the work ran inside it). A close after a host pause counts against
   deferring at all (HK_METER_LATE_MAX). Returns 1 if the batch was charged here. */
static int finish_unrecorded(hk_meter_batch *b) {
    int gone = hk_ctx_gone_since(b->ctx, b->open_epoch), tail = has_tail(b);
    if (tail && hk_limiter_now_ns() - b->last_ns >= HK_BATCH_GAP_NS) hk_atomic_add_relaxed(&g_late, 1);
    if (tail && !b->untimed && !gone && record_end(b) == 0) return 0;
    b->untimed = 0;
    charge_span(b->ldev, b->sm_ppm, b->opened_ns, hk_limiter_now_ns(), gone);
    if (!gone) hk_pair_give_up(&b->ev); /* a record failed in a live context: its pairs are suspect */
    return 1;
}

static void close_batch(hk_meter_batch *b) {
    if (!b->open) return;
    if (b->shared) unlist_shared(b); /* from here on no other thread records its end */
    b->open = 0;
    if ((has_tail(b) || b->untimed) && finish_unrecorded(b)) return; /* charged, its pair given up */
    if (b->count == 0) {                                             /* start recorded but nothing went through */
        hk_pair_put(&b->ev);
        return;
    }
    for (;;) {
        pthread_mutex_lock(&g_lock);
        unsigned n = hk_atomic_load_relaxed(&g_npending);
        if (n < HK_RING) {
            unsigned tail = (g_head + n) % HK_RING;
            g_pending[tail].ev = b->ev;
            g_pending[tail].ldev = b->ldev;
            g_pending[tail].sm_ppm = b->sm_ppm;
            g_pending[tail].ratio = b->ratio;
            g_pending[tail].count = b->count;
            g_pending[tail].sig = b->sig;
            g_pending[tail].opened_ns = b->opened_ns;
            g_pending[tail].last_ns = b->last_ns;
            g_pending[tail].open_epoch = b->open_epoch;
            hk_atomic_store_relaxed(&g_npending, n + 1);
            pthread_mutex_unlock(&g_lock);
            return;
        }
        pthread_mutex_unlock(&g_lock);
        collect_one(1);
    }
}

/* A thread that exits with an open batch hands it over for charging (its device time is owed). */
static void on_thread_exit(void *arg) {
    (void)arg;
    close_batch(&t_batch);
}
static void make_exit_key(void) { pthread_key_create(&g_exit_key, on_thread_exit); }

/* ------------------------------------------------------------------------------------------- */
/* The gate                                                                                     */

hk_meter_batch *hk_meter_before(void *s) { return hk_meter_before_work(s, HK_WORK_SM); }

/* Priorities (priority.h): a high claim marks its work on the device's board; a normal one waits
   while a high one has work (its own open batch closed first: its time is charged as it was). */
static void priority_gate(hk_board *bd, hk_limiter *lim, hk_meter_batch *b) {
    int64_t now = hk_limiter_now_ns(), until;
    if (bd->high) {
        hk_board_mark(bd, now, 0, 1);
        return;
    }
    if (hk_board_high_until(bd, now, 0) <= now) return;
    close_batch(b);
    int64_t t0 = now;
    while ((until = hk_board_high_until(bd, now, 1)) > now) {
        sleep_ns(until - now < HK_PRIORITY_WAIT_NS ? until - now : HK_PRIORITY_WAIT_NS);
        now = hk_limiter_now_ns();
    }
    if (lim) hk_limiter_note_yield(lim, now - t0);
}

/* The SM fraction of work on `s` in `ctx` (fail safe: all SMs). */
static uint32_t context_sm_ppm(void *ctx, void *s) {
    if (!g_ops->sm_share_ppm) return HK_SM_PPM_FULL;
    uint32_t p = g_ops->sm_share_ppm(ctx, s);
    return p == 0 || p > HK_SM_PPM_FULL ? HK_SM_PPM_FULL : p;
}

hk_meter_batch *hk_meter_before_work(void *s, int work) {
    if (hk_unlikely(hk_atomic_load_acquire(&g_ops_state) != 1)) return NULL;
    int defer = (work & HK_WORK_DEFER) && g_ops->event_record_in && hk_atomic_load_relaxed(&g_late) < HK_METER_LATE_MAX;
    int shared = work & HK_WORK_SHARED;
    work &= ~(HK_WORK_DEFER | HK_WORK_SHARED);
    /* Work on a stream being captured is not run now (it is charged when its graph is launched) and
       takes no events. While a capture that began through the shim is in progress every submission
       asks; otherwise only one that would open a batch (a capture begun some way the shim does not
       see), so a launch that extends its thread's batch makes no such call. A capture elsewhere
       leaves this stream metered: one held open on a side stream is no way around the share. */
    hk_meter_batch *b = &t_batch;
    unsigned epoch = hk_ctx_epoch();
    if (hk_unlikely(hk_ev_captures() > 0) || !b->open || b->stream != s)
        if (g_ops->capturing(s)) return NULL;
    void *ctx = NULL;
    int ldev = -1;
    if (g_ops->current(&ctx, &ldev) != 0 || ctx == NULL) return NULL;
    hk_limiter *lim = limiter_for(ldev);
    hk_board *bd = board_for(ldev);
    if (bd) priority_gate(bd, lim, b);
    if (!lim) return NULL;

    int64_t now = hk_limiter_now_ns();
    /* Kernels and copies share a batch where both cost the same, a context with every SM; elsewhere a
       change of kind closes it (more batches only for clients on part of the SMs). A context
       destruction since it opened closes it too: its handle may name a new context now. */
    if (b->open && (b->stream != s || b->ctx != ctx || b->open_epoch != epoch ||
                    (b->work != work && b->ctx_ppm < HK_SM_PPM_FULL) || b->count >= HK_BATCH_MAX_SUBMITS ||
                    now - b->opened_ns > HK_BATCH_MAX_AGE_NS || now - b->last_ns > HK_BATCH_GAP_NS ||
                    (int64_t)b->count * hk_atomic_load_relaxed(&g_unit_ns[b->ldev]) >= HK_BATCH_DEVICE_NS))
        close_batch(b);
    if (now - t_poll_ns >= HK_POLL_NS || pending_count() >= HK_METER_MAX_PENDING) {
        while (collect_one(0)) {}
        t_poll_ns = now;
    }
    int64_t bal = hk_limiter_balance(lim, now);
    if (bal < 0) { /* in debt: wait until it is repaid and a burst's worth more (HK_LIMITER_WAKE_NS) */
        close_batch(b);
        int64_t t0 = now;
        while (bal < HK_LIMITER_WAKE_NS) {
            int64_t wait = hk_limiter_wait_ns(lim, bal - HK_LIMITER_WAKE_NS);
            if (bd && bd->high) /* waiting for its own share is having work: normal claims stay off */
                hk_board_mark(bd, now, wait, 0);
            if (!collect_one(1)) sleep_ns(wait);
            now = hk_limiter_now_ns();
            bal = hk_limiter_balance(lim, now);
        }
        hk_limiter_note_throttle(lim, now - t0);
    }
    while (pending_count() > HK_METER_MAX_PENDING) collect_one(1);
    if (!b->open) {
        if (hk_unlikely(b->opened_ns == 0)) { /* first batch of this thread */
            pthread_once(&g_exit_once, make_exit_key);
            pthread_setspecific(g_exit_key, b);
        }
        /* A pair that will not record is given up with its context's others, and a new one made:
           a launch that cannot be timed is not metered, so a dead pair must not stay in the pool. */
        int tries = 0;
        for (;;) {
            if (hk_pair_get(ctx, &b->ev) != 0) return NULL;
            if (hk_ev_record(b->ev.start, s) == 0) break;
            hk_pair_give_up(&b->ev);
            if (++tries == 2) return NULL;
        }
        b->open = 1;
        b->stream = s;
        b->ctx = ctx;
        b->ldev = ldev;
        b->work = work;
        b->ctx_ppm = context_sm_ppm(ctx, s);
        b->sm_ppm = work == HK_WORK_SM ? b->ctx_ppm : HK_SM_PPM_FULL;
        b->ratio = lim->strict && g_ops->clock_ratio_milli ? g_ops->clock_ratio_milli(ldev) : 0;
        b->count = 0;
        b->sig = 0;
        b->opened_ns = now;
        b->open_epoch = epoch;
        b->untimed = 0;
        hk_atomic_store_relaxed(&b->xsubmitted, 0);
        hk_atomic_store_relaxed(&b->xcovered, 0);
        b->shared = defer && shared && list_shared(b);
    }
    b->defer = defer && (!shared || b->shared);
    return b;
}

/* Whether a batch with `count` submissions at `now` is due to close (the limits of meter.h): its
   deferred end is recorded right after the submission that makes it so. */
static int due_to_close(const hk_meter_batch *b, unsigned count, int64_t now) {
    return count >= HK_BATCH_MAX_SUBMITS || now - b->opened_ns > HK_BATCH_MAX_AGE_NS ||
           (int64_t)count * hk_atomic_load_relaxed(&g_unit_ns[b->ldev]) >= HK_BATCH_DEVICE_NS;
}

static inline uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}

void hk_meter_after(hk_meter_batch *b, void *s, int ok, uint64_t sig) {
    if (!b || !ok) return;
    int64_t now = hk_limiter_now_ns();
    unsigned n = ++b->count;
    b->sig = mix(b->sig, sig);
    hk_atomic_store_release(&b->xsubmitted, n);
    if (b->defer && !due_to_close(b, n, now)) {
        /* deferred: recorded at a wait, at the close, or by flush_stream */
    } else if (hk_ev_record(b->ev.end, s) != 0) {
        b->untimed = 1; /* the work went through: charged its host span at the close */
    } else {
        cover(b, n);
        now = hk_limiter_now_ns();
    }
    b->last_ns = now;
}

void hk_meter_flush(void) {
    hk_meter_batch *b = &t_batch;
    if (hk_likely(!b->open) || !has_tail(b) || b->untimed) return;
    if (hk_ctx_gone_since(b->ctx, b->open_epoch)) return; /* not touched: the close charges it */
    record_end(b);
}

unsigned hk_meter_context_going(void *ctx) {
    /* While its events live: the calling thread's batch in it is closed and every closed batch is
       charged its device time (the destruction is about to wait for the work anyway). */
    if (hk_atomic_load_acquire(&g_ops_state) == 1) {
        hk_meter_batch *b = &t_batch;
        hk_meter_flush();
        if (b->open && (ctx == HK_METER_ANY_CONTEXT || b->ctx == ctx)) close_batch(b);
        while (collect_one(1)) {}
    }
    return hk_ctx_going(ctx);
}

void hk_meter_context_gone(unsigned token, int went) { hk_ctx_gone(token, went); }

void hk_meter_atfork_child(void) {
    /* The parent's events and contexts are not usable here: forget them (leaked, by design). */
    pthread_mutex_init(&g_lock, NULL);
    g_head = 0;
    hk_pairs_atfork_child();
    hk_atomic_store_relaxed(&g_npending, 0);
    memset(g_est, 0, sizeof g_est);
    for (int i = 0; i < HK_MAX_DEVICES; i++) { /* boards stay open: the descriptors are the child's too */
        hk_elastic_init(&g_elastic[i], hk_compute_elasticity_milli(i), !hk_compute_elasticity_given(i));
        hk_atomic_store_relaxed(&g_unit_ns[i], 0);
    }
    memset(&t_batch, 0, sizeof t_batch);
    pthread_mutex_init(&g_shared_lock, NULL); /* the parent's other threads' batches are not ours */
    memset(g_shared, 0, sizeof g_shared);
    hk_atomic_store_relaxed(&g_nshared, 0);
    t_poll_ns = 0;
}

void hk_meter_stats(uint64_t *batches, int64_t *charged_ns) {
    if (batches) *batches = hk_atomic_load_relaxed(&g_batches);
    if (charged_ns) *charged_ns = hk_atomic_load_relaxed(&g_charged);
}
