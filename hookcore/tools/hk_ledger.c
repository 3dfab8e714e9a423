/* hk_ledger.c - a ledger from the command line, with the core's own reader (no Python needed;
 * the GPU benchmark uses it on machines without the Cython wrapper).
 *
 *   hk-ledger limiter PATH DEV   "LIMITER <active> <share %> <charged ns> <throttled ns> <tokens ns> <granted ns>
 *                                 <device ns> <SM fraction of the last charge, millionths>
 *                                 <strict: clock factor x1000> <strict: clock elasticity x1000> <learned 0/1>
 *                                 <yielded ns> <elapsed ns: the charged batches' windows as timed>
 *                                 <throttles: waits for the share>"
 *   hk-ledger usage PATH DEV     "USAGE <used bytes> <limit bytes or -1> <live processes>"
 * Exit 2 with the core's one-line message when the file is not a readable ledger.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hookcore.h"
#include "core/limiter.h"

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "limiter") && strcmp(argv[1], "usage"))) {
        fprintf(stderr, "usage: hk-ledger limiter|usage PATH DEV\n");
        return 2;
    }
    hk_ledger *l = NULL;
    char err[HK_ERR_MAX];
    if (hk_ledger_open_snapshot(argv[2], &l, err, sizeof err) != HK_OK) { /* never maps or follows it */
        fprintf(stderr, "hk-ledger: %s\n", err);
        return 2;
    }
    int dev = atoi(argv[3]);
    int rc = 0;
    if (!strcmp(argv[1], "limiter")) {
        hk_limiter_stats st;
        hk_limiter_read(hk_ledger_limiter_area(l, dev), &st);
        printf("LIMITER %u %u %lld %lld %lld %lld %lld %u %u %u %u %lld %lld %lld\n", st.active, st.share,
               (long long)st.charged_ns, (long long)st.throttled_ns, (long long)st.tokens_ns, (long long)st.granted_ns,
               (long long)st.device_ns, st.sm_ppm, st.factor_milli, st.elastic_milli, st.elastic_fit,
               (long long)st.yielded_ns, (long long)st.elapsed_ns, (long long)st.throttles);
    } else {
        hk_device_info d;
        if (hk_ledger_device(l, dev, &d) != HK_OK) {
            fprintf(stderr, "hk-ledger: device %d out of range\n", dev);
            rc = 2;
        } else {
            printf("USAGE %llu %lld %u\n", (unsigned long long)d.used,
                   d.mem_limit == HK_MEM_UNLIMITED ? -1LL : (long long)d.mem_limit, d.live_processes);
        }
    }
    hk_ledger_close(l);
    return rc;
}
