/* priority.h - claims' priorities on a shared device (vendor-neutral).
 *
 * On a device where a high-priority claim has work, normal claims yield their time to it; when it
 * has none they use the device as their own shares allow. Each device has a *board*, one small file
 * that the daemon creates and mounts into every claim on the device that takes part in priorities:
 * writable into a high claim's containers, read-only into a normal claim's. A high claim's
 * processes mark on it until when they have work: a hold past each submission (and past the end of
 * each wait for their own share). The hold is HK_PRIORITY_HOLD_NS, or twice the longest recent pause
 * between the process's submissions when that is longer (a loop that queues work and waits for it
 * pauses about as long as the work runs; pauses beyond HK_PRIORITY_HOLD_MAX_NS / 2 are idle time, not
 * counted), so the mark outlives the work it queued. A normal claim's processes read it (at most
 * every HK_PRIORITY_READ_NS) before submitting and wait while the mark is ahead of now.
 *
 * Tenant safety. Priority comes from the process's own config (the read-only file the daemon wrote;
 * the environment is ignored when it exists), never from the ledger or the board. A normal claim
 * cannot write the board (a read-only mount, opened read-only). The board is never mapped: read and
 * written with pread/pwrite of 16 bytes (the mark and its complement), so a high tenant that
 * truncates or scribbles on it can crash no reader; a mark that fails its complement, a short read,
 * or a mark further ahead than HK_PRIORITY_HOLD_MAX_NS (what no honest high claim writes) counts as
 * no high claim at work. What a high tenant can do is what high priority is: keep normal claims
 * waiting while it claims to have work.
 */
#ifndef HOOKCORE_PRIORITY_H
#define HOOKCORE_PRIORITY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HK_PRIORITY_HOLD_NS     20000000LL  /* a high claim has work until at least 20 ms after it submitted */
#define HK_PRIORITY_HOLD_MAX_NS 100000000LL /* a mark further ahead than 100 ms is not believed */
#define HK_PRIORITY_READ_NS     250000LL    /* a normal claim reads the board at most every 250 us */
#define HK_PRIORITY_WRITE_NS    1000000LL   /* a high claim writes when its mark moved by 1 ms or more */
#define HK_PRIORITY_WAIT_NS     2000000LL   /* a yielding thread looks again after at most 2 ms */
#define HK_BOARD_BYTES          4096        /* the board file's size as the daemon creates it */
#define HK_BOARD_MARK_BYTES     16          /* the mark: int64 until (CLOCK_MONOTONIC ns), its complement */

typedef struct hk_board {
    int fd;   /* -1: none */
    int high; /* 1: this process marks; 0: it yields */
    _Atomic int64_t xnext_read_ns;
    _Atomic int64_t xseen_until_ns;    /* normal: the last mark believed */
    _Atomic int64_t xwritten_until_ns; /* high: the last mark written */
    _Atomic int64_t xlast_submit_ns;   /* high: its last submission */
    _Atomic int64_t xgap_ns;           /* high: the longest recent pause between submissions (decaying) */
} hk_board;

/* Open the board at `path`: read-only for a normal claim, read-write for a high one (created if
   missing, for configurations from the environment). Returns 0, or -1 with b->fd = -1. */
int hk_board_open(hk_board *b, const char *path, int high);

/* High: a submission at `now` (submit = 1: its pause since the last one feeds the hold), or a wait
   that ends `extra_ns` from now (submit = 0): mark work until now + extra + the hold (written when the
   mark moved by HK_PRIORITY_WRITE_NS or more). Returns the hold. */
int64_t hk_board_mark(hk_board *b, int64_t now, int64_t extra_ns, int submit);

/* Normal: until when a high claim has work (0: none), read at most every HK_PRIORITY_READ_NS unless
   `fresh`. */
int64_t hk_board_high_until(hk_board *b, int64_t now, int fresh);

/* The 16 bytes of a mark, and a mark read back: `until` when it is whole (its complement matches,
   n = 16) and in (now, now + HK_PRIORITY_HOLD_MAX_NS], else 0. */
void hk_board_encode(int64_t until, unsigned char out[HK_BOARD_MARK_BYTES]);
int64_t hk_board_decode(const unsigned char *in, long n, int64_t now);

#ifdef __cplusplus
}
#endif
#endif /* HOOKCORE_PRIORITY_H */
