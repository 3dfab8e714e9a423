/* state.c - the process state of a hook library: initialised once, on first use.
 *
 * hk_preload_init_slow() loads the shims' real libraries, calls hk_init_with() with this
 * library's stem and its shims' legacy environment names, and publishes one of
 *   READY       configured: the shims enforce quotas
 *   DORMANT     no configuration at all: every interposer passes straight through
 *   FAILCLOSED  bad configuration or ledger: the shims refuse (hk_init printed why, once)
 * plus whether any device has a compute limit (the launch fast path tests only that).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>

#include "../core/limiter.h"
#include "preload.h"

_Atomic int hk_preload_xstate = HK_STATE_UNINIT;
_Atomic int hk_preload_xlimiter_on;

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;

static void atfork_child(void) {
    for (const hk_shim *const *sp = hk_preload_shims; *sp; sp++)
        if ((*sp)->atfork_child) (*sp)->atfork_child();
}

/* The shims' aliases, concatenated (a library has few shims and each few names). */
#define HK_MAX_ALIASES 32
static hk_env_alias g_aliases[HK_MAX_ALIASES + 1];

static void collect_aliases(void) {
    size_t n = 0;
    for (const hk_shim *const *sp = hk_preload_shims; *sp; sp++)
        for (const hk_env_alias *a = (*sp)->aliases; a && a->name && n < HK_MAX_ALIASES; a++) g_aliases[n++] = *a;
    g_aliases[n] = (hk_env_alias){NULL, NULL};
}

int hk_preload_init_slow(void) {
    pthread_mutex_lock(&g_init_lock);
    int s = hk_atomic_load_acquire(&hk_preload_xstate);
    if (s == HK_STATE_UNINIT) {
        int64_t t0 = hk_limiter_now_ns();
        for (const hk_shim *const *sp = hk_preload_shims; *sp; sp++) hk_preload_load(*sp);
        int64_t t1 = hk_limiter_now_ns();
        collect_aliases();
        hk_options opts = {.stem = hk_preload_stem(), .aliases = g_aliases};
        if (hk_init_with(&opts) != HK_OK) { /* hk_init printed the one-line reason itself */
            s = HK_STATE_FAILCLOSED;
        } else if (hk_dormant()) {
            s = HK_STATE_DORMANT;
        } else {
            char board[HK_PATH_MAX];
            for (int d = 0; d < HK_MAX_DEVICES;
                 d++) /* a limit, or a part in priorities: submissions go through the meter */
                if (hk_sm_limit(d) < HK_SM_UNLIMITED || hk_priority(d, board, sizeof board) != HK_PRIORITY_UNSET)
                    hk_atomic_store_relaxed(&hk_preload_xlimiter_on, 1);
            s = HK_STATE_READY;
            for (const hk_shim *const *sp = hk_preload_shims; *sp; sp++)
                if ((*sp)->setup) (*sp)->setup();
        }
        if (s != HK_STATE_DORMANT) pthread_atfork(NULL, NULL, atfork_child);
        if (hk_log_debug())
            hk_log("init (%s): %s, compute limiter %s (load %.0f us, core %.0f us)", hk_preload_stem(),
                   s == HK_STATE_READY     ? "ready"
                   : s == HK_STATE_DORMANT ? "dormant"
                                           : "failed closed",
                   hk_preload_limiter_on() ? "on" : "off", (double)(t1 - t0) / 1e3,
                   (double)(hk_limiter_now_ns() - t1) / 1e3);
        hk_atomic_store_release(&hk_preload_xstate, s);
    }
    pthread_mutex_unlock(&g_init_lock);
    return s;
}
