/* meter.h - measuring a claim's device work and holding it to its compute share (vendor-neutral).
 *
 * The shim of a compute API wraps every call that submits work to a device --
 * kernel and graph launches, copies, memsets -- in hk_meter_before() / hk_meter_after(), and
 * supplies the handful of operations the meter needs (contexts, streams, timing events) in an
 * hk_meter_ops. Everything else is here:
 *
 * Measuring GPU time: a thread's submissions onto one stream form a "batch". Before the first one
 * a start event is recorded on the stream; after every one the batch's end event is re-recorded,
 * so elapsed(start, end) is the device time of exactly that work, without the idle time before or
 * after it. A batch closes after 32 submissions, 2 ms, a 100 us host pause, about 0.5 ms of
 * estimated device time (the process's device time per submission, learned from its charged
 * batches: a batch then fits inside another tenant's time slice, so that under contention most
 * windows hold only the claim's own work), a change of stream or context, or before the thread is
 * throttled.
 *
 * Deferred end events: re-recording the end event after every submission is most of what metering
 * costs a launch (an H100: 886 of 1230 ns on a 2690 ns launch), which a launch-bound loop pays
 * in throughput. Where the shim can say where the end must be (hk_meter_ops.event_record_in: it
 * calls hk_meter_flush() before every call that waits for the device, hk_meter_flush_stream()
 * before a stream is destroyed or a capture begins on it, and hk_meter_context_going()/_gone()
 * around every context destruction), kernel and graph launches (HK_WORK_DEFER) record the end
 * only when the batch is due to close, at a host wait, or when the batch closes. A batch on a
 * created stream (HK_WORK_SHARED: another thread may destroy or capture the stream) is listed
 * while open, and hk_meter_flush_stream() records the end of every listed batch on that stream,
 * from the calling thread: a record is later than every submission made before it on the stream,
 * so it may race the owner's own. Recorded late, the end can only be later than the work: a batch closed by a
 * host pause with its end unrecorded is timed to the close, the pause inside its window (the
 * tenant pays more, never less). After HK_METER_LATE_MAX such closes in a process every end is
 * recorded per submission again. Closed batches are charged to the claim's shared
 * bucket (limiter.h) by whichever submitting thread of the process sees them done.
 *
 * Throttling: before a submission, if the bucket is in debt the thread first waits for its own
 * in-flight batches (their time is owed too), then sleeps until the debt is repaid and
 * HK_LIMITER_WAKE_NS of credit are there (a wake buys a burst of batches: limiter.h). At most
 * HK_METER_MAX_PENDING closed batches may be in flight per process, which bounds how far work runs
 * ahead of its charge. Finished batches are looked for (one event query) at most every 20 us per
 * thread, or once that many are in flight: a launch-bound loop paid a query on every launch.
 *
 * Contention: with time slicing another claim's work that runs while ours is queued lands inside
 * our [start, end] window. Each batch therefore carries a signature (a hash of what it submitted,
 * from the shim), and is charged min(elapsed, the lowest cost seen for that signature, grown by
 * 1/512 per use): repeated work is charged its uncontended cost, new work its elapsed time.
 * Only where another process may run inside the windows: when the shim can tell that this process
 * is the device's only one (hk_meter_ops.device_alone), the windows hold nothing but its own work
 * and host gaps between its submissions, and the batch is charged its elapsed time (the estimate
 * still learns from it). HOOKCORE_LIMITER_CHARGE=elapsed switches the estimate off.
 *
 * SM fraction (limiter.h): a batch of kernels and graphs is charged its device time times the share
 * of the device's SMs its context may use (hk_meter_ops.sm_share_ppm, asked when the batch opens;
 * the shim caches it per context), so the share bounds SM x time and a client the driver already
 * confines to part of the SMs (MPS, affinity contexts) is not limited twice. Copies and memsets
 * (HK_WORK_COPY) are charged in full: copy engines are not partitioned with the SMs. On a context
 * with part of the SMs a batch holds one kind of work (a submission of the other kind closes it);
 * on one with every SM both cost the same and share batches, as before.
 *
 * Strict cap (HOOKCORE_COMPUTE_MODE_<i>=strict, see limiter.h): each batch is charged its cost at
 * the full-load clock: its device time x the factor the claim's learned clock elasticity gives for
 * the clock then (hk_meter_ops.clock_ratio_milli, asked when the batch opens and when it is charged;
 * elastic.h), so throughput, not device time, stays at the share on an idle device. The contention
 * estimate compares those full-load prices. The two factors multiply.
 *
 * Stream capture: work submitted to a stream that is being captured is not run (it becomes a graph,
 * charged when launched) and takes no events (they would become graph nodes). Every other stream
 * stays metered while a capture is in progress, and the meter makes its event calls so that they do
 * not break the application's capture (the API's relaxed capture interaction mode, where it has one:
 * hk_meter_ops.capture_mode). Whether a stream is being captured is asked on every submission only while some capture is
 * in progress (the shim reports each begin and end: hk_meter_capture_begun / _ended), else once per
 * batch.
 *
 * One metered API per library: hk_meter_setup() is called once with the shim's operations.
 */
#ifndef HOOKCORE_METER_H
#define HOOKCORE_METER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hk_meter_ops {
    /* The calling thread's current context and its ledger device index (hk_device_resolve).
       0 when there is one; nonzero when there is none (the submission is not metered). */
    int (*current)(void **ctx, int *ldev);
    /* 1 if work submitted to `stream` now would be captured into a graph, not run. */
    int (*capturing)(void *stream);
    int (*event_create)(void **ev); /* 0 = ok */
    void (*event_destroy)(void *ev);
    int (*event_record)(void *ev, void *stream); /* 0 = ok */
    int (*event_done)(void *ev);                 /* 1 done (or failed), 0 pending */
    void (*event_wait)(void *ev);
    int (*event_elapsed_ns)(void *start, void *end, int64_t *ns); /* 0 = ok */
    /* Strict cap only (may be NULL): the device's clock now relative to its clock under full
       load, x1000 (1000 = no boost; 1230 = running 23% faster). 0 = unknown. */
    uint32_t (*clock_ratio_milli)(int ldev);
    /* Optional (NULL = every context has all SMs): the fraction of its device's SMs that work
       submitted now to `stream` with `ctx` current may run on, in millionths (HK_SM_PPM_FULL = all),
       as the driver provisions it. 0 or above HK_SM_PPM_FULL = unknown: charged in full. Called once
       per batch, when it opens; the answer must be cheap (cached per context). */
    uint32_t (*sm_share_ppm)(void *ctx, void *stream);
    /* Optional (NULL = unknown): 1 if this process is the only one with a context on ledger device
       `ldev` (nothing else can run inside its batches' windows), 0 if others are there, -1 unknown.
       Asked when a batch is charged; the answer must be cheap (sampled). */
    int (*device_alone)(int ldev);
    /* Optional (NULL = the API has no such rule): set the calling thread's stream-capture interaction
       mode to `mode` and return the one it had (-1: could not). `mode` is HK_CAPTURE_MODE_RELAXED or a
       value an earlier call returned. While a capture is in progress the meter makes its event calls
       relaxed: a global-mode capture prohibits them in every thread and would be invalidated. */
    int (*capture_mode)(int mode);
    /* Optional (NULL = end events are recorded after every submission): record `ev` on `stream` as
       seen from context `ctx` (made current for the call if it is not). Set only by a shim that calls
       hk_meter_flush() before each call that waits for the device and hk_meter_context_going()/_gone()
       around each context destruction: the meter may then defer end events (see above). 0 = ok. */
    int (*event_record_in)(void *ev, void *stream, void *ctx);
} hk_meter_ops;

#define HK_CAPTURE_MODE_RELAXED (-2) /* the API's relaxed mode, whatever its number */

/* What a submission is, for its charge. */
#define HK_WORK_SM        0     /* kernels, graphs: device time x the context's SM fraction */
#define HK_WORK_COPY      1     /* copies, memsets: device time (copy engines are not partitioned) */
#define HK_WORK_DEFER     0x100 /* or'd in: the end event may be deferred (a default stream, or ...) */
#define HK_WORK_SHARED    0x200 /* ... with DEFER, a created stream: see hk_meter_flush_stream() */
#define HK_METER_LATE_MAX 3     /* batches closed by a host pause with their end unrecorded, per process */

typedef struct hk_meter_batch hk_meter_batch;

/* Install the shim's operations (once; later calls are ignored). NULL members that are not
   optional make the meter refuse to meter (logged once): the compute limit is then not enforced. */
void hk_meter_setup(const hk_meter_ops *ops);

/* Before submitting work to `stream`: throttle while the claim is in debt, open or extend a
   batch. Returns the batch to pass to hk_meter_after(), or NULL when this submission is not
   metered (no limit on its device, no context, a capture in progress, no event API). */
hk_meter_batch *hk_meter_before(void *stream);
/* The same for work of kind `work` (HK_WORK_SM or HK_WORK_COPY); hk_meter_before is HK_WORK_SM. */
hk_meter_batch *hk_meter_before_work(void *stream, int work);

/* After the submission: `ok` = the driver accepted it; `sig` = a hash of what it was. */
void hk_meter_after(hk_meter_batch *b, void *stream, int ok, uint64_t sig);

/* The calling thread is about to wait for the device (a synchronize or query call): its open
   batch's deferred end event is recorded now, right after its last submission. */
void hk_meter_flush(void);
/* Stream `stream` is about to be destroyed, or a capture to begin on it (by any thread): every
   thread's deferred end on it (HK_WORK_SHARED) is recorded now. */
void hk_meter_flush_stream(void *stream);

/* Around the destruction of a context. Before the driver call: `ctx` is the context that may go
   (HK_METER_ANY_CONTEXT: not known which); the calling thread's batch in it is closed and every
   closed batch is charged while the events live. Returns the token for the call after the driver's,
   which says whether it went (0: the driver kept it, e.g. a primary context release that left other
   references). From the first call on, nothing the meter made in that context is touched again:
   its pooled event pairs are given up, and a batch still open or unread in it is charged its span
   on the host's clock up to the end of the destruction (which waits for the context's work). */
#define HK_METER_ANY_CONTEXT ((void *)-1)
unsigned hk_meter_context_going(void *ctx);
void hk_meter_context_gone(unsigned token, int went);

/* Stream capture bookkeeping: a capture began (ok = it did), a capture ended (was = the stream
   was capturing before the end call). */
void hk_meter_capture_begun(int ok);
void hk_meter_capture_ended(int was_capturing);

/* In a forked child: forget the parent's events, batches and estimates. */
void hk_meter_atfork_child(void);

/* Statistics for the debug log and tests: batches charged by this process, ns charged. */
void hk_meter_stats(uint64_t *batches, int64_t *charged_ns);

#ifdef __cplusplus
}
#endif
#endif /* HOOKCORE_METER_H */
