/* test_priority.c -- a device's priority board (priority.h), in a file under the tests' directory: a
 * high claim's mark reaches a normal one; forged, torn, stale, far-ahead and truncated boards read as
 * no high claim at work; a normal claim's board is opened read-only and never written.
 */
#include "../priority.h"
#include "core_tests.h"

void test_board(void) {
    const int64_t now = 1000000000000LL;
    unsigned char m[HK_BOARD_MARK_BYTES];
    hk_board_encode(now + 5000000, m);
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now) == now + 5000000);
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES - 1, now) == 0);       /* a short read (truncated board) */
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now + 5000000) == 0); /* expired */
    m[3] ^= 1;
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now) == 0); /* torn or scribbled: fails its complement */
    hk_board_encode(now + HK_PRIORITY_HOLD_MAX_NS + 1, m);
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now) == 0); /* further ahead than any honest mark */
    memset(m, 0, sizeof m);
    CHECK(hk_board_decode(m, HK_BOARD_MARK_BYTES, now) == 0); /* as the daemon makes it: zeroes */

    char path[1200];
    snprintf(path, sizeof path, "%s/hk-board-XXXXXX", g_dir);
    int fd = mkstemp(path);
    CHECK(fd >= 0 && ftruncate(fd, HK_BOARD_BYTES) == 0);
    close(fd);
    hk_board hi, lo;
    CHECK(hk_board_open(&hi, path, 1) == 0 && hk_board_open(&lo, path, 0) == 0);
    CHECK(hk_board_high_until(&lo, now, 1) == 0);
    CHECK(hk_board_mark(&hi, now, 0, 1) == HK_PRIORITY_HOLD_NS);
    CHECK(hk_board_high_until(&lo, now, 0) == 0); /* cached: read at most every HK_PRIORITY_READ_NS */
    CHECK(hk_board_high_until(&lo, now, 1) == now + HK_PRIORITY_HOLD_NS);
    /* a mark that moved by less than HK_PRIORITY_WRITE_NS is not written (a syscall per ms at most) */
    hk_board_mark(&hi, now + 1000, 0, 1);
    CHECK(hk_board_high_until(&lo, now + 1000, 1) == now + HK_PRIORITY_HOLD_NS);
    /* the normal side reads at most every HK_PRIORITY_READ_NS: a cached answer in between */
    hk_board_mark(&hi, now + 2000000, 0, 1);
    CHECK(hk_board_high_until(&lo, now + 1000 + HK_PRIORITY_READ_NS / 2, 0) == now + HK_PRIORITY_HOLD_NS);
    CHECK(hk_board_high_until(&lo, now + 2000000, 1) == now + 2000000 + HK_PRIORITY_HOLD_NS);
    /* a normal claim never writes: its mark goes nowhere */
    hk_board_mark(&lo, now, 50000000, 0);
    CHECK(hk_board_high_until(&lo, now + 2000000, 1) == now + 2000000 + HK_PRIORITY_HOLD_NS);
    /* a loop that pauses 15 ms between its bursts (waiting for the work it queued) holds twice that,
       and a wait for its own share holds past its end; an idle second is not a pause */
    CHECK(hk_board_mark(&hi, now + 17000000, 0, 1) == 30000000);
    CHECK(hk_board_high_until(&lo, now + 17000000, 1) == now + 47000000);
    CHECK(hk_board_mark(&hi, now + 18000000, 5000000, 0) > 2 * 14000000);
    CHECK(hk_board_high_until(&lo, now + 18000000, 1) > now + 47000000);
    CHECK(hk_board_mark(&hi, now + 1018000000, 0, 1) <= 30000000);
    /* truncated behind the readers' backs (no mapping: nothing faults): no high claim at work */
    CHECK(truncate(path, 0) == 0);
    CHECK(hk_board_high_until(&lo, now + 2000000, 1) == 0);
    close(hi.fd);
    close(lo.fd);
    /* a normal claim's board that is missing: no board, no wait */
    unlink(path);
    CHECK(hk_board_open(&lo, path, 0) == -1 && hk_board_high_until(&lo, now, 1) == 0);
    printf("ok board: marks reach normal claims; forged, torn, far-ahead, stale and truncated marks do not\n");
}
