/* test_config.c -- the parser: memory quantities, shares, the configuration from the environment
   and from the config file (aliases, the file's authority). */
#include "core_tests.h"

void test_parse_mem(void) {
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

void test_parse_sm(void) {
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

void test_config(void) {
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
void test_config_sources(void) {
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
