/* test_core.c -- unit and multi-process tests of the hookcore core (no GPU, no shim).
 *
 *   test_core [DIR]                  run every test; ledgers are created under DIR (default /tmp)
 *   test_core bench [DIR]            print the cost of reserve/release, tracking, open (no checks)
 *   test_core populate PATH D:N ... [--hold]
 *                                    open PATH with the config from the environment, reserve N bytes
 *                                    on device D for each argument, print "ready", and with --hold
 *                                    stay alive until stdin reaches EOF (used by the Python tests)
 *
 * Exit status 0 when every CHECK passed. Each test prints one line.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../internal.h"
#include "../limiter.h"

static int g_failures;
static char g_dir[1024] = "/tmp";
static char g_global_path[1200]; /* the ledger of the hk_init tests (run in children) */

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

static void ledger_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/hk-test-%d-%s.ledger", g_dir, (int)getpid(), name);
    unlink(buf);
}

static hk_config config_of(const char *const *envp) {
    hk_config c;
    char err[HK_ERR_MAX];
    int rc = hk_config_parse(envp, &c, err, sizeof err);
    if (rc != HK_OK) {
        fprintf(stderr, "  config parse failed: %s\n", err);
        g_failures++;
    }
    return c;
}

static hk_ledger *open_ok(const char *path, const hk_config *cfg) {
    hk_ledger *l = NULL;
    char err[HK_ERR_MAX];
    int rc = hk_ledger_open(path, cfg, 0, &l, err, sizeof err);
    if (rc != HK_OK) {
        fprintf(stderr, "  open %s failed: %s\n", path, err);
        g_failures++;
    }
    return l;
}

/* --------------------------------------------------------------------------------------------- */

static void test_parse_mem(void) {
    static const struct {
        const char *in;
        unsigned long long want;
    } good[] = {
        {"1073741824", 1073741824ull},
        {"+1024", 1024},
        {"1", 1},
        {"007", 7},
        {"3000m", 3000 * MiB},
        {"2g", 2 * GiB},
        {"512k", 512 * 1024},
        {"512K", 512 * 1024},
        {"10Gi", 10 * GiB},
        {"512Mi", 512 * MiB},
        {"1Ki", 1024},
        {"1Ti", 1024 * GiB},
        {"1Pi", 1024ull * 1024 * GiB},
        {"2Ei", 2ull << 60},
        {"4Ei", 4ull << 60},
        {"1G", 1000000000ull},
        {"1M", 1000000ull},
        {"2T", 2000000000000ull},
        {"1P", 1000000000000000ull},
        {"1E", 1000000000000000000ull},
        {"1e9", 1000000000ull},
        {"1E9", 1000000000ull},
        {"1.5e3", 1500},
        {"1.5Gi", 1536 * MiB},
        {"0.5Ki", 512},
        {".5Ki", 512},
        {"2.", 2},
        {"1e+3", 1000},
        {"1000e-3", 1},
        {"2.50Mi", 2621440},
        {"0.001G", 1000000},
        {"1.0", 1},
        {"00000000000000000000000000000000000000000001", 1},
        {"4611686018427387904", 1ull << 62},
    };
    static const char *bad[] = {
        "",
        " 1",
        "1 ",
        "-1",
        "-0",
        "0",
        "0Gi",
        "0.0",
        "abc",
        "1gb",
        "1Gi!",
        "1GB",
        "0x10",
        "1.3k",
        "1e-1",
        ".",
        "+",
        "e9",
        "1e",
        "1e+",
        "1ee9",
        "1i",
        "1Ki ",
        "1..5",
        "1,000",
        "1_000",
        "4611686018427387905",
        "5Ei",
        "8Ei",
        "18446744073709551616",
        "1e19",
        "1e1000",
        "99999999999e99999",
        "123456789012345678901234567890123456789",
        "1t",
        "1 Gi",
        "1\n",
        "\xff",
        "1mi",
        "1KI",
        "nan",
        "inf",
        "1e9Gi",
        "1%",
    };
    char err[HK_ERR_MAX];
    uint64_t v;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int rc = hk_parse_mem("HOOKCORE_MEMORY_LIMIT", good[i].in, &v, err, sizeof err);
        if (rc != HK_OK || v != good[i].want) {
            fprintf(stderr, "  FAIL parse_mem(\"%s\") = %d/%llu, want %llu (%s)\n", good[i].in, rc,
                    (unsigned long long)v, good[i].want, err);
            g_failures++;
        }
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        int rc = hk_parse_mem("HOOKCORE_MEMORY_LIMIT_3", bad[i], &v, err, sizeof err);
        if (rc != HK_EFAILCLOSED || strstr(err, "HOOKCORE_MEMORY_LIMIT_3=\"") != err || strchr(err, '\n')) {
            fprintf(stderr, "  FAIL parse_mem(\"%s\") accepted or bad message: rc=%d v=%llu err=%s\n", bad[i], rc,
                    (unsigned long long)v, err);
            g_failures++;
        }
    }
    hk_parse_mem("HOOKCORE_MEMORY_LIMIT", "12x", &v, err, sizeof err);
    CHECK(strstr(err, "HOOKCORE_MEMORY_LIMIT=\"12x\"") != NULL && strstr(err, "unknown unit \"x\"") != NULL);
    hk_parse_mem("HOOKCORE_MEMORY_LIMIT", "1\n2", &v, err, sizeof err);
    CHECK(strstr(err, "\"1\\x0a2\"") != NULL);
    /* a tiny error buffer is truncated, never overrun */
    char small[8];
    hk_parse_mem("HOOKCORE_MEMORY_LIMIT", "garbage", &v, small, sizeof small);
    CHECK(strlen(small) == 7);
    printf("ok parse_mem (%zu good, %zu bad)\n", sizeof good / sizeof good[0], sizeof bad / sizeof bad[0]);
}

static void test_parse_sm(void) {
    static const struct {
        const char *in;
        unsigned want;
    } good[] = {
        {"1", 1}, {"50", 50}, {"100", 100}, {"050", 50}, {"0100", 100},
    };
    static const char *bad[] = {
        "", "0", "00", "101", "1000", "-5", "+5", "50%", "5.5", "abc", " 5", "5 ", "99999999999999999999", "1e2"};
    char err[HK_ERR_MAX];
    uint32_t v;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int rc = hk_parse_sm("HOOKCORE_COMPUTE_LIMIT", good[i].in, &v, err, sizeof err);
        if (rc != HK_OK || v != good[i].want) {
            fprintf(stderr, "  FAIL parse_sm(\"%s\") = %d/%u (%s)\n", good[i].in, rc, v, err);
            g_failures++;
        }
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = hk_parse_sm("HOOKCORE_COMPUTE_LIMIT_0", bad[i], &v, err, sizeof err);
        if (rc != HK_EFAILCLOSED || strstr(err, "HOOKCORE_COMPUTE_LIMIT_0=\"") != err) {
            fprintf(stderr, "  FAIL parse_sm(\"%s\") accepted: %d %s\n", bad[i], rc, err);
            g_failures++;
        }
    }
    hk_parse_sm("HOOKCORE_COMPUTE_LIMIT", "0", &v, err, sizeof err);
    CHECK(strstr(err, "0 is not a valid compute share") != NULL);
    printf("ok parse_sm\n");
}

static void test_config(void) {
    char err[HK_ERR_MAX];
    hk_config c;
    {
        const char *env[] = {"PATH=/bin",
                             "HOOKCORE_MEMORY_LIMIT=2g",
                             "HOOKCORE_MEMORY_LIMIT_1=512Mi",
                             "HOOKCORE_COMPUTE_LIMIT=30",
                             "HOOKCORE_COMPUTE_LIMIT_2=100",
                             "NOEQUALS",
                             "HOOKCORE_MEMORY_LIMIT=1g", /* duplicate: first wins */
                             NULL};
        CHECK(hk_config_parse(env, &c, err, sizeof err) == HK_OK);
        CHECK_EQ_U64(c.mem_limit[0], 2 * GiB);
        CHECK_EQ_U64(c.mem_limit[1], 512 * MiB);
        CHECK_EQ_U64(c.mem_limit[15], 2 * GiB);
        CHECK_EQ_U64(c.sm_limit[0], 30);
        CHECK_EQ_U64(c.sm_limit[2], 100);
        CHECK_EQ_U64(c.device_count, 3);
        CHECK(!c.uuid_keyed);
        CHECK(strcmp(c.ledger_path, HK_DEFAULT_LEDGER) == 0);
        CHECK((c.flags[1] & HK_CFG_MEM_SET) && !(c.flags[2] & HK_CFG_SM_SET));
    }
    {
        const char *env[] = {"HOME=/root", NULL};
        CHECK(hk_config_parse(env, &c, err, sizeof err) == HK_OK);
        CHECK(c.mem_limit[0] == HK_MEM_UNLIMITED && c.sm_limit[0] == 100 && c.ledger_path[0] == '\0');
        CHECK(c.device_count == 0);
        CHECK(hk_config_parse(NULL, &c, err, sizeof err) == HK_OK);
    }
    {
        const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=1Gi", "HOOKCORE_DEVICE_UUID_0=KIND-aaaa",
                             "HOOKCORE_DEVICE_UUID_1=kind-BBBB", "HOOKCORE_LEDGER=/x/y.ledger", NULL};
        CHECK(hk_config_parse(env, &c, err, sizeof err) == HK_OK);
        CHECK(c.uuid_keyed && c.device_count == 2);
        CHECK(strcmp(c.uuid[1], "kind-BBBB") == 0);
        CHECK(strcmp(c.ledger_path, "/x/y.ledger") == 0);
        CHECK(c.mem_limit[1] == HK_MEM_UNLIMITED);
    }
    static const struct {
        const char *env;
        const char *needle;
    } bad[] = {
        {"HOOKCORE_MEMORY_LIMIT_1=12x", "HOOKCORE_MEMORY_LIMIT_1=\"12x\""},
        {"HOOKCORE_MEMORY_LIMIT_x=1g", "HOOKCORE_MEMORY_LIMIT_x=\"1g\": bad device index"},
        {"HOOKCORE_MEMORY_LIMIT_01=1g", "bad device index"},
        {"HOOKCORE_MEMORY_LIMIT_16=1g", "bad device index"},
        {"HOOKCORE_MEMORY_LIMIT_=1g", "bad device index"},
        {"HOOKCORE_COMPUTE_LIMIT=0", "HOOKCORE_COMPUTE_LIMIT=\"0\""},
        {"HOOKCORE_COMPUTE_LIMIT_3=150", "out of range"},
        {"HOOKCORE_MEMORY_LIMIT=", "empty value"},
        {"HOOKCORE_MEMORY_LIMIT=-1g", "negative"},
        {"HOOKCORE_LEDGER=relative/path", "not an absolute path"},
        {"HOOKCORE_LEDGER=", "empty path"},
        {"HOOKCORE_DEVICE_UUID_0=GPU 1", "invalid character"},
        {"HOOKCORE_DEVICE_UUID_0=", "empty UUID"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=1g", bad[i].env, NULL};
        int rc = hk_config_parse(env, &c, err, sizeof err);
        if (rc != HK_EFAILCLOSED || strstr(err, bad[i].needle) == NULL || c.mem_limit[0] != 0) {
            fprintf(stderr, "  FAIL config %s: rc=%d err=%s\n", bad[i].env, rc, err);
            g_failures++;
        }
    }
    {
        const char *env[] = {"HOOKCORE_DEVICE_UUID_0=KIND-1", "HOOKCORE_MEMORY_LIMIT_1=1g", NULL};
        CHECK(hk_config_parse(env, &c, err, sizeof err) == HK_EFAILCLOSED);
        CHECK(strstr(err, "HOOKCORE_DEVICE_UUID_1 is not") != NULL);
    }
    {
        const char *env[] = {"HOOKCORE_DEVICE_UUID_0=KIND-abc", "HOOKCORE_DEVICE_UUID_3=ABC", NULL};
        CHECK(hk_config_parse(env, &c, err, sizeof err) == HK_EFAILCLOSED);
        CHECK(strstr(err, "same device as HOOKCORE_DEVICE_UUID_0") != NULL);
    }
    {
        const char *u = "KIND-00112233-4455-6677-8899-aabbccddeeff";
        CHECK(hk_uuid_equal(u, "00112233-4455-6677-8899-AABBCCDDEEFF"));
        CHECK(hk_uuid_equal(u, "kind-00112233-4455-6677-8899-aabbccddeeff"));
        CHECK(hk_uuid_equal("Xy-1", "xY-1"));
        CHECK(!hk_uuid_equal(u, "KIND-00112233-4455-6677-8899-aabbccddeefe"));
        /* a leading hex group is the UUID itself, not a kind word */
        CHECK(!hk_uuid_equal("abcdef12-34", "34"));
        CHECK(!hk_uuid_equal("beef-1", "1"));
        CHECK(!hk_uuid_equal("TOOLONGWORD-1", "1"));
    }
    CHECK(!hk_uuid_equal("", ""));
    printf("ok config\n");
}

/* The config file, aliases, the file's authority over the environment. */
static void test_config_sources(void) {
    char err[HK_ERR_MAX];
    hk_config c;
    static const hk_env_alias aliases[] = {{"OLD_MEM", "HOOKCORE_MEMORY_LIMIT"},
                                           {"OLD_SM", "HOOKCORE_COMPUTE_LIMIT"},
                                           {"OLD_LEDGER", "HOOKCORE_LEDGER"},
                                           {NULL, NULL}};
    {
        const char *env[] = {"OLD_MEM=1Gi", "OLD_MEM_2=2Gi", "OLD_SM_1=30", "OLD_LEDGER=/a/b", "OLD_MEMX=5", NULL};
        hk_config_source src = {.envp = env, .aliases = aliases, .stem = "unit"};
        CHECK(hk_config_parse_source(&src, &c, err, sizeof err) == HK_OK);
        CHECK_EQ_U64(c.mem_limit[0], GiB);
        CHECK_EQ_U64(c.mem_limit[2], 2 * GiB);
        CHECK_EQ_U64(c.sm_limit[1], 30);
        CHECK(strcmp(c.ledger_path, "/a/b") == 0 && c.origin == HK_ORIGIN_ENV);
    }
    {
        const char *env[] = {"OLD_MEM_0=1Gi", "HOOKCORE_MEMORY_LIMIT_0=1073741824", NULL}; /* agree: fine */
        hk_config_source src = {.envp = env, .aliases = aliases};
        CHECK(hk_config_parse_source(&src, &c, err, sizeof err) == HK_OK);
        const char *env2[] = {"OLD_MEM_0=1Gi", "HOOKCORE_MEMORY_LIMIT_0=2Gi", NULL};
        src.envp = env2;
        CHECK(hk_config_parse_source(&src, &c, err, sizeof err) == HK_EFAILCLOSED);
        CHECK(strstr(err, "conflicts with OLD_MEM_0") != NULL && c.mem_limit[0] == 0);
    }
    {
        const char *env[] = {"OLD_MEM_0=1Gi", "HOOKCORE_LOG=debug", NULL}; /* env only without aliases */
        hk_config_source src = {.envp = env, .stem = "unit"};
        CHECK(hk_config_parse_source(&src, &c, err, sizeof err) == HK_OK);
        CHECK(c.origin == HK_ORIGIN_NONE && c.mem_limit[0] == HK_MEM_UNLIMITED && c.ledger_path[0] == '\0');
    }
    {
        const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=1Gi", NULL};
        hk_config_source src = {.envp = env, .stem = "unit"};
        CHECK(hk_config_parse_source(&src, &c, err, sizeof err) == HK_OK);
        CHECK(strcmp(c.ledger_path, "/tmp/hookcore-unit.ledger") == 0);
    }
    {
        const char *env[] = {"HOOKCORE_MEMORY_LIMIT_0=7Gi", NULL}; /* ignored: the file wins */
        hk_config_source src = {.envp = env,
                                .aliases = aliases,
                                .file_path = "/run/x/vgpu/config",
                                .file_text =
                                    "# claim\r\n\nHOOKCORE_MEMORY_LIMIT_1=3Gi\r\nHOOKCORE_COMPUTE_LIMIT_1=40\n"};
        CHECK(hk_config_parse_source(&src, &c, err, sizeof err) == HK_OK);
        CHECK(c.origin == HK_ORIGIN_FILE && c.mem_limit[0] == HK_MEM_UNLIMITED);
        CHECK_EQ_U64(c.mem_limit[1], 3 * GiB);
        CHECK_EQ_U64(c.sm_limit[1], 40);
        CHECK(strcmp(c.ledger_path, "/run/x/vgpu/ledger") == 0);
        src.file_text = ""; /* an empty file: a claim without limits, still not dormant */
        CHECK(hk_config_parse_source(&src, &c, err, sizeof err) == HK_OK && c.origin == HK_ORIGIN_FILE);
    }
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"HOOKCORE_MEMORY_LIMIT_0=12x\n", "config file /c line 1: HOOKCORE_MEMORY_LIMIT_0=\"12x\": unknown unit"},
        {"\nOLD_MEM_0=1Gi\n", "line 2: unknown key OLD_MEM_0"},
        {"HOOKCORE_MEMORY_LIMIT_0=1Gi\nHOOKCORE_MEMORY_LIMIT_0=1Gi\n",
         "line 2: HOOKCORE_MEMORY_LIMIT_0=\"1Gi\": set twice"},
        {"HOOKCORE_MEMORY_LIMIT_0 = 1Gi\n", "no spaces around '='"},
        {"hookcore_ledger=/x\n", "is not a KEY=VALUE line"},
        {"just words\n", "line 1: \"just words\" is not a KEY=VALUE line"},
        {"=1\n", "is not a KEY=VALUE line"},
        {"HOOKCORE_LEDGER=relative\n", "not an absolute path"},
        {"HOOKCORE_COMPUTE_LIMIT_16=5\n", "bad device index"},
        {"HOOKCORE_DEVICE_UUID_0=KIND-a\nHOOKCORE_MEMORY_LIMIT_1=1Gi\n",
         "HOOKCORE_MEMORY_LIMIT_1 is set but HOOKCORE_DEVICE_UUID_1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hk_config_source src = {.file_text = bad[i].text, .file_path = "/c"};
        int rc = hk_config_parse_source(&src, &c, err, sizeof err);
        if (rc != HK_EFAILCLOSED || strstr(err, bad[i].needle) == NULL || strchr(err, '\n') != NULL) {
            fprintf(stderr, "  FAIL config file %s: rc=%d err=%s\n", bad[i].text, rc, err);
            g_failures++;
        }
    }
    char p[64];
    CHECK(hk_config_file_path("vgpu", p, sizeof p) == HK_OK && strcmp(p, HK_CONFIG_ROOT "/vgpu/config") == 0);
    CHECK(hk_config_file_path("../etc", p, sizeof p) == HK_EINVAL && hk_config_file_path("", p, sizeof p) == HK_EINVAL);
    printf("ok config_sources\n");
}

static void test_reserve_release(void) {
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
static void test_two_handles(void) {
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
static void test_tampered_ledger(void) {
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

static void test_lost_slot_race(void) {
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

/* --------------------------------------------------------------------------------------------- */
/* 8 processes hammer one device; a shared counter tracks what they hold between reserve and
   release; its maximum must never exceed the quota. */

typedef struct shared_obs {
    _Atomic uint64_t cur, max, ok, fail;
} shared_obs;

static void test_concurrent(void) {
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

static void test_threads(void) {
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

/* --------------------------------------------------------------------------------------------- */

static void test_sigkill(void) {
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
static void test_pid_reuse(void) {
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

/* --------------------------------------------------------------------------------------------- */

static void test_validation(void) {
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
static void test_creation_race(void) {
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

/* --------------------------------------------------------------------------------------------- */
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

static void test_global_file(void) {
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
static void test_orphan_child(void) {
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

static void test_global(void) {
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

/* --------------------------------------------------------------------------------------------- */

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

static void test_track(void) {
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
    printf("ok track\n");
}

/* --------------------------------------------------------------------------------------------- */

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

/* The limiter's books on a clock the test sets (hk_limiter_balance takes `now`): refills grant
   share x time up to the burst, charges add to charged, and granted - charged is the balance. */
static void test_limiter_books(void) {
    static _Alignas(64) unsigned char area[HK_LIMITER_BYTES];
    memset(area, 0, sizeof area);
    hk_limiter lim;
    hk_limiter_attach(&lim, area, 30);
    CHECK(lim.shared == (hk_limiter_shared *)(void *)area);
    int64_t t0 = 1000000000000LL;
    hk_atomic_store_relaxed(&lim.shared->xlast_refill_ns, t0);
    hk_atomic_store_relaxed(&lim.xlocal_last_ns, t0);
    hk_limiter_stats st;

    CHECK(hk_limiter_balance(&lim, t0 + 20000000) == 6000000); /* 20 ms at 30% */
    hk_limiter_charge(&lim, 16000000);                         /* 16 ms of work: 10 ms in debt */
    CHECK(hk_limiter_balance(&lim, t0 + 20000000) == -10000000);
    CHECK(hk_limiter_wait_ns(&lim, -10000000) == 20000000); /* repaid in 33 ms: wait at most 20, re-check */
    hk_limiter_read(area, &st);
    CHECK(st.active == 1 && st.share == 30 && st.charged_ns == 16000000 && st.granted_ns == 6000000);
    CHECK(st.charged_ns - st.granted_ns == -st.tokens_ns);

    CHECK(hk_limiter_balance(&lim, t0 + 20000000 + 33333334) == 0);            /* 33.3 ms later: repaid */
    CHECK(hk_limiter_balance(&lim, t0 + 2000000000LL) == HK_LIMITER_BURST_NS); /* idle: only the burst */
    hk_limiter_read(area, &st);
    CHECK(st.granted_ns == 16000000 + HK_LIMITER_BURST_NS && st.tokens_ns == HK_LIMITER_BURST_NS);

    /* a balance written above the burst (by a tenant: the area is in its ledger) grants nothing */
    hk_atomic_store_relaxed(&lim.shared->xtokens_ns, 1LL << 62);
    CHECK(hk_limiter_balance(&lim, t0 + 3000000000LL) == HK_LIMITER_BURST_NS);
    hk_limiter_read(area, &st);
    CHECK(st.granted_ns == 16000000 + HK_LIMITER_BURST_NS);
    printf("ok limiter_books (granted, charged, debt, burst cap, written balance)\n");
}

/* A batch costs device time x its context's SM fraction (x the clock ratio under a strict cap);
   an unknown or impossible fraction is a full charge (review 2026-12-04 #5: the hook's ceiling
   under MPS without limiting an honest client twice). */
static void test_limiter_cost(void) {
    CHECK(hk_limiter_cost(10000000, HK_SM_PPM_FULL, 0) == 10000000);     /* all SMs, no strict cap */
    CHECK(hk_limiter_cost(10000000, 300000, 0) == 3000000);              /* 30% of the SMs */
    CHECK(hk_limiter_cost(13200000, 40 * 1000000u / 132, 0) == 3999996); /* 40 of 132 SMs */
    CHECK(hk_limiter_cost(1000001, 300000, 0) == 300001);                /* rounded up */
    CHECK(hk_limiter_cost(10000000, 0, 0) == 10000000);                  /* unknown: full */
    CHECK(hk_limiter_cost(10000000, HK_SM_PPM_FULL + 1, 0) == 10000000); /* above the device: full */
    CHECK(hk_limiter_cost(10000000, 300000, 1500) == 4500000);           /* both factors multiply */
    CHECK(hk_limiter_cost(10000000, 300000, 800) == 3000000);            /* a slowdown is not refunded */
    CHECK(hk_limiter_cost(1, 1, 0) == 1);                                /* never rounds work to nothing */
    CHECK(hk_limiter_cost(0, 300000, 0) == 0 && hk_limiter_cost(-5, 300000, 0) == 0);
    CHECK(hk_limiter_cost(INT64_MAX, 500000, 0) == INT64_MAX / 2 + 1); /* no overflow on the way */

    static _Alignas(64) unsigned char area[HK_LIMITER_BYTES];
    memset(area, 0, sizeof area);
    hk_limiter lim;
    hk_limiter_attach(&lim, area, 30);
    hk_limiter_stats st;
    hk_limiter_read(area, &st);
    CHECK(st.device_ns == 0 && st.sm_ppm == 0); /* nothing charged yet */
    CHECK(hk_limiter_charge_work(&lim, 10000000, 300000, 0) == 3000000);
    CHECK(hk_limiter_charge_work(&lim, 10000000, 0, 0) == 10000000);
    hk_limiter_read(area, &st);
    CHECK(st.charged_ns == 13000000 && st.device_ns == 20000000 && st.sm_ppm == HK_SM_PPM_FULL);
    CHECK(offsetof(hk_limiter_shared, xgranted_ns) == 40 && offsetof(hk_limiter_shared, xdevice_ns) == 48 &&
          offsetof(hk_limiter_shared, xsm_ppm) == 56); /* appended: older readers keep their offsets */
    printf("ok limiter_cost (SM fraction x clock ratio, fail safe, statistics)\n");
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
