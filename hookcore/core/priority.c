/* priority.c - the device's priority board (see priority.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "priority.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "atomic.h"

int hk_board_open(hk_board *b, const char *path, int high) {
    b->high = high;
    hk_atomic_store_relaxed(&b->xnext_read_ns, 0);
    hk_atomic_store_relaxed(&b->xseen_until_ns, 0);
    hk_atomic_store_relaxed(&b->xwritten_until_ns, 0);
    hk_atomic_store_relaxed(&b->xlast_submit_ns, 0);
    hk_atomic_store_relaxed(&b->xgap_ns, 0);
    /* O_NOFOLLOW: a board is a file the daemon made, never a link to somewhere else */
    b->fd = high ? open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666)
                 : open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    return b->fd < 0 ? -1 : 0;
}

void hk_board_encode(int64_t until, unsigned char out[HK_BOARD_MARK_BYTES]) {
    uint64_t v = (uint64_t)until, c = ~v;
    memcpy(out, &v, 8);
    memcpy(out + 8, &c, 8);
}

int64_t hk_board_decode(const unsigned char *in, long n, int64_t now) {
    if (n != HK_BOARD_MARK_BYTES) return 0;
    uint64_t v, c;
    memcpy(&v, in, 8);
    memcpy(&c, in + 8, 8);
    int64_t until = (int64_t)v;
    if (c != ~v || until <= now || until - now > HK_PRIORITY_HOLD_MAX_NS) return 0;
    return until;
}

int64_t hk_board_mark(hk_board *b, int64_t now, int64_t extra_ns, int submit) {
    if (b->fd < 0 || !b->high) return 0;
    int64_t gap = hk_atomic_load_relaxed(&b->xgap_ns);
    if (submit) {
        int64_t last = hk_atomic_exchange_acq_rel(&b->xlast_submit_ns, now), pause = now - last;
        gap -= gap / 16; /* decays: a loop that got quicker holds less */
        if (last && pause > gap && pause <= HK_PRIORITY_HOLD_MAX_NS / 2) gap = pause;
        hk_atomic_store_relaxed(&b->xgap_ns, gap);
    }
    int64_t hold = 2 * gap > HK_PRIORITY_HOLD_NS ? 2 * gap : HK_PRIORITY_HOLD_NS;
    if (hold > HK_PRIORITY_HOLD_MAX_NS / 2) hold = HK_PRIORITY_HOLD_MAX_NS / 2;
    int64_t until = now + extra_ns + hold, w = hk_atomic_load_relaxed(&b->xwritten_until_ns);
    if (until - w < HK_PRIORITY_WRITE_NS) return hold;
    if (!hk_atomic_cas_strong_acq_rel(&b->xwritten_until_ns, &w, until)) return hold; /* another thread writes */
    unsigned char m[HK_BOARD_MARK_BYTES];
    hk_board_encode(until, m);
    ssize_t w2 = pwrite(b->fd, m, sizeof m, 0); /* fails on a read-only board: then no one is told */
    (void)w2;
    return hold;
}

int64_t hk_board_high_until(hk_board *b, int64_t now, int fresh) {
    if (b->fd < 0 || b->high) return 0;
    if (!fresh && now < hk_atomic_load_relaxed(&b->xnext_read_ns)) {
        int64_t seen = hk_atomic_load_relaxed(&b->xseen_until_ns);
        return seen > now ? seen : 0;
    }
    unsigned char m[HK_BOARD_MARK_BYTES];
    ssize_t n = pread(b->fd, m, sizeof m, 0);
    int64_t until = hk_board_decode(m, (long)n, now);
    hk_atomic_store_relaxed(&b->xseen_until_ns, until);
    hk_atomic_store_relaxed(&b->xnext_read_ns, now + HK_PRIORITY_READ_NS);
    return until;
}
