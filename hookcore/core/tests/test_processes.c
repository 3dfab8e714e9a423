/* test_processes.c -- many processes and threads on one quota, processes killed at random points,
   and PID reuse. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "core_tests.h"

/* 8 processes hammer one device; a shared counter tracks what they hold between reserve and
   release; its maximum must never exceed the quota. */

typedef struct shared_obs {
    _Atomic uint64_t cur, max, ok, fail;
} shared_obs;

void test_concurrent(void) {
    const uint64_t limit = 100 * MiB;
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=100Mi", NULL};
    hk_config c = config_of(env);
    char path[1200];
    ledger_path(path, sizeof path, "conc");
    shared_obs *obs = mmap(NULL, sizeof *obs, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(obs, 0, sizeof *obs);
    enum { NPROC = 8, ITERS = 20000 };
    pid_t pids[NPROC];
    for (int p = 0; p < NPROC; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            hk_ledger *l = NULL;
            char err[HK_ERR_MAX];
            if (hk_ledger_open(path, &c, 0, &l, err, sizeof err) != HK_OK) {
                fprintf(stderr, "child open: %s\n", err);
                _exit(2);
            }
            uint64_t seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull;
            uint64_t held[4] = {0};
            for (int i = 0; i < ITERS; i++) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                int k = (int)(seed & 3);
                if (held[k]) {
                    hk_atomic_sub_seq_cst(&obs->cur, held[k]);
                    hk_ledger_release(l, 0, held[k]);
                    held[k] = 0;
                } else {
                    uint64_t sz = (seed >> 8) % (30 * MiB) + 1;
                    if (hk_ledger_reserve(l, 0, sz) == HK_OK) {
                        uint64_t now = hk_atomic_add_seq_cst(&obs->cur, sz) + sz;
                        uint64_t m = hk_atomic_load_seq_cst(&obs->max);
                        while (m < now && !hk_atomic_cas_weak_seq_cst(&obs->max, &m, now)) {}
                        held[k] = sz;
                        hk_atomic_add_seq_cst(&obs->ok, 1);
                    } else {
                        hk_atomic_add_seq_cst(&obs->fail, 1);
                    }
                }
            }
            for (int k = 0; k < 4; k++) {
                if (held[k]) {
                    hk_atomic_sub_seq_cst(&obs->cur, held[k]);
                    hk_ledger_release(l, 0, held[k]);
                }
            }
            _exit(0);
        }
    }
    int all_ok = 1;
    for (int p = 0; p < NPROC; p++) {
        int st;
        waitpid(pids[p], &st, 0);
        all_ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    CHECK(all_ok);
    CHECK(hk_atomic_load_seq_cst(&obs->max) <= limit);
    CHECK(hk_atomic_load_seq_cst(&obs->ok) > 1000 && hk_atomic_load_seq_cst(&obs->fail) > 100); /* real contention */
    hk_ledger *l = open_ok(path, &c);
    if (l) {
        CHECK_EQ_U64(hk_ledger_used(l, 0), 0); /* dead children's slots are ignored/reclaimed */
        hk_device_info di;
        hk_ledger_device(l, 0, &di);
        CHECK(di.peak <= limit && di.peak > limit / 2);
        hk_ledger_close(l);
    }
    printf("ok concurrent: %d procs, max held %llu of %llu, %llu admitted, %llu refused\n", NPROC,
           (unsigned long long)hk_atomic_load_seq_cst(&obs->max), (unsigned long long)limit,
           (unsigned long long)hk_atomic_load_seq_cst(&obs->ok),
           (unsigned long long)hk_atomic_load_seq_cst(&obs->fail));
    munmap(obs, sizeof *obs);
    unlink(path);
}

/* Threads of one process share a slot; threads of two handles race each other. */
typedef struct thr_arg {
    hk_ledger *l;
    shared_obs *obs;
    uint64_t seed;
} thr_arg;

static void *thr_hammer(void *p) {
    thr_arg *a = p;
    uint64_t seed = a->seed;
    for (int i = 0; i < 20000; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        uint64_t sz = (seed >> 8) % (35 * MiB) + 1;
        if (hk_ledger_reserve(a->l, 0, sz) == HK_OK) {
            uint64_t now = hk_atomic_add_seq_cst(&a->obs->cur, sz) + sz;
            uint64_t m = hk_atomic_load_seq_cst(&a->obs->max);
            while (m < now && !hk_atomic_cas_weak_seq_cst(&a->obs->max, &m, now)) {}
            hk_atomic_add_seq_cst(&a->obs->ok, 1);
            if ((i & 15) == 0) sched_yield(); /* hold it across a reschedule now and then */
            hk_atomic_sub_seq_cst(&a->obs->cur, sz);
            hk_ledger_release(a->l, 0, sz);
        } else {
            hk_atomic_add_seq_cst(&a->obs->fail, 1);
        }
    }
    return NULL;
}

void test_threads(void) {
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=50Mi", NULL};
    hk_config c = config_of(env);
    char path[1200];
    ledger_path(path, sizeof path, "thr");
    hk_ledger *h[2] = {open_ok(path, &c), open_ok(path, &c)};
    if (!h[0] || !h[1]) return;
    static shared_obs obs;
    memset(&obs, 0, sizeof obs);
    pthread_t th[8];
    thr_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (thr_arg){h[i & 1], &obs, 0x1234567ull * (uint64_t)(i + 1)};
        pthread_create(&th[i], NULL, thr_hammer, &args[i]);
    }
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
    CHECK(hk_atomic_load_seq_cst(&obs.max) <= 50 * MiB);
    CHECK(hk_atomic_load_seq_cst(&obs.ok) > 1000 && hk_atomic_load_seq_cst(&obs.fail) > 0);
    CHECK_EQ_U64(hk_ledger_used(h[0], 0), 0);
    hk_ledger_close(h[0]);
    hk_ledger_close(h[1]);
    unlink(path);
    printf("ok threads: max held %llu of %llu, %llu admitted, %llu refused\n",
           (unsigned long long)hk_atomic_load_seq_cst(&obs.max), 50 * MiB,
           (unsigned long long)hk_atomic_load_seq_cst(&obs.ok), (unsigned long long)hk_atomic_load_seq_cst(&obs.fail));
}

void test_sigkill(void) {
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=100Mi", NULL};
    hk_config c = config_of(env);
    char path[1200];
    ledger_path(path, sizeof path, "kill");
    hk_ledger *me = open_ok(path, &c);
    if (!me) return;
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        hk_ledger *l = NULL;
        char err[HK_ERR_MAX];
        if (hk_ledger_open(path, &c, 0, &l, err, sizeof err) != HK_OK) _exit(2);
        if (hk_ledger_reserve(l, 0, 80 * MiB) != HK_OK) _exit(3);
        char ch = 'r';
        if (write(pfd[1], &ch, 1) != 1) _exit(4);
        for (;;) pause();
    }
    char ch = 0;
    CHECK(read(pfd[0], &ch, 1) == 1 && ch == 'r');
    CHECK_EQ_U64(hk_ledger_used(me, 0), 80 * MiB);
    CHECK(hk_ledger_reserve(me, 0, 30 * MiB) == HK_ENOMEM); /* child alive: its charge stands */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    /* The dead slot is still counted until someone notices; the reader sees it as dead. */
    hk_ledger *r = NULL;
    char err[HK_ERR_MAX];
    CHECK(hk_ledger_open(path, NULL, HK_OPEN_READONLY, &r, err, sizeof err) == HK_OK);
    int dead = 0;
    for (uint32_t i = 0; r && i < hk_ledger_slot_hwm(r); i++) {
        hk_process_info pi;
        hk_ledger_process(r, (int)i, &pi);
        if (pi.pid == pid) dead = pi.state == HK_SLOT_DEAD && pi.used[0] == 80 * MiB;
    }
    CHECK(dead);
    /* Admission reclaims on its own when the quota looks exhausted. */
    CHECK(hk_ledger_reserve(me, 0, 30 * MiB) == HK_OK);
    CHECK_EQ_U64(hk_ledger_used(me, 0), 30 * MiB);
    hk_ledger_close(r);
    close(pfd[0]);
    close(pfd[1]);

    /* kill -9 at arbitrary instructions: children loop reserve/release (and open/close), the parent
     kills them at random moments; afterwards everything must be reclaimable and consistent. */
    hk_ledger_release(me, 0, 30 * MiB);
    enum { NKILL = 24 };
    uint64_t seed = 12345;
    for (int round = 0; round < NKILL; round++) {
        pid_t k = fork();
        if (k == 0) {
            for (;;) {
                hk_ledger *l = NULL;
                if (hk_ledger_open(path, &c, 0, &l, NULL, 0) != HK_OK) continue;
                for (int i = 0; i < 1000; i++) {
                    if (hk_ledger_reserve(l, 0, MiB * (uint64_t)(1 + i % 7)) == HK_OK && (i & 1))
                        hk_ledger_release(l, 0, MiB * (uint64_t)(1 + i % 7));
                }
                if (round & 1) hk_ledger_close(l);
            }
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        struct timespec ts = {0, (long)(seed % 3000000)}; /* 0..3 ms */
        nanosleep(&ts, NULL);
        kill(k, SIGKILL);
        waitpid(k, NULL, 0);
    }
    /* A newcomer reclaims dead slots when it opens the ledger (usage reads are right at once). */
    hk_ledger *newcomer = open_ok(path, &c);
    CHECK_EQ_U64(hk_ledger_used(newcomer, 0), 0);
    hk_ledger_close(newcomer);
    int freed = hk_ledger_reclaim(me);
    CHECK_EQ_U64(hk_ledger_used(me, 0), 0);
    uint32_t hwm = hk_ledger_slot_hwm(me);
    for (uint32_t i = 0; i < hwm; i++) {
        hk_process_info pi;
        hk_ledger_process(me, (int)i, &pi);
        if ((int)i != hk_ledger_slot_index(me)) CHECK(pi.state == HK_SLOT_FREE);
    }
    CHECK(hk_ledger_reserve(me, 0, 100 * MiB) == HK_OK); /* the whole quota is back */
    printf("ok sigkill (%d kills at random points, %d slots reclaimed, hwm %u)\n", NKILL, freed, hwm);
    hk_ledger_close(me);
    unlink(path);
}

/* A slot whose pid is alive (PID reuse) but whose owner lock is gone is dead. */
void test_pid_reuse(void) {
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=10Mi", NULL};
    hk_config c = config_of(env);
    char path[1200];
    ledger_path(path, sizeof path, "reuse");
    hk_ledger *me = open_ok(path, &c);
    if (!me) return;
    /* forge slot 5: live, pid = our own (alive) pid with another start time, holding 8 MiB */
    hk__slot *s = &me->slots[5];
    s->pid = getpid();
    s->start_time = hk_proc_start_time(getpid()) + 777;
    hk_atomic_store_seq_cst(&s->xused[0], 8 * MiB);
    hk_atomic_store_seq_cst(&s->xowner, HK_OWNER_MAKE(3, HK_SLOT_LIVE));
    hk_atomic_store_seq_cst(&me->hdr->xslot_hwm, 6);
    CHECK_EQ_U64(hk_ledger_used(me, 0), 8 * MiB);
    hk_ledger *r = NULL;
    char err[HK_ERR_MAX];
    CHECK(hk_ledger_open(path, NULL, HK_OPEN_READONLY, &r, err, sizeof err) == HK_OK);
    hk_process_info pi;
    CHECK(r && hk_ledger_process(r, 5, &pi) == HK_OK && pi.state == HK_SLOT_DEAD && pi.pid == getpid());
    hk_ledger_close(r);
    CHECK(hk_ledger_reserve(me, 0, 5 * MiB) == HK_OK); /* reclaims slot 5 on the way */
    CHECK(HK_OWNER_STATE(hk_atomic_load_seq_cst(&s->xowner)) == HK_SLOT_FREE);
    /* a CLAIMING slot left by a process killed mid-claim is also reclaimed */
    hk_atomic_store_seq_cst(&me->slots[4].xowner, HK_OWNER_MAKE(9, HK_SLOT_CLAIMING));
    CHECK(hk_ledger_reclaim(me) == 1);
    hk_ledger_close(me);
    unlink(path);
    printf("ok pid_reuse\n");
}
