/* test_ledger.c -- one ledger: reserve/release, two handles, a tampered file, a slot taken over,
   validation of what is on disk, and the creation race. */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>

#include "core_tests.h"

void test_reserve_release(void) {
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=100Mi", "HOOKCORE_MEMORY_LIMIT_1=1Gi", NULL};
    hk_config c = config_of(env);
    char path[1200];
    for (int private_mem = 0; private_mem < 2; private_mem++) {
        ledger_path(path, sizeof path, "rr");
        hk_ledger *l = open_ok(private_mem ? NULL : path, &c);
        if (!l) return;
        CHECK(hk_ledger_slot_index(l) == 0);
        for (int i = 0; i < 10; i++) CHECK(hk_ledger_reserve(l, 0, 10 * MiB) == HK_OK);
        CHECK(hk_ledger_reserve(l, 0, 1) == HK_ENOMEM);
        CHECK_EQ_U64(hk_ledger_used(l, 0), 100 * MiB);
        hk_ledger_release(l, 0, 10 * MiB);
        CHECK(hk_ledger_reserve(l, 0, 10 * MiB + 1) == HK_ENOMEM);
        CHECK(hk_ledger_reserve(l, 0, 10 * MiB) == HK_OK);
        CHECK(hk_ledger_reserve(l, 0, 101 * MiB) == HK_ENOMEM);
        CHECK(hk_ledger_reserve(l, 1, 1 * GiB) == HK_OK);
        CHECK_EQ_U64(hk_ledger_used(l, 1), GiB);
        CHECK(hk_ledger_reserve(l, 2, 64 * GiB) == HK_OK); /* no quota: admitted, counted */
        CHECK_EQ_U64(hk_ledger_used(l, 2), 64 * GiB);
        CHECK(hk_ledger_reserve(l, 16, 1) == HK_EINVAL);
        CHECK(hk_ledger_reserve(l, -1, 1) == HK_EINVAL);
        hk_ledger_release(l, 1, 5 * GiB); /* saturates, never wraps */
        CHECK_EQ_U64(hk_ledger_used(l, 1), 0);
        hk_device_info di;
        CHECK(hk_ledger_device(l, 0, &di) == HK_OK);
        CHECK_EQ_U64(di.mem_limit, 100 * MiB);
        CHECK_EQ_U64(di.used, 100 * MiB);
        CHECK_EQ_U64(di.peak, 100 * MiB);
        CHECK_EQ_U64(di.live_processes, 1);
        void *area = hk_ledger_limiter_area(l, 3);
        CHECK(area != NULL && ((uintptr_t)area % 64) == 0);
        hk_ledger_close(l);
        unlink(path);
    }
    printf("ok reserve_release\n");
}

/* Two handles in one process are two open file descriptions: they behave as two processes. */
void test_two_handles(void) {
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT=64Mi", NULL};
    hk_config c = config_of(env);
    char path[1200];
    ledger_path(path, sizeof path, "two");
    hk_ledger *a = open_ok(path, &c), *b = open_ok(path, &c);
    if (!a || !b) return;
    CHECK(hk_ledger_slot_index(a) != hk_ledger_slot_index(b));
    CHECK(hk_ledger_reserve(a, 0, 40 * MiB) == HK_OK);
    CHECK(hk_ledger_reserve(b, 0, 40 * MiB) == HK_ENOMEM);
    CHECK(hk_ledger_reserve(b, 0, 24 * MiB) == HK_OK);
    CHECK_EQ_U64(hk_ledger_used(a, 0), 64 * MiB);
    hk_process_info pi;
    CHECK(hk_ledger_process(b, hk_ledger_slot_index(a), &pi) == HK_OK);
    CHECK(pi.state == HK_SLOT_LIVE && pi.pid == getpid() && pi.used[0] == 40 * MiB);
    CHECK(pi.start_time == hk_proc_start_time(getpid()) && pi.start_time != 0);
    /* limiter area is shared */
    ((volatile unsigned char *)hk_ledger_limiter_area(a, 0))[5] = 42;
    CHECK(((volatile unsigned char *)hk_ledger_limiter_area(b, 0))[5] == 42);
    /* read-only view sees the same */
    hk_ledger *r = NULL;
    char err[HK_ERR_MAX];
    CHECK(hk_ledger_open(path, NULL, HK_OPEN_READONLY, &r, err, sizeof err) == HK_OK);
    if (r) {
        CHECK_EQ_U64(hk_ledger_used(r, 0), 64 * MiB);
        CHECK(hk_ledger_reserve(r, 0, 1) == HK_EINVAL);
        CHECK(hk_ledger_process(r, hk_ledger_slot_index(b), &pi) == HK_OK && pi.state == HK_SLOT_LIVE);
    }
    int ia = hk_ledger_slot_index(a);
    hk_ledger_close(a); /* gives its slot and charge back */
    CHECK_EQ_U64(hk_ledger_used(b, 0), 24 * MiB);
    if (r) {
        CHECK(hk_ledger_process(r, ia, &pi) == HK_OK && pi.state == HK_SLOT_FREE);
        hk_ledger_close(r);
    }
    CHECK(hk_ledger_reserve(b, 0, 40 * MiB) == HK_OK);
    /* An application closes the ledger descriptor of handle cc behind its back: the mapping still
     references the open file description, so the slot lock (and the charge) survive. */
    hk_ledger *cc = open_ok(path, &c);
    if (cc) {
        CHECK(cc->fd >= 512); /* kept out of the low descriptor range */
        CHECK(hk_ledger_reserve(cc, 0, 10 * MiB) == HK_ENOMEM);
        hk_ledger_release(b, 0, 40 * MiB);
        CHECK(hk_ledger_reserve(cc, 0, 10 * MiB) == HK_OK);
        close(cc->fd);
        cc->fd = -1;
        CHECK(hk_ledger_reserve(b, 0, 40 * MiB) == HK_ENOMEM); /* cc still counts: not reclaimable */
        CHECK(hk_ledger_reclaim(b) == 0);
        CHECK(hk_ledger_reserve(cc, 0, 1 * MiB) == HK_OK);
        /* If its slot is ever taken from it anyway (forged here), cc stops instead of counting into
       another process's slot. */
        uint64_t w = hk_atomic_load_seq_cst(&cc->me->xowner);
        hk_atomic_store_seq_cst(&cc->me->xowner, HK_OWNER_MAKE(HK_OWNER_GEN(w) + 5, HK_SLOT_LIVE));
        uint64_t before = hk_ledger_used(b, 0);
        hk_ledger_release(cc, 0, 10 * MiB); /* must not touch the counters */
        CHECK_EQ_U64(hk_ledger_used(b, 0), before);
        CHECK(hk_ledger_reserve(cc, 0, 1) == HK_EFAILCLOSED);
        CHECK(hk_ledger_reserve(cc, 0, 1) == HK_EFAILCLOSED);
        CHECK_EQ_U64(hk_ledger_used(b, 0), before);
        hk_ledger_close(cc);
    }
    hk_ledger_close(b);
    unlink(path);
    printf("ok two_handles\n");
}

/* The file is the tenant's: limits raised, my usage zeroed, a snapshot reader on a shrinking file.
   Admission must follow the config the handle was opened with and the handle's own count. */
void test_tampered_ledger(void) {
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=64Mi", NULL};
    hk_config c = config_of(env);
    char path[1200], err[HK_ERR_MAX];
    ledger_path(path, sizeof path, "tamper");
    hk_ledger *a = open_ok(path, &c), *b = open_ok(path, &c);
    if (!a || !b) return;
    CHECK(hk_ledger_reserve(a, 0, 40 * MiB) == HK_OK);
    a->dev[0].mem_limit = HK_MEM_UNLIMITED; /* the quota "raised" */
    uint64_t w = hk_atomic_load_seq_cst(&a->me->xused[0]);
    hk_atomic_store_seq_cst(&a->me->xused[0], HK_USED_MAKE(HK_USED_TAG(w), 0));      /* my usage zeroed */
    CHECK(hk_ledger_reserve(a, 0, 40 * MiB) == HK_ENOMEM);                           /* 80 > 64 by my own count */
    CHECK_EQ_U64(HK_USED_BYTES(hk_atomic_load_seq_cst(&a->me->xused[0])), 40 * MiB); /* rewritten */
    CHECK(hk__ledger_repairs(a) >= 1);
    CHECK(hk_ledger_reserve(b, 0, 40 * MiB) == HK_ENOMEM); /* b sees the repaired slot */
    CHECK(hk_ledger_reserve(b, 0, 24 * MiB) == HK_OK);
    /* a snapshot is a private copy: the file shrinking afterwards cannot fault its reader */
    hk_ledger *s = NULL;
    CHECK(hk_ledger_open_snapshot(path, &s, err, sizeof err) == HK_OK);
    if (s) {
        CHECK(truncate(path, 4096) == 0);
        hk_device_info di;
        CHECK(hk_ledger_device(s, 0, &di) == HK_OK && di.used == 64 * MiB);
        hk_ledger_close(s);
        CHECK(hk_ledger_open_snapshot(path, &s, err, sizeof err) == HK_EFAILCLOSED && strstr(err, "wrong size"));
        CHECK(truncate(path, HK_LEDGER_SIZE) == 0); /* a and b map it: their own accesses would fault */
    }
    char link[1300];
    snprintf(link, sizeof link, "%s.link", path);
    CHECK(symlink(path, link) == 0);
    CHECK(hk_ledger_open_snapshot(link, &s, err, sizeof err) == HK_EFAILCLOSED && strstr(err, "a symbolic link"));
    unlink(link);
    hk_ledger_close(a);
    hk_ledger_close(b);
    unlink(path);
    printf("ok tampered_ledger\n");
}

/* A process whose slot is taken over while it reserves and releases: the next owner's counter must
   end exactly where the next owner set it (with untagged counters the loser's roll-back could land
   on the new owner's charge and under-count it). Races a hammering thread against the takeover. */
typedef struct lost_arg {
    hk_ledger *l;
    _Atomic int xstarted;
} lost_arg;

static void *lost_hammer(void *p) {
    lost_arg *a = p;
    hk_atomic_store_release(&a->xstarted, 1);
    for (;;) {
        int rc = hk_ledger_reserve(a->l, 0, MiB);
        if (rc == HK_EFAILCLOSED) break;
        if (rc == HK_OK) hk_ledger_release(a->l, 0, MiB);
        if (a->l->me == NULL) break;
    }
    return NULL;
}

void test_lost_slot_race(void) {
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=1Gi", NULL};
    hk_config c = config_of(env);
    char path[1200];
    ledger_path(path, sizeof path, "lostrace");
    int wrong = 0, iters = 300;
    for (int it = 0; it < iters; it++) {
        hk_ledger *l = open_ok(path, &c);
        if (!l) break;
        lost_arg a = {.l = l};
        pthread_t t;
        hk__slot *s = l->me;
        uint64_t gen = HK_OWNER_GEN(l->my_owner);
        CHECK(pthread_create(&t, NULL, lost_hammer, &a) == 0);
        while (!hk_atomic_load_acquire(&a.xstarted)) sched_yield();
        struct timespec d = {0, (long)(it % 17) * 3000};
        nanosleep(&d, NULL);
        /* what a claimer does after taking the lock: new generation, its own tagged counters */
        hk_atomic_store_seq_cst(&s->xowner, HK_OWNER_MAKE(gen + 1, HK_SLOT_LIVE));
        hk_atomic_store_seq_cst(&s->xused[0], HK_USED_MAKE(gen + 1, 8 * MiB));
        pthread_join(t, NULL);
        if (HK_USED_BYTES(hk_atomic_load_seq_cst(&s->xused[0])) != 8 * MiB) wrong++;
        hk_ledger_close(l);
        unlink(path);
    }
    CHECK(wrong == 0);
    printf("ok lost_slot_race (%d takeovers, %d wrong counters)\n", iters, wrong);
}

void test_validation(void) {
    char path[1200], err[HK_ERR_MAX];
    hk_ledger *l = NULL;
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT=1Gi", NULL};
    hk_config c = config_of(env);
    /* not a ledger */
    ledger_path(path, sizeof path, "junk");
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    CHECK(write(fd, "hello world, not a ledger", 25) == 25);
    close(fd);
    CHECK(hk_ledger_open(path, &c, 0, &l, err, sizeof err) == HK_EFAILCLOSED);
    CHECK(strstr(err, path) != NULL && strstr(err, "remove it") != NULL);
    CHECK(hk_ledger_open(path, NULL, HK_OPEN_READONLY, &l, err, sizeof err) == HK_EFAILCLOSED);
    unlink(path);
    /* other version */
    l = open_ok(path, &c);
    hk_ledger_close(l);
    fd = open(path, O_RDWR);
    uint32_t v = 99;
    CHECK(pwrite(fd, &v, sizeof v, 8) == sizeof v);
    close(fd);
    CHECK(hk_ledger_open(path, &c, 0, &l, err, sizeof err) == HK_EFAILCLOSED);
    CHECK(strstr(err, "layout version 99") != NULL);
    unlink(path);
    /* another configuration while a process is live: refused; once nobody is live: adopted */
    hk_ledger *a = open_ok(path, &c);
    const char *env2[] = {"HOOKCORE_MEMORY_LIMIT=2Gi", NULL};
    hk_config c2 = config_of(env2);
    CHECK(hk_ledger_open(path, &c2, 0, &l, err, sizeof err) == HK_EFAILCLOSED);
    CHECK(strstr(err, "device 0 memory quota differs") != NULL && strstr(err, "in use by 1") != NULL);
    hk_ledger_close(a);
    l = open_ok(path, &c2);
    if (l) {
        CHECK(hk_ledger_reserve(l, 0, 2 * GiB) == HK_OK);
        hk_ledger_close(l);
    }
    /* a process stuck while holding the creation lock: openers give up after the bound */
    {
        int fd2 = open(path, O_RDWR);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        CHECK(fd2 >= 0 && fcntl(fd2, F_OFD_SETLK, &fl) == 0);
        long saved = hk__create_wait_ms;
        hk__create_wait_ms = 200;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK(hk_ledger_open(path, &c2, 0, &l, err, sizeof err) == HK_EIO);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        CHECK(waited >= 0.2 && waited < 30.0); /* it waited, then gave up ("timed out" below); the
                                                 upper bound only catches a hang (loaded CI machines) */
        CHECK(strstr(err, "creation lock") != NULL && strstr(err, "timed out") != NULL);
        hk__create_wait_ms = saved;
        close(fd2);
        l = open_ok(path, &c2); /* lock gone with the descriptor */
        hk_ledger_close(l);
    }
    /* missing directory */
    CHECK(hk_ledger_open("/nonexistent-dir/x.ledger", &c, 0, &l, err, sizeof err) == HK_EIO);
    CHECK(strstr(err, "/nonexistent-dir/x.ledger") != NULL);
    unlink(path);
    printf("ok validation\n");
}

/* Several processes create the same new ledger at once; all stay alive until every one is in. */
void test_creation_race(void) {
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=8Mi", NULL};
    hk_config c = config_of(env);
    char path[1200];
    int ok_all = 1;
    for (int round = 0; round < 10; round++) {
        ledger_path(path, sizeof path, "race");
        int go[2], ack[2], done[2];
        CHECK(pipe(go) == 0 && pipe(ack) == 0 && pipe(done) == 0);
        enum { N = 8 };
        pid_t pids[N];
        for (int p = 0; p < N; p++) {
            pids[p] = fork();
            if (pids[p] == 0) {
                char ch;
                close(go[1]);
                close(done[1]);
                if (read(go[0], &ch, 1) != 0) _exit(5); /* start together: when the pipe closes */
                hk_ledger *l = NULL;
                if (hk_ledger_open(path, &c, 0, &l, NULL, 0) != HK_OK) _exit(2);
                ch = hk_ledger_reserve(l, 0, MiB) == HK_OK ? 'y' : 'n';
                if (write(ack[1], &ch, 1) != 1) _exit(4);
                if (read(done[0], &ch, 1) != 0) _exit(5); /* hold the slot until the parent looked */
                _exit(0);
            }
        }
        close(go[0]);
        close(go[1]);
        close(done[0]);
        for (int p = 0; p < N; p++) {
            char ch = 0;
            ok_all &= read(ack[0], &ch, 1) == 1 && ch == 'y';
        }
        hk_ledger *r = NULL;
        char err[HK_ERR_MAX];
        CHECK(hk_ledger_open(path, NULL, HK_OPEN_READONLY, &r, err, sizeof err) == HK_OK);
        if (r) {
            CHECK_EQ_U64(hk_ledger_slot_hwm(r), N); /* 8 distinct slots, none lost to a re-init */
            int seen = 0;
            for (int i = 0; i < N; i++) {
                hk_process_info pi;
                hk_ledger_process(r, i, &pi);
                seen += pi.state == HK_SLOT_LIVE && pi.used[0] == MiB;
            }
            CHECK_EQ_U64(seen, N);
            CHECK_EQ_U64(hk_ledger_used(r, 0), N * MiB);
            hk_ledger_close(r);
        }
        close(done[1]);
        for (int p = 0; p < N; p++) {
            int st;
            waitpid(pids[p], &st, 0);
            ok_all &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
        }
        close(ack[0]);
        close(ack[1]);
        unlink(path);
    }
    CHECK(ok_all);
    printf("ok creation_race\n");
}
