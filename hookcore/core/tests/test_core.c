/* test_core.c -- unit and multi-process tests of the hookcore core (no GPU, no shim).
 *
 *   test_core [DIR]                  run every test; ledgers are created under DIR (default /tmp)
 *   test_core bench [DIR]            print the cost of reserve/release, tracking, open (no checks)
 *   test_core populate PATH D:N ... [--hold]
 *                                    open PATH with the config from the environment, reserve N bytes
 *                                    on device D for each argument, print "ready", and with --hold
 *                                    stay alive until stdin reaches EOF (used by the Python tests)
 *
 * Exit status 0 when every CHECK passed. Each test prints one line. This file holds main, the
 * helpers and `populate`/`bench`; the tests are in test_config.c (the parser), test_ledger.c (one
 * ledger), test_processes.c (processes and threads on one quota), test_global.c (the process-wide
 * API), test_limiter.c (the compute limiter's books), test_elastic.c (the clock elasticity a strict
 * cap learns, from synthetic batches) and test_priority.c (a device's priority board); core_tests.h
 * is what they share.
 */
#include <sys/wait.h>
#include <time.h>

#include "core_tests.h"

int g_failures;
char g_dir[1024] = "/tmp";

void ledger_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/hk-test-%d-%s.ledger", g_dir, (int)getpid(), name);
    unlink(buf);
}

hk_config config_of(const char *const *envp) {
    hk_config c;
    char err[HK_ERR_MAX];
    int rc = hk_config_parse(envp, &c, err, sizeof err);
    if (rc != HK_OK) {
        fprintf(stderr, "  config parse failed: %s\n", err);
        g_failures++;
    }
    return c;
}

hk_ledger *open_ok(const char *path, const hk_config *cfg) {
    hk_ledger *l = NULL;
    char err[HK_ERR_MAX];
    int rc = hk_ledger_open(path, cfg, 0, &l, err, sizeof err);
    if (rc != HK_OK) {
        fprintf(stderr, "  open %s failed: %s\n", path, err);
        g_failures++;
    }
    return l;
}

static int populate(int argc, char **argv) {
    hk_config c;
    char err[HK_ERR_MAX];
    if (hk_config_from_environ(&c, err, sizeof err) != HK_OK) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    hk_ledger *l = NULL;
    if (hk_ledger_open(argv[0], &c, 0, &l, err, sizeof err) != HK_OK) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    int hold = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hold") == 0) {
            hold = 1;
            continue;
        }
        int dev;
        unsigned long long n;
        if (sscanf(argv[i], "%d:%llu", &dev, &n) != 2) return 2;
        int rc = hk_ledger_reserve(l, dev, n);
        if (rc != HK_OK) {
            fprintf(stderr, "reserve %s: %s\n", argv[i], hk_strerror(rc));
            return 3;
        }
    }
    printf("ready %d %d\n", (int)getpid(), hk_ledger_slot_index(l));
    fflush(stdout);
    if (hold) {
        char buf[64];
        while (read(0, buf, sizeof buf) > 0) {}
    }
    return 0; /* exits without closing: the slot stays charged until reclaimed */
}

/* --------------------------------------------------------------------------------------------- */
/* test_core bench DIR: cost of the admission path (not a test; numbers for the report). */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double bench_pairs(hk_ledger *l, long n) {
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        if (hk_ledger_reserve(l, 0, MiB) != HK_OK) abort();
        hk_ledger_release(l, 0, MiB);
    }
    return (now_s() - t0) / (double)n * 1e9;
}

static int bench(void) {
    const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=64Gi", NULL};
    hk_config c = config_of(env);
    char path[1200];
    ledger_path(path, sizeof path, "bench");
    hk_ledger *l = open_ok(path, &c);
    if (!l) return 1;
    const long n = 2000000;
    printf("reserve+release, 1 process, 1 live slot:  %.1f ns/pair\n", bench_pairs(l, n));
    hk_ledger *others[7];
    for (int i = 0; i < 7; i++) others[i] = open_ok(path, &c);
    printf("reserve+release, 1 process, 8 live slots: %.1f ns/pair\n", bench_pairs(l, n));
    for (int i = 0; i < 7; i++) hk_ledger_close(others[i]);
    enum { NPROC = 8 };
    int pfd[2];
    if (pipe(pfd) != 0) return 1;
    for (int p = 0; p < NPROC; p++) {
        if (fork() == 0) {
            hk_ledger *m = open_ok(path, &c);
            double ns = bench_pairs(m, n / 4);
            if (write(pfd[1], &ns, sizeof ns) != sizeof ns) _exit(1);
            _exit(0);
        }
    }
    double sum = 0, worst = 0;
    for (int p = 0; p < NPROC; p++) {
        double ns = 0;
        if (read(pfd[0], &ns, sizeof ns) != sizeof ns) return 1;
        sum += ns;
        if (ns > worst) worst = ns;
        wait(NULL);
    }
    printf("reserve+release, %d processes at once:     %.1f ns/pair mean, %.1f worst\n", NPROC, sum / NPROC, worst);
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        hk_track_alloc((uint64_t)i << 12, HK_KIND_PTR, 0, MiB);
        hk_track_free((uint64_t)i << 12, HK_KIND_PTR, NULL, NULL);
    }
    printf("track_alloc+track_free:                   %.1f ns/pair\n", (now_s() - t0) / (double)n * 1e9);
    t0 = now_s();
    for (int i = 0; i < 200; i++) {
        hk_ledger *x = open_ok(path, &c);
        hk_ledger_close(x);
    }
    printf("ledger open+claim+close:                  %.1f us\n", (now_s() - t0) / 200 * 1e6);
    hk_ledger_close(l);
    unlink(path);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && strcmp(argv[1], "populate") == 0) return populate(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "bench") == 0) {
        if (argc >= 3) snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
        return bench();
    }
    if (argc >= 2) snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
    test_parse_mem();
    test_parse_sm();
    test_config();
    test_config_sources();
    test_reserve_release();
    test_two_handles();
    test_tampered_ledger();
    test_lost_slot_race();
    test_track();
    test_limiter_books();
    test_limiter_cost();
    test_elastic_converges();
    test_elastic_prior();
    test_elastic_given_prior();
    test_elastic_contention();
    test_elastic_bounded();
    test_power_bound();
    test_elastic_damped();
    test_board();
    test_validation();
    test_pid_reuse();
    test_creation_race();
    test_sigkill();
    test_concurrent();
    test_threads();
    test_global();
    test_global_file();
    test_orphan_child();
    if (g_failures) {
        printf("FAILED: %d check(s)\n", g_failures);
        return 1;
    }
    printf("all core tests passed\n");
    return 0;
}
