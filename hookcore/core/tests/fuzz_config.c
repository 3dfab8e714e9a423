/* fuzz_config.c -- random-input driver for the config parser, built with ASan + UBSan.
 *
 *   fuzz_config [ITERATIONS [SEED]]      (default 1000000, seed 1)
 *
 * Each iteration makes one input string (random bytes biased toward the quantity grammar, or a
 * mutation of a valid value) and feeds it to hk_parse_mem, hk_parse_sm and, every fourth time,
 * to hk_config_parse_source inside a random environment (with and without aliases) and as the
 * same entries written as a config file (random line ends, comments, stray bytes). Error buffers are heap blocks of random exact
 * size, so any overrun is caught. Invariants checked:
 *   - accepted memory values are in (0, HK_MEM_MAX]; accepted SM values in 1..100;
 *   - rejected values leave a non-empty, one-line, NUL-terminated message naming the variable;
 *   - plain decimal inputs agree with an independent oracle (strtoull-style with overflow);
 *   - a parsed config has no zero quota, SM limits in range and an absolute or empty path.
 * Exits non-zero at the first violation (sanitizers abort on memory errors).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../hookcore.h"

static uint64_t g_rng;

static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const char *const g_seeds[] = {
    "3000m",
    "2g",
    "512k",
    "10Gi",
    "512Mi",
    "1G",
    "1073741824",
    "1e9",
    "1.5Gi",
    "0.5Ki",
    "+7",
    "4Ei",
    "100",
    "50",
    "1",
    "007",
    "1E18",
    "2.50Mi",
    "1000e-3",
    "KIND-00112233-4455-6677-8899-aabbccddeeff",
    "/tmp/x.ledger",
    "4611686018427387904",
};
static const char g_alpha[] = "0123456789.eE+-kKmMgGiTPEi %x\n";

static void make_input(char *buf, size_t cap) {
    size_t n = 0;
    uint64_t r = rnd();
    if ((r & 3) == 0) { /* mutate a seed */
        const char *s = g_seeds[(r >> 8) % (sizeof g_seeds / sizeof g_seeds[0])];
        n = strlen(s);
        memcpy(buf, s, n);
        int edits = 1 + (int)((r >> 20) % 3);
        for (int e = 0; e < edits; e++) {
            uint64_t q = rnd();
            size_t pos = n ? (size_t)(q % (n + 1)) : 0;
            char c = (q >> 40) & 1 ? g_alpha[(q >> 16) % (sizeof g_alpha - 1)] : (char)(q >> 24);
            switch ((q >> 32) % 3) {
                case 0: /* insert */
                    if (n + 1 < cap) {
                        memmove(buf + pos + 1, buf + pos, n - pos);
                        buf[pos] = c;
                        n++;
                    }
                    break;
                case 1: /* delete */
                    if (pos < n) {
                        memmove(buf + pos, buf + pos + 1, n - pos - 1);
                        n--;
                    }
                    break;
                default: /* replace */
                    if (pos < n) buf[pos] = c;
            }
        }
    } else { /* grammar-biased random */
        size_t len = (size_t)((r >> 8) % 48);
        if (len >= cap) len = cap - 1;
        for (size_t i = 0; i < len; i++) {
            uint64_t q = rnd();
            unsigned k = (unsigned)(q % 100);
            if (k < 55)
                buf[n++] = (char)('0' + (q >> 8) % 10);
            else if (k < 95)
                buf[n++] = g_alpha[(q >> 8) % (sizeof g_alpha - 1)];
            else
                buf[n++] = (char)(1 + (q >> 8) % 255); /* any byte but NUL */
        }
    }
    buf[n] = '\0';
}

static void fail(const char *what, const char *in, const char *msg) {
    fprintf(stderr, "fuzz_config: %s for input \"", what);
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        if (*p >= 0x20 && *p < 0x7f)
            fputc(*p, stderr);
        else
            fprintf(stderr, "\\x%02x", *p);
    }
    fprintf(stderr, "\" (%s)\n", msg ? msg : "");
    exit(1);
}

static void check_msg(const char *in, const char *err, size_t errlen, const char *name) {
    if (errlen == 0) return;
    size_t len = strnlen(err, errlen);
    if (len == errlen) fail("message not NUL-terminated", in, "");
    if (len == 0 && errlen > 1) fail("empty rejection message", in, "");
    if (strchr(err, '\n') || strchr(err, '\r')) fail("multi-line message", in, err);
    if (errlen > 64 && strncmp(err, name, strlen(name)) != 0) fail("message does not name the variable", in, err);
}

/* Oracle for all-digit inputs: decimal value, accepted iff 0 < v <= HK_MEM_MAX. */
static int oracle_digits(const char *s, uint64_t *out) {
    unsigned __int128 v = 0;
    if (*s == '\0') return 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1; /* not applicable */
        v = v * 10 + (unsigned)(*p - '0');
        if (v > ((unsigned __int128)1 << 100)) v = ((unsigned __int128)1 << 100);
    }
    *out = v > HK_MEM_MAX ? 0 : (uint64_t)v;
    return v > 0 && v <= HK_MEM_MAX;
}

static const char *const g_names[] = {
    "HOOKCORE_MEMORY_LIMIT",
    "HOOKCORE_MEMORY_LIMIT_",
    "HOOKCORE_COMPUTE_LIMIT",
    "HOOKCORE_COMPUTE_LIMIT_",
    "HOOKCORE_LEDGER",
    "HOOKCORE_DEVICE_UUID_",
    "PATH",
    "OLD_MEM",
    "OLD_MEM_",
    "OLD_SM_",
    "HOOKCORE_X",
};
static const hk_env_alias g_aliases[] = {
    {"OLD_MEM", "HOOKCORE_MEMORY_LIMIT"}, {"OLD_SM", "HOOKCORE_COMPUTE_LIMIT"}, {NULL, NULL}};

static void check_config(const hk_config *c, int rc, const char *cerr, const char *in) {
    if (rc == HK_OK) {
        for (int d = 0; d < HK_MAX_DEVICES; d++) {
            if (c->mem_limit[d] == 0 || c->sm_limit[d] < 1 || c->sm_limit[d] > 100) fail("bad parsed config", in, "");
        }
        if (c->ledger_path[0] != '\0' && c->ledger_path[0] != '/') fail("relative ledger path", in, "");
        if (c->device_count > HK_MAX_DEVICES) fail("device count out of range", in, "");
    } else if (rc == HK_EFAILCLOSED) {
        if (cerr[0] == '\0' || strchr(cerr, '\n')) fail("bad config message", in, cerr);
        if (c->mem_limit[0] != 0 || c->origin != 0) fail("rejected config not zeroed", in, cerr);
    } else {
        fail("unexpected config return code", in, cerr);
    }
}

int main(int argc, char **argv) {
    unsigned long long iters = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000ull;
    g_rng = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    char in[64];
    unsigned long long accepted_mem = 0, accepted_sm = 0, configs = 0, configs_ok = 0, files_ok = 0;
    for (unsigned long long it = 0; it < iters; it++) {
        make_input(in, sizeof in);
        size_t errlen = (rnd() % 5 == 0) ? (size_t)(rnd() % 16) : HK_ERR_MAX;
        char *err = malloc(errlen ? errlen : 1);
        uint64_t v = 12345;
        int rc = hk_parse_mem("HOOKCORE_MEMORY_LIMIT_7", in, &v, errlen ? err : NULL, errlen);
        if (rc == HK_OK) {
            accepted_mem++;
            if (v == 0 || v > HK_MEM_MAX) fail("accepted an out-of-range quantity", in, "");
        } else if (rc == HK_EFAILCLOSED) {
            if (v != 0) fail("rejected value left a non-zero result", in, "");
            check_msg(in, err, errlen, "HOOKCORE_MEMORY_LIMIT_7=\"");
        } else {
            fail("unexpected return code", in, "");
        }
        uint64_t want;
        int o = oracle_digits(in, &want);
        if (o == 1 && (rc != HK_OK || v != want)) fail("decimal input disagrees with the oracle", in, "");
        if (o == 0 && rc == HK_OK) fail("accepted zero/overflowing decimal", in, "");

        uint32_t pct = 777;
        rc = hk_parse_sm("HOOKCORE_COMPUTE_LIMIT", in, &pct, errlen ? err : NULL, errlen);
        if (rc == HK_OK) {
            accepted_sm++;
            if (pct < 1 || pct > 100) fail("accepted an SM limit out of range", in, "");
        } else {
            check_msg(in, err, errlen, "HOOKCORE_COMPUTE_LIMIT=\"");
        }
        free(err);

        if ((it & 3) == 0) { /* a whole environment around this input */
            char names[6][96], entries[6][200];
            const char *envp[7];
            int n = 1 + (int)(rnd() % 6);
            for (int i = 0; i < n; i++) {
                uint64_t q = rnd();
                const char *base = g_names[q % (sizeof g_names / sizeof g_names[0])];
                size_t bl = strlen(base);
                if (base[bl - 1] == '_') {
                    static const char *const idx[] = {"0", "1", "15", "16", "01", "", "x", "3", "99999999999"};
                    snprintf(names[i], sizeof names[i], "%s%s", base, idx[(q >> 8) % 9]);
                } else {
                    snprintf(names[i], sizeof names[i], "%s", base);
                }
                char val[64];
                if (i == 0)
                    memcpy(val, in, sizeof val);
                else
                    make_input(val, sizeof val);
                snprintf(entries[i], sizeof entries[i], "%s=%s", names[i], val);
                envp[i] = entries[i];
            }
            envp[n] = NULL;
            hk_config c;
            char cerr[HK_ERR_MAX];
            configs++;
            hk_config_source src = {.envp = envp, .aliases = (rnd() & 1) ? g_aliases : NULL, .stem = "fuzz"};
            int crc = hk_config_parse_source(&src, &c, cerr, sizeof cerr);
            configs_ok += crc == HK_OK;
            check_config(&c, crc, cerr, in);
            /* the same entries as a config file, with assorted line ends, comments and stray bytes */
            char text[1600];
            size_t tl = 0;
            for (int i = 0; i < n; i++) {
                static const char *const seps[] = {"\n", "\r\n", "\n# note\n", "\n\n", " \n", "\r"};
                uint64_t q = rnd();
                tl += (size_t)snprintf(text + tl, sizeof text - tl, "%s%s", entries[i], seps[q % 6]);
                if ((q >> 8) % 17 == 0 && tl + 1 < sizeof text) text[tl++] = (char)(1 + (q >> 16) % 255);
                text[tl] = '\0';
            }
            hk_config_source fsrc = {.envp = envp, .file_text = text, .file_path = "/run/hookcore/fuzz/config"};
            crc = hk_config_parse_source(&fsrc, &c, cerr, sizeof cerr);
            files_ok += crc == HK_OK;
            check_config(&c, crc, cerr, text);
            if (crc == HK_OK && c.origin != HK_ORIGIN_FILE) fail("file config not marked as such", text, "");
        }
    }
    printf("fuzz_config: %llu inputs, %llu accepted as memory, %llu as SM limit, %llu environments "
           "(%llu valid, %llu valid as a config file): no crash, no invariant violation\n",
           iters, accepted_mem, accepted_sm, configs, configs_ok, files_ok);
    return 0;
}
