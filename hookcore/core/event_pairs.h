/* event_pairs.h - the meter's timing events, and the context destructions that can take them.
 *
 * The meter times each batch with a pair of the API's events made in the batch's context; pairs
 * are pooled per context for reuse. A context's events die with it (touching them afterwards is
 * undefined), and its handle can come back for a new context: a primary context reset always keeps
 * it, and a driver may hand a destroyed context's handle to the next create. So every destruction
 * the shim reports is numbered (an epoch) with the context it may take, and whatever the meter made
 * in a context -- a pooled pair, an open or unread batch -- is stamped with the epoch it was made
 * or last known alive in: hk_ctx_gone_since() then says, without touching it, whether a destruction
 * since may have taken its context. Pooled pairs of a context that went are given up (never used,
 * never destroyed: the driver took them); the others are kept.
 *
 * The last HK_VICTIMS destructions are remembered; a stamp older than that counts as gone. A
 * destruction whose context the shim cannot name (HK_METER_ANY_CONTEXT) may have taken any.
 */
#ifndef HOOKCORE_EVENT_PAIRS_H
#define HOOKCORE_EVENT_PAIRS_H

#include <stdint.h>

#include "internal.h"
#include "meter.h"

typedef struct hk_pair {
    void *start, *end;
    void *ctx;
    unsigned epoch; /* the destruction epoch it was made or last known alive in */
} hk_pair;

/* The shim's event calls (hk_meter_setup hands them over). */
void hk_pairs_use(const hk_meter_ops *ops);

/* Destructions begun (the epoch now). */
unsigned hk_ctx_epoch(void);
/* Whether a destruction begun after epoch `since` may have taken context `ctx`. */
int hk_ctx_gone_since(void *ctx, unsigned since);
/* A destruction that may take `ctx` begins: returns its epoch, the token for hk_ctx_gone(). */
unsigned hk_ctx_going(void *ctx);
/* ... and has ended; `went` = 0 if the context is still there (it took nothing). */
void hk_ctx_gone(unsigned token, int went);
/* Once no destruction is in progress: when the last one that took a context ended (0: none). A
   destruction waits for its context's work, so work of a context that went ended by then. */
int64_t hk_ctx_gone_end_ns(void);

/* A pair for a batch in `ctx`, pooled or new, stamped with the epoch now. -1: none could be made. */
int hk_pair_get(void *ctx, hk_pair *out);
/* Back to the pool after its batch was charged (given up if its context may have gone since). */
void hk_pair_put(const hk_pair *p);
/* A pair that would not record: it, and every pooled pair of its context, are given up. */
void hk_pair_give_up(const hk_pair *p);

/* The meter's calls on events: relaxed while a capture is in progress (meter.h, Stream capture),
   as an event call in the global interaction mode would invalidate another thread's capture. */
int hk_ev_record(void *ev, void *stream);
int hk_ev_record_in(void *ev, void *stream, void *ctx); /* hk_meter_ops.event_record_in */
int hk_ev_done(void *ev);
void hk_ev_wait(void *ev);
int hk_ev_elapsed_ns(void *a, void *b, int64_t *ns);
/* Captures begun through the shim and not yet ended. */
extern _Atomic int hk__captures;
static inline int hk_ev_captures(void) { return hk_atomic_load_acquire(&hk__captures); }

/* In a forked child: the parent's pairs and destructions in progress are not the child's. */
void hk_pairs_atfork_child(void);

#endif
