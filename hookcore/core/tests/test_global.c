/* test_global.c -- the process-wide API (hk_init, fork, the config file's authority, an orphaned
   child) and the tracking table. */
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "core_tests.h"

static char g_global_path[1200]; /* the ledger of the hk_init tests (run in children) */

/* The process-wide API, in a child (hk_init runs once per process). */
static int run_in_child(void (*fn)(void)) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        g_failures = 0;
        fn();
        fflush(stdout);
        _exit(g_failures ? 1 : 0);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        g_failures++;
        return 1;
    }
    return 0;
}

static void global_fork_body(void) {
    setenv("HOOKCORE_MEMORY_LIMIT_0", "64Mi", 1);
    setenv("HOOKCORE_COMPUTE_LIMIT_0", "40", 1);
    setenv("HOOKCORE_LEDGER", g_global_path, 1);
    CHECK(hk_init() == HK_OK);
    CHECK(hk_init() == HK_OK);
    CHECK(hk_status() == HK_OK && hk_error_message()[0] == '\0');
    CHECK_EQ_U64(hk_mem_limit(0), 64 * MiB);
    CHECK_EQ_U64(hk_mem_limit(1), HK_MEM_UNLIMITED);
    CHECK_EQ_U64(hk_sm_limit(0), 40);
    CHECK_EQ_U64(hk_sm_limit(1), 100);
    CHECK(hk_device_resolve(3, "KIND-whatever") == 3);
    CHECK(hk_device_index_for_uuid("KIND-x") == HK_ENODEV);
    CHECK(hk_mem_reserve(0, 40 * MiB) == HK_OK);
    CHECK(hk_track_alloc(0x1000, HK_KIND_PTR, 0, 40 * MiB) == HK_OK);
    CHECK(hk_limiter_area(0) != NULL);
    int c2p[2], p2c[2];
    CHECK(pipe(c2p) == 0 && pipe(p2c) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        int d;
        uint64_t sz;
        bad |= hk_mem_used_self(0) != 0;                                   /* no inherited charge */
        bad |= hk_track_lookup(0x1000, HK_KIND_PTR, &d, &sz) != HK_ENOENT; /* no inherited table */
        bad |= hk_mem_reserve(0, 30 * MiB) != HK_ENOMEM;                   /* parent's 40 MiB still counts */
        bad |= hk_mem_reserve(0, 20 * MiB) != HK_OK;                       /* own slot */
        bad |= hk_mem_used_self(0) != 20 * MiB;
        bad |= hk_mem_used(0) != 60 * MiB;
        char ch = 'c';
        if (write(c2p[1], &ch, 1) != 1) bad = 1;
        if (read(p2c[0], &ch, 1) != 1) bad = 1; /* wait for the parent's checks */
        _exit(bad ? 1 : 0);
    }
    char ch;
    CHECK(read(c2p[0], &ch, 1) == 1);
    CHECK_EQ_U64(hk_mem_used(0), 60 * MiB);
    CHECK_EQ_U64(hk_mem_used_self(0), 40 * MiB);
    CHECK(write(p2c[1], &ch, 1) == 1);
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* child exited without releasing: its 20 MiB come back by reclaim on the next refusal */
    CHECK(hk_mem_reserve(0, 24 * MiB) == HK_OK);
    int d = -1;
    uint64_t sz = 0;
    CHECK(hk_track_free(0x1000, HK_KIND_PTR, &d, &sz) == HK_OK && d == 0 && sz == 40 * MiB);
    hk_mem_release(d, sz);
    CHECK_EQ_U64(hk_mem_used(0), 24 * MiB);
}

static void global_bad_body(void) {
    setenv("HOOKCORE_MEMORY_LIMIT", "lots", 1);
    CHECK(hk_init() == HK_EFAILCLOSED);
    CHECK(hk_mem_reserve(0, 1) == HK_EFAILCLOSED);
    CHECK(strstr(hk_error_message(), "HOOKCORE_MEMORY_LIMIT=\"lots\"") != NULL);
    CHECK(hk_mem_limit(0) == 0 && hk_limiter_area(0) == NULL);
}

static void global_uuid_body(void) {
    setenv("HOOKCORE_DEVICE_UUID_0", "KIND-00000000-0000-0000-0000-0000000000b1", 1);
    setenv("HOOKCORE_DEVICE_UUID_1", "KIND-00000000-0000-0000-0000-0000000000a0", 1);
    setenv("HOOKCORE_MEMORY_LIMIT_0", "1Gi", 1);
    setenv("HOOKCORE_MEMORY_LIMIT_1", "2Gi", 1);
    setenv("HOOKCORE_LEDGER", g_global_path, 1);
    CHECK(hk_init() == HK_OK);
    /* devices reordered by the runtime: ordinal 0 is the device the claim calls index 1 */
    CHECK(hk_device_resolve(0, "KIND-00000000-0000-0000-0000-0000000000A0") == 1);
    CHECK(hk_device_resolve(1, "00000000-0000-0000-0000-0000000000b1") == 0);
    CHECK(hk_device_resolve(2, "KIND-00000000-0000-0000-0000-0000000000c2") == HK_ENODEV);
    CHECK_EQ_U64(hk_mem_limit(1), 2 * GiB);
}

/* hk_status()/hk_error_message() read while another thread's reservation finds the slot lost:
   the state and its message are published (release/acquire), never read torn (TSan checks). */
static _Atomic int g_readers_stop;
static _Atomic int g_readers_bad;

static void *status_reader(void *p) {
    (void)p;
    while (!hk_atomic_load_acquire(&g_readers_stop)) {
        if (hk_status() != HK_OK && strstr(hk_error_message(), "lost the process slot") == NULL)
            hk_atomic_add_relaxed(&g_readers_bad, 1);
    }
    return NULL;
}

static void global_lost_body(void) {
    setenv("HOOKCORE_MEMORY_LIMIT_0", "64Mi", 1);
    setenv("HOOKCORE_LEDGER", g_global_path, 1);
    CHECK(hk_init() == HK_OK && hk_mem_reserve(0, MiB) == HK_OK);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, status_reader, NULL) == 0);
    int fd = open(g_global_path, O_RDWR);
    unsigned char *m = mmap(NULL, HK_LEDGER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    hk__slot *s = (hk__slot *)(m + HK_OFF_SLOTS);
    uint64_t w = hk_atomic_load_seq_cst(&s[0].xowner);
    hk_atomic_store_seq_cst(&s[0].xowner, HK_OWNER_MAKE(HK_OWNER_GEN(w) + 1, HK_SLOT_LIVE));
    CHECK(hk_mem_reserve(0, MiB) == HK_EFAILCLOSED);
    hk_atomic_store_release(&g_readers_stop, 1);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    CHECK(hk_atomic_load_relaxed(&g_readers_bad) == 0);
    CHECK(strstr(hk_error_message(), "lost the process slot") != NULL);
    munmap(m, HK_LEDGER_SIZE);
    close(fd);
}

static char g_root[1100];

/* No config file, no key: dormant (admits everything, opens no ledger). */
static void global_dormant_body(void) {
    hk_options o = {.stem = "unit", .aliases = NULL};
    setenv("HOOKCORE_TESTING_CONFIG_ROOT", g_root, 1);
    setenv("OLD_MEM", "1", 1); /* not a key of this library */
    CHECK(hk_init_with(&o) == HK_OK && hk_dormant() && hk_config_origin() == HK_ORIGIN_NONE);
    CHECK(hk_mem_reserve(0, 1ull << 62) == HK_OK && hk_mem_used(0) == 0 && hk_limiter_area(0) == NULL);
}

/* The file wins over the environment's keys (a tenant's own limits are ignored). */
static void global_file_body(void) {
    hk_options o = {.stem = "unit", .aliases = NULL};
    setenv("HOOKCORE_TESTING_CONFIG_ROOT", g_root, 1);
    setenv("HOOKCORE_MEMORY_LIMIT_0", "lots", 1); /* garbage in the environment: ignored too */
    CHECK(hk_init_with(&o) == HK_OK && !hk_dormant() && hk_config_origin() == HK_ORIGIN_FILE);
    CHECK_EQ_U64(hk_mem_limit(0), 64 * MiB);
    CHECK(hk_mem_reserve(0, 65 * MiB) == HK_ENOMEM && hk_mem_reserve(0, 64 * MiB) == HK_OK);
}

static void global_unreadable_body(void) {
    hk_options o = {.stem = "unit", .aliases = NULL};
    setenv("HOOKCORE_TESTING_CONFIG_ROOT", g_root, 1);
    CHECK(hk_init_with(&o) == HK_EFAILCLOSED);
    CHECK(strstr(hk_error_message(), "config file") != NULL);
}

void test_global_file(void) {
    char dir[1200], file[1300], ledger[1300];
    snprintf(g_root, sizeof g_root, "%s/hk-test-%d-root", g_dir, (int)getpid());
    snprintf(dir, sizeof dir, "%s/unit", g_root);
    snprintf(file, sizeof file, "%s/config", dir);
    snprintf(ledger, sizeof ledger, "%s/ledger", dir);
    run_in_child(global_dormant_body);
    CHECK(mkdir(g_root, 0700) == 0 && mkdir(dir, 0700) == 0);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("HOOKCORE_MEMORY_LIMIT_0=64Mi\n", f);
        fclose(f);
    }
    run_in_child(global_file_body);
    struct stat st;
    CHECK(stat(ledger, &st) == 0); /* default ledger: next to the config */
    unlink(ledger);
    unlink(file);
    CHECK(mkdir(file, 0700) == 0); /* a directory where the file should be: fail closed */
    run_in_child(global_unreadable_body);
    rmdir(file);
    rmdir(dir);
    rmdir(g_root);
    printf("ok global_file (dormant, file authoritative, unreadable fails closed)\n");
}

/* The parent dies while its forked child (which never touches the GPU) lives on: the parent's
   slot must still be reclaimable, i.e. the child must not keep the parent's lock alive. */
void test_orphan_child(void) {
    char path[1200];
    ledger_path(path, sizeof path, "orphan");
    int c2p[2], hold[2];
    CHECK(pipe(c2p) == 0 && pipe(hold) == 0);
    pid_t parent = fork();
    if (parent == 0) {
        setenv("HOOKCORE_MEMORY_LIMIT_0", "64Mi", 1);
        setenv("HOOKCORE_LEDGER", path, 1);
        if (hk_init() != HK_OK || hk_mem_reserve(0, 48 * MiB) != HK_OK) _exit(2);
        pid_t child = fork();
        if (child == 0) {
            char ch;
            pid_t me = getpid();
            close(hold[1]);
            if (write(c2p[1], &me, sizeof me) != sizeof me) _exit(3);
            while (read(hold[0], &ch, 1) > 0) {}
            _exit(0);
        }
        _exit(0); /* dies holding 48 MiB; the child stays */
    }
    close(hold[0]);
    waitpid(parent, NULL, 0);
    pid_t child = 0;
    CHECK(read(c2p[0], &child, sizeof child) == sizeof child);
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=64Mi", NULL};
    hk_config c = config_of(env);
    hk_ledger *r = NULL;
    char err[HK_ERR_MAX];
    CHECK(hk_ledger_open(path, NULL, HK_OPEN_READONLY, &r, err, sizeof err) == HK_OK);
    if (r) {
        CHECK_EQ_U64(hk_ledger_used(r, 0), 48 * MiB); /* the dead parent's charge, not yet reclaimed */
        hk_process_info pi;
        CHECK(hk_ledger_process(r, 0, &pi) == HK_OK && pi.state == HK_SLOT_DEAD);
        hk_ledger_close(r);
    }
    hk_ledger *l = open_ok(path, &c);
    if (l) {
        CHECK(hk_ledger_reserve(l, 0, 64 * MiB) == HK_OK); /* reclaimed although the child lives */
        CHECK(kill(child, 0) == 0);
        hk_ledger_close(l);
    }
    close(hold[1]); /* let the child go */
    close(c2p[0]);
    close(c2p[1]);
    unlink(path);
    printf("ok orphan_child\n");
}

void test_global(void) {
    ledger_path(g_global_path, sizeof g_global_path, "global");
    run_in_child(global_fork_body);
    unlink(g_global_path);
    run_in_child(global_bad_body);
    ledger_path(g_global_path, sizeof g_global_path, "uuid");
    run_in_child(global_uuid_body);
    unlink(g_global_path);
    ledger_path(g_global_path, sizeof g_global_path, "lost");
    run_in_child(global_lost_body);
    unlink(g_global_path);
    printf("ok global (init, fork child slot, fail closed, uuid keying, slot lost under readers)\n");
}

static void *track_worker(void *arg) {
    uint64_t base = (uint64_t)(uintptr_t)arg << 40;
    int bad = 0;
    for (uint64_t i = 0; i < 20000; i++) {
        if (hk_track_alloc(base + i * 256, HK_KIND_PTR, (int)(i % 4), i) != HK_OK) bad++;
        if (i >= 10) {
            int d;
            uint64_t sz;
            uint64_t j = i - 10;
            if (hk_track_free(base + j * 256, HK_KIND_PTR, &d, &sz) != HK_OK || sz != j || d != (int)(j % 4)) bad++;
        }
    }
    return (void *)(uintptr_t)bad;
}

static uint64_t g_dropped[4];
static void dropped(int dev, uint64_t size) { g_dropped[dev] += size; }

void test_track(void) {
    int d;
    uint64_t sz;
    CHECK(hk_track_alloc(0xdead000, HK_KIND_PTR, 1, 4096) == HK_OK);
    CHECK(hk_track_alloc(0xdead000, HK_KIND_PTR, 1, 4096) == HK_EEXIST);
    CHECK(hk_track_alloc(0xdead000, HK_KIND_VMM, 2, 8192) == HK_OK); /* other key space */
    CHECK(hk_track_lookup(0xdead000, HK_KIND_PTR, &d, &sz) == HK_OK && d == 1 && sz == 4096);
    CHECK(hk_track_free(0xdead000, HK_KIND_VMM, &d, &sz) == HK_OK && d == 2 && sz == 8192);
    CHECK(hk_track_free(0xdead000, HK_KIND_VMM, &d, &sz) == HK_ENOENT);
    CHECK(hk_track_free(0xdead000, HK_KIND_PTR, NULL, NULL) == HK_OK);
    pthread_t th[8];
    for (uintptr_t t = 0; t < 8; t++) pthread_create(&th[t], NULL, track_worker, (void *)(t + 1));
    uintptr_t bad = 0;
    for (int t = 0; t < 8; t++) {
        void *r;
        pthread_join(th[t], &r);
        bad += (uintptr_t)r;
    }
    CHECK(bad == 0);
    /* an owner that goes takes its entries of that kind, and nothing else */
    for (uint64_t i = 0; i < 100; i++)
        CHECK(hk_track_alloc_owned(0x7000000 + i * 512, HK_KIND_PTR, 1, 512, 0xc1) == HK_OK);
    CHECK(hk_track_alloc_owned(0x8000000, HK_KIND_PTR, 2, 4096, 0xc2) == HK_OK); /* another context's */
    CHECK(hk_track_alloc_owned(0x8001000, HK_KIND_VMM, 3, 8192, 0xc1) == HK_OK); /* another kind */
    CHECK(hk_track_alloc(0x8002000, HK_KIND_PTR, 3, 1024) == HK_OK);             /* no owner */
    CHECK(hk_track_drop_owner(0xc1, HK_KIND_PTR, dropped) == 100 && g_dropped[1] == 100 * 512);
    CHECK(g_dropped[2] == 0 && g_dropped[3] == 0 && hk_track_drop_owner(0xc1, HK_KIND_PTR, dropped) == 0);
    CHECK(hk_track_drop_owner(0, HK_KIND_PTR, dropped) == 0); /* 0 owns nothing */
    CHECK(hk_track_lookup(0x7000000, HK_KIND_PTR, &d, &sz) == HK_ENOENT);
    CHECK(hk_track_free(0x8000000, HK_KIND_PTR, &d, &sz) == HK_OK && d == 2 && sz == 4096);
    CHECK(hk_track_free(0x8001000, HK_KIND_VMM, &d, &sz) == HK_OK && d == 3);
    CHECK(hk_track_free(0x8002000, HK_KIND_PTR, &d, &sz) == HK_OK && sz == 1024);
    printf("ok track\n");
}
