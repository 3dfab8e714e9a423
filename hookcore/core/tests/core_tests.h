/* core_tests.h -- what the core's C test files share: test_core.c holds main (every test in one
   run), the helpers and the globals below; test_config.c, test_ledger.c, test_processes.c,
   test_global.c, test_limiter.c, test_elastic.c and test_priority.c the tests. */
#ifndef HOOKCORE_CORE_TESTS_H
#define HOOKCORE_CORE_TESTS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../internal.h"
#include "../limiter.h"

extern int g_failures;   /* CHECKs failed so far (a child of run_in_child counts its own) */
extern char g_dir[1024]; /* where the tests create their ledgers */

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            g_failures++;                                                     \
        }                                                                     \
    } while (0)
#define CHECK_EQ_U64(a, b)                                                                                          \
    do {                                                                                                            \
        unsigned long long _a = (unsigned long long)(a), _b = (unsigned long long)(b);                              \
        if (_a != _b) {                                                                                             \
            fprintf(stderr, "  FAIL %s:%d: %s == %llu, expected %s == %llu\n", __FILE__, __LINE__, #a, _a, #b, _b); \
            g_failures++;                                                                                           \
        }                                                                                                           \
    } while (0)

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

/* A fresh ledger path for test `name` under g_dir (any old file removed). */
void ledger_path(char *buf, size_t n, const char *name);
/* The configuration of an environment (a failed parse counts as a failure). */
hk_config config_of(const char *const *envp);
/* hk_ledger_open(path, cfg) (a failed open counts as a failure; NULL then). */
hk_ledger *open_ok(const char *path, const hk_config *cfg);

/* The tests, in the order main runs them; each prints one "ok <name>" line. */
void test_parse_mem(void);
void test_parse_sm(void);
void test_config(void);
void test_config_sources(void);
void test_reserve_release(void);
void test_two_handles(void);
void test_tampered_ledger(void);
void test_lost_slot_race(void);
void test_track(void);
void test_limiter_books(void);
void test_limiter_cost(void);
void test_elastic_converges(void);
void test_elastic_prior(void);
void test_elastic_given_prior(void);
void test_elastic_contention(void);
void test_elastic_bounded(void);
void test_elastic_damped(void);
void test_power_bound(void);
void test_board(void);
void test_validation(void);
void test_pid_reuse(void);
void test_creation_race(void);
void test_sigkill(void);
void test_concurrent(void);
void test_threads(void);
void test_global(void);
void test_global_file(void);
void test_orphan_child(void);

#endif /* HOOKCORE_CORE_TESTS_H */
