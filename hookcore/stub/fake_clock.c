/* fake_clock.c - build/stub/libfakeclock.so: a virtual CLOCK_MONOTONIC for tests (not a stub of
 * any vendor library; no hook library links it).
 *
 * Why: the compute limiter's tests measure how much device time a claim gets per second. Measured
 * on the host's clock, that figure moves with the host's load (a preempted client submits less),
 * so a test of it fails on a busy machine. Preloaded first (LD_PRELOAD="libfakeclock.so
 * lib<hook>.so"), this library replaces the clock that the client, the hook and the stub engines
 * all read with one that only moves when a process waits: nanosleep, clock_nanosleep and usleep
 * advance it by the time asked instead of sleeping, sched_yield by 1 us, and host code in between
 * takes no time at all. The stub engines complete work on that clock, so a run of "1.5 seconds"
 * is the same sequence of submissions, charges and throttle waits on any machine, however loaded,
 * and takes milliseconds. Nothing in the hook changes: it calls clock_gettime and nanosleep as in
 * production, and they resolve here.
 *
 * Interposed: clock_gettime for CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW and CLOCK_BOOTTIME (other
 * clocks ask the kernel), nanosleep, clock_nanosleep on those clocks, usleep, sched_yield.
 *
 * One process (HOOKCORE_STUB_CLOCK_FILE unset): the clock starts at 1000 s and a wait of d moves it
 * to max(now, the waiter's start + d). Meant for single-threaded clients.
 *
 * Several processes (HOOKCORE_STUB_CLOCK_FILE=<file> and HOOKCORE_STUB_CLOCK_PARTIES=<n>, n <= 16):
 * they share the clock in <file> (created empty by the test) as a discrete-event simulation. Each
 * process is a party; a waiting party is woken, and the clock moved to its wake time, only once
 * all n parties have started and none is running, the earliest wake first. So no party's host
 * code ever races the clock, and the host's scheduling changes no figure beyond the order of
 * parties that run at the same instant. A party that ends leaves the simulation; one killed (or
 * blocked outside a wait) stops the others' clock, so tests bound such runs with a timeout. A
 * forked child is not a party of its own: single-threaded clients that do not fork.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../core/atomic.h"

#define API         __attribute__((visibility("default")))
#define FC_START_NS 1000000000000LL /* 1000 s */
#define FC_YIELD_NS 1000LL
#define FC_PARTIES  16
#define FC_MAGIC    0x46434c4bu /* "FCLK" */

enum { P_FREE = 0, P_RUNNING, P_WAITING, P_DONE };

typedef struct fc_shared {
    uint32_t magic;
    int32_t expected; /* parties the simulation waits for before the clock moves */
    int32_t joined;
    int32_t pad;
    _Atomic int64_t now;
    struct {
        int32_t state;
        int32_t pid;
        int64_t wake;
    } party[FC_PARTIES];
} fc_shared;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static fc_shared g_local; /* one process */
static fc_shared *g_sim;  /* several processes: the mapped file */
static int g_fd = -1, g_me = -1;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* flock does not exclude this process's threads */

static void real_pause(void) {
    struct timespec ts = {0, 20000};
    syscall(SYS_nanosleep, &ts, NULL);
}

static void sim_lock(void) {
    pthread_mutex_lock(&g_mu);
    while (flock(g_fd, LOCK_EX) != 0 && errno == EINTR) {}
}

static void sim_unlock(void) {
    flock(g_fd, LOCK_UN);
    pthread_mutex_unlock(&g_mu);
}

static void leave(void) {
    if (!g_sim || g_me < 0) return;
    sim_lock();
    g_sim->party[g_me].state = P_DONE;
    sim_unlock();
}

static void setup(void) {
    hk_atomic_store_seq_cst(&g_local.now, FC_START_NS);
    const char *path = getenv("HOOKCORE_STUB_CLOCK_FILE");
    const char *parties = getenv("HOOKCORE_STUB_CLOCK_PARTIES");
    if (!path || !*path) return;
    int n = parties ? atoi(parties) : 1;
    if (n < 1 || n > FC_PARTIES) abort(); /* a test's mistake: say so loudly */
    g_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (g_fd < 0 || ftruncate(g_fd, sizeof(fc_shared)) != 0) abort();
    void *m = mmap(NULL, sizeof(fc_shared), PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, 0);
    if (m == MAP_FAILED) abort();
    g_sim = m;
    sim_lock();
    if (g_sim->magic != FC_MAGIC) {
        g_sim->expected = n;
        hk_atomic_store_seq_cst(&g_sim->now, FC_START_NS);
        g_sim->magic = FC_MAGIC;
    }
    for (int i = 0; i < FC_PARTIES && g_me < 0; i++) {
        if (g_sim->party[i].state == P_FREE) {
            g_me = i;
            g_sim->party[i].state = P_RUNNING;
            g_sim->party[i].pid = getpid();
            g_sim->joined++;
        }
    }
    sim_unlock();
    if (g_me < 0) abort(); /* more processes than parties */
    atexit(leave);
}

static void init(void) { pthread_once(&g_once, setup); }

static int64_t now_ns(void) {
    init();
    return hk_atomic_load_seq_cst(g_sim ? &g_sim->now : &g_local.now);
}

/* Under the lock: if every party has joined and none runs, wake the earliest waiter. */
static void schedule(void) {
    if (g_sim->joined < g_sim->expected) return;
    int next = -1;
    for (int i = 0; i < FC_PARTIES; i++) {
        int st = g_sim->party[i].state;
        if (st == P_RUNNING) return;
        if (st == P_WAITING && (next < 0 || g_sim->party[i].wake < g_sim->party[next].wake)) next = i;
    }
    if (next < 0) return;
    if (g_sim->party[next].wake > hk_atomic_load_seq_cst(&g_sim->now))
        hk_atomic_store_seq_cst(&g_sim->now, g_sim->party[next].wake);
    g_sim->party[next].state = P_RUNNING;
}

/* Wait until the clock reads `until`. */
static void wait_until(int64_t until) {
    init();
    if (!g_sim) {
        int64_t cur = hk_atomic_load_seq_cst(&g_local.now);
        while (cur < until && !hk_atomic_cas_weak_seq_cst(&g_local.now, &cur, until)) {}
        return;
    }
    sim_lock();
    g_sim->party[g_me].wake = until;
    g_sim->party[g_me].state = P_WAITING;
    for (;;) {
        schedule();
        if (g_sim->party[g_me].state == P_RUNNING) break;
        sim_unlock();
        real_pause();
        sim_lock();
    }
    sim_unlock();
}

static int virtual_clock(clockid_t c) {
    return c == CLOCK_MONOTONIC || c == CLOCK_MONOTONIC_RAW || c == CLOCK_BOOTTIME;
}

static int64_t span_ns(const struct timespec *ts) { return ts ? (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec : 0; }

API int clock_gettime(clockid_t c, struct timespec *ts) {
    if (!virtual_clock(c)) return (int)syscall(SYS_clock_gettime, c, ts);
    int64_t t = now_ns();
    ts->tv_sec = t / 1000000000LL;
    ts->tv_nsec = t % 1000000000LL;
    return 0;
}

API int nanosleep(const struct timespec *req, struct timespec *rem) {
    if (!req || req->tv_nsec < 0 || req->tv_nsec >= 1000000000L) {
        errno = EINVAL;
        return -1;
    }
    wait_until(now_ns() + span_ns(req));
    if (rem) rem->tv_sec = rem->tv_nsec = 0;
    return 0;
}

API int clock_nanosleep(clockid_t c, int flags, const struct timespec *req, struct timespec *rem) {
    if (!virtual_clock(c)) return (int)syscall(SYS_clock_nanosleep, c, flags, req, rem) == 0 ? 0 : errno;
    if (!req || req->tv_nsec < 0 || req->tv_nsec >= 1000000000L) return EINVAL;
    wait_until((flags & TIMER_ABSTIME) ? span_ns(req) : now_ns() + span_ns(req));
    if (rem && !(flags & TIMER_ABSTIME)) rem->tv_sec = rem->tv_nsec = 0;
    return 0;
}

API int usleep(useconds_t us) {
    wait_until(now_ns() + (int64_t)us * 1000);
    return 0;
}

API int sched_yield(void) {
    wait_until(now_ns() + FC_YIELD_NS);
    return 0;
}
