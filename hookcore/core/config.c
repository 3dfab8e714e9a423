/* config.c -- strict parsing of a claim's configuration (see hookcore.h for the grammar).
 *
 * Two sources, one grammar: the config file (KEY=VALUE lines, vendor-neutral keys) and the
 * environment (the same keys, plus the legacy names a shim maps onto them, e.g. HAMi's). Pure: no
 * globals, no getenv, no I/O (the caller reads the file). Every rejection produces one line naming
 * the key, its value and, for the file, the line. The values themselves (quantities, shares,
 * UUIDs) are read by config_value.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

extern char **environ;

/* ---------------------------------------------------------------------------------------------
   Keys: the vendor-neutral names, and the sources they come from                              */

enum { V_MEM, V_SM, V_UUID, V_PATH, V_MODE, V_MHZ, V_ELAST, V_CTX, V_SMS, V_PRIO, V_BOARD };

typedef struct key_spec {
    const char *name; /* exact name, or the prefix before <i> when indexed */
    int kind;
    int indexed;
} key_spec;

/* Longest names first where one is a prefix of another ("..._LIMIT_" before "..._LIMIT"). */
static const key_spec g_keys[] = {
    {"HOOKCORE_MEMORY_LIMIT_", V_MEM, 1},    {"HOOKCORE_MEMORY_LIMIT", V_MEM, 0},
    {"HOOKCORE_COMPUTE_LIMIT_", V_SM, 1},    {"HOOKCORE_COMPUTE_LIMIT", V_SM, 0},
    {"HOOKCORE_COMPUTE_MODE_", V_MODE, 1},   {"HOOKCORE_COMPUTE_MODE", V_MODE, 0},
    {"HOOKCORE_COMPUTE_REF_MHZ_", V_MHZ, 1}, {"HOOKCORE_COMPUTE_ELASTICITY_", V_ELAST, 1},
    {"HOOKCORE_DEVICE_UUID_", V_UUID, 1},    {"HOOKCORE_CONTEXT_MEMORY_", V_CTX, 1},
    {"HOOKCORE_CONTEXT_MEMORY", V_CTX, 0},   {"HOOKCORE_DEVICE_SMS_", V_SMS, 1},
    {"HOOKCORE_LEDGER", V_PATH, 0},          {"HOOKCORE_PRIORITY_BOARD", V_BOARD, 0},
    {"HOOKCORE_PRIORITY_", V_PRIO, 1},       {"HOOKCORE_PRIORITY", V_PRIO, 0},
};
#define NKEYS (sizeof g_keys / sizeof g_keys[0])

static int uuid_char_ok(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || hk__is_digit(c) || c == '-' || c == '_' || c == '/' ||
           c == ':' || c == '.';
}

/* Index suffix: "0".."15", no sign, no leading zero. -1 if malformed. */
static int parse_index(const char *s, size_t n) {
    int v = 0;
    if (n == 0 || n > 2 || (n > 1 && s[0] == '0')) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!hk__is_digit(s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v < HK_MAX_DEVICES ? v : -1;
}

#define NAME_MAX_LEN 80

typedef struct parse_state {
    hk_config *out;
    int from_file; /* 1: file rules (unknown keys and repeats are errors) */
    int any_key;   /* a configuration key was seen */
    int max_index;
    uint64_t mem_default;
    uint32_t sm_default;
    uint32_t mode_default;
    char mode_default_by[NAME_MAX_LEN];
    char mode_by[HK_MAX_DEVICES][NAME_MAX_LEN];
    char mhz_by[HK_MAX_DEVICES][NAME_MAX_LEN];
    char elast_by[HK_MAX_DEVICES][NAME_MAX_LEN];
    char sms_by[HK_MAX_DEVICES][NAME_MAX_LEN];
    char mem_default_by[NAME_MAX_LEN]; /* the name that set it, for messages ("" = unset) */
    char sm_default_by[NAME_MAX_LEN];
    char path_by[NAME_MAX_LEN];
    char mem_by[HK_MAX_DEVICES][NAME_MAX_LEN];
    char sm_by[HK_MAX_DEVICES][NAME_MAX_LEN];
    char uuid_by[HK_MAX_DEVICES][NAME_MAX_LEN];
    uint64_t ctx_default;
    char ctx_default_by[NAME_MAX_LEN];
    char ctx_by[HK_MAX_DEVICES][NAME_MAX_LEN];
    uint32_t prio_default;
    char prio_default_by[NAME_MAX_LEN];
    char prio_by[HK_MAX_DEVICES][NAME_MAX_LEN];
    char board_by[NAME_MAX_LEN];
} parse_state;

static void copy_name(char dst[NAME_MAX_LEN], const char *name, size_t n) {
    if (n > NAME_MAX_LEN - 1) n = NAME_MAX_LEN - 1;
    memcpy(dst, name, n);
    dst[n] = '\0';
}

/* Map `name` (nlen bytes) through the aliases onto a neutral name in `canon`. Returns 1 if the
   name is an alias or a neutral key, 0 if it is something else. */
static int canonical(const char *name, size_t nlen, const hk_env_alias *aliases, char *canon, size_t cap) {
    for (size_t a = 0; aliases != NULL && aliases[a].name != NULL; a++) {
        size_t al = strlen(aliases[a].name);
        if (nlen < al || strncmp(name, aliases[a].name, al) != 0) continue;
        if (nlen > al && name[al] != '_') continue; /* OLD_LIMITX is no alias of OLD_LIMIT */
        int n = snprintf(canon, cap, "%s%.*s", aliases[a].key, (int)(nlen - al), name + al);
        return n > 0 && (size_t)n < cap;
    }
    if (nlen < 9 || strncmp(name, "HOOKCORE_", 9) != 0 || nlen >= cap) return 0;
    memcpy(canon, name, nlen);
    canon[nlen] = '\0';
    return 1;
}

/* Every failure leaves *out zeroed (no half-parsed quota can be used by mistake). */
static int fail(parse_state *st) {
    memset(st->out, 0, sizeof *st->out);
    return HK_EFAILCLOSED;
}

/* A second value for a key that was already set: the file allows none; in the environment the
   first occurrence wins (like getenv), but an alias and the neutral name that disagree fail. */
static int repeated(parse_state *st, const char *by, const char *name, const char *value,
                    int (*parse)(const char *, const char *, void *, char *, size_t), void *prev, size_t size,
                    char *err, size_t errlen) {
    char q[128];
    if (st->from_file) {
        hk__quote(q, sizeof q, value);
        hk__errf(err, errlen, "%s=\"%s\": set twice (each key may appear once)", name, q);
        return HK_EFAILCLOSED;
    }
    if (strcmp(by, name) == 0) return HK_OK;
    unsigned char cur[HK_PATH_MAX];
    if (parse(name, value, cur, err, errlen) != HK_OK) return HK_EFAILCLOSED;
    if (memcmp(cur, prev, size) != 0) {
        hk__quote(q, sizeof q, value);
        hk__errf(err, errlen, "%s=\"%s\" conflicts with %s (two names for one setting with different values)", name, q,
                 by);
        return HK_EFAILCLOSED;
    }
    return HK_OK;
}

static int parse_mem_v(const char *n, const char *v, void *o, char *e, size_t el) {
    return hk_parse_mem(n, v, (uint64_t *)o, e, el);
}
static int parse_ctx_v(const char *n, const char *v, void *o, char *e, size_t el) {
    if (strcmp(v, "0") == 0) {
        *(uint64_t *)o = 0;
        return HK_OK;
    }
    return hk_parse_mem(n, v, (uint64_t *)o, e, el);
}
static int parse_sm_v(const char *n, const char *v, void *o, char *e, size_t el) {
    return hk_parse_sm(n, v, (uint32_t *)o, e, el);
}

static int parse_mode_v(const char *name, const char *value, void *o, char *err, size_t errlen) {
    uint32_t *out = (uint32_t *)o;
    if (strcmp(value, "share") == 0)
        *out = HK_COMPUTE_SHARE;
    else if (strcmp(value, "strict") == 0)
        *out = HK_COMPUTE_STRICT;
    else
        return hk__reject(name, value, err, errlen,
                          "expected share (device-time share, the default) or strict "
                          "(throughput held to the share at the full-load clock)");
    return HK_OK;
}

static int parse_mhz_v(const char *name, const char *value, void *o, char *err, size_t errlen) {
    uint32_t v = 0, *out = (uint32_t *)o;
    size_t n = strlen(value);
    if (n == 0 || n > 5 || value[0] == '0')
        return hk__reject(name, value, err, errlen, "expected a clock in MHz, 1..99999");
    for (size_t i = 0; i < n; i++) {
        if (!hk__is_digit(value[i])) return hk__reject(name, value, err, errlen, "expected a clock in MHz, 1..99999");
        v = v * 10 + (uint32_t)(value[i] - '0');
    }
    *out = v;
    return HK_OK;
}

/* A clock elasticity: a decimal fraction 0..1 with at most three decimals ("0.45", "1", "0"), x1000. */
static int parse_elasticity_v(const char *name, const char *value, void *o, char *err, size_t errlen) {
    static const char *why = "expected a clock elasticity, a decimal from 0 to 1 with at most 3 decimals (0.45)";
    uint32_t *out = (uint32_t *)o, whole, milli = 0, scale = 100;
    size_t n = strlen(value), i = 1;
    if (n == 0 || n > 5 || (value[0] != '0' && value[0] != '1')) return hk__reject(name, value, err, errlen, why);
    whole = (uint32_t)(value[0] - '0');
    if (n > 1) {
        if (value[1] != '.' || n == 2) return hk__reject(name, value, err, errlen, why);
        for (i = 2; i < n; i++, scale /= 10) {
            if (!hk__is_digit(value[i])) return hk__reject(name, value, err, errlen, why);
            milli += (uint32_t)(value[i] - '0') * scale;
        }
    }
    if (whole == 1 && milli != 0) return hk__reject(name, value, err, errlen, why);
    *out = whole * 1000 + milli;
    return HK_OK;
}

static int parse_prio_v(const char *name, const char *value, void *o, char *err, size_t errlen) {
    if (strcmp(value, "high") == 0)
        *(uint32_t *)o = HK_PRIORITY_HIGH;
    else if (strcmp(value, "normal") == 0)
        *(uint32_t *)o = HK_PRIORITY_NORMAL;
    else
        return hk__reject(name, value, err, errlen,
                          "expected high (normal claims wait while it has work) or normal (the default)");
    return HK_OK;
}

/* The device's SM count, as the daemon read it from the vendor's management library: 1..HK_SMS_MAX. */
static int parse_sms_v(const char *name, const char *value, void *o, char *err, size_t errlen) {
    uint32_t v = 0, *out = (uint32_t *)o;
    size_t n = strlen(value);
    if (n == 0 || n > 4 || value[0] == '0')
        return hk__reject(name, value, err, errlen, "expected the device's SM count, 1..4096");
    for (size_t i = 0; i < n; i++) {
        if (!hk__is_digit(value[i]))
            return hk__reject(name, value, err, errlen, "expected the device's SM count, 1..4096");
        v = v * 10 + (uint32_t)(value[i] - '0');
    }
    if (v > HK_SMS_MAX) return hk__reject(name, value, err, errlen, "expected the device's SM count, 1..4096");
    *out = v;
    return HK_OK;
}

static int parse_uuid_v(const char *name, const char *value, void *o, char *err, size_t errlen) {
    size_t ulen = strlen(value);
    char *out = (char *)o;
    memset(out, 0, HK_UUID_MAX);
    if (ulen == 0) return hk__reject(name, value, err, errlen, "empty UUID");
    if (ulen >= HK_UUID_MAX) return hk__reject(name, value, err, errlen, "UUID too long");
    for (size_t k = 0; k < ulen; k++) {
        if (!uuid_char_ok(value[k])) return hk__reject(name, value, err, errlen, "invalid character in UUID");
    }
    memcpy(out, value, ulen + 1);
    return HK_OK;
}

static int parse_path_v(const char *name, const char *value, void *o, char *err, size_t errlen) {
    size_t plen = strlen(value);
    char *out = (char *)o;
    out[0] = '\0';
    if (plen == 0) return hk__reject(name, value, err, errlen, "empty path");
    if (value[0] != '/') return hk__reject(name, value, err, errlen, "not an absolute path");
    if (plen >= HK_PATH_MAX) return hk__reject(name, value, err, errlen, "path too long");
    memcpy(out, value, plen + 1);
    return HK_OK;
}

/* One NAME=VALUE. `name` is what the user wrote (for messages); `canon` its neutral form. */
static int apply(parse_state *st, const char *name, const char *canon, const char *value, char *err, size_t errlen) {
    hk_config *out = st->out;
    for (size_t k = 0; k < NKEYS; k++) {
        const key_spec *ks = &g_keys[k];
        size_t plen = strlen(ks->name), clen = strlen(canon);
        int idx = -1;
        if (ks->indexed) {
            if (clen < plen || strncmp(canon, ks->name, plen) != 0) continue;
            idx = parse_index(canon + plen, clen - plen);
            if (idx < 0) {
                char qn[128], q[128];
                hk__quote(qn, sizeof qn, name);
                hk__quote(q, sizeof q, value);
                hk__errf(err, errlen, "%s=\"%s\": bad device index in the name (expected a suffix _0.._%d)", qn, q,
                         HK_MAX_DEVICES - 1);
                return HK_EFAILCLOSED;
            }
        } else if (strcmp(canon, ks->name) != 0) {
            continue;
        }
        st->any_key = 1;
        int rc = HK_OK;
        switch (ks->kind) {
            case V_MEM: {
                char *by = idx < 0 ? st->mem_default_by : st->mem_by[idx];
                uint64_t *dst = idx < 0 ? &st->mem_default : &out->mem_limit[idx];
                if (by[0]) return repeated(st, by, name, value, parse_mem_v, dst, sizeof *dst, err, errlen);
                rc = hk_parse_mem(name, value, dst, err, errlen);
                copy_name(by, name, strlen(name));
                break;
            }
            case V_SM: {
                char *by = idx < 0 ? st->sm_default_by : st->sm_by[idx];
                uint32_t *dst = idx < 0 ? &st->sm_default : &out->sm_limit[idx];
                if (by[0]) return repeated(st, by, name, value, parse_sm_v, dst, sizeof *dst, err, errlen);
                rc = hk_parse_sm(name, value, dst, err, errlen);
                copy_name(by, name, strlen(name));
                break;
            }
            case V_CTX: { /* a memory quantity, where 0 (charge no context) is allowed */
                char *by = idx < 0 ? st->ctx_default_by : st->ctx_by[idx];
                uint64_t *dst = idx < 0 ? &st->ctx_default : &out->ctx_bytes[idx];
                if (by[0]) return repeated(st, by, name, value, parse_ctx_v, dst, sizeof *dst, err, errlen);
                rc = parse_ctx_v(name, value, dst, err, errlen);
                copy_name(by, name, strlen(name));
                break;
            }
            case V_UUID:
                if (st->uuid_by[idx][0])
                    return repeated(st, st->uuid_by[idx], name, value, parse_uuid_v, out->uuid[idx], HK_UUID_MAX, err,
                                    errlen);
                rc = parse_uuid_v(name, value, out->uuid[idx], err, errlen);
                copy_name(st->uuid_by[idx], name, strlen(name));
                break;
            case V_MODE: {
                char *by = idx < 0 ? st->mode_default_by : st->mode_by[idx];
                uint32_t *dst = idx < 0 ? &st->mode_default : &out->compute_mode[idx];
                if (by[0]) return repeated(st, by, name, value, parse_mode_v, dst, sizeof *dst, err, errlen);
                rc = parse_mode_v(name, value, dst, err, errlen);
                copy_name(by, name, strlen(name));
                break;
            }
            case V_MHZ:
                if (st->mhz_by[idx][0])
                    return repeated(st, st->mhz_by[idx], name, value, parse_mhz_v, &out->ref_mhz[idx], sizeof(uint32_t),
                                    err, errlen);
                rc = parse_mhz_v(name, value, &out->ref_mhz[idx], err, errlen);
                copy_name(st->mhz_by[idx], name, strlen(name));
                break;
            case V_ELAST:
                if (st->elast_by[idx][0])
                    return repeated(st, st->elast_by[idx], name, value, parse_elasticity_v, &out->elasticity_milli[idx],
                                    sizeof(uint32_t), err, errlen);
                rc = parse_elasticity_v(name, value, &out->elasticity_milli[idx], err, errlen);
                copy_name(st->elast_by[idx], name, strlen(name));
                break;
            case V_SMS:
                if (st->sms_by[idx][0])
                    return repeated(st, st->sms_by[idx], name, value, parse_sms_v, &out->device_sms[idx],
                                    sizeof(uint32_t), err, errlen);
                rc = parse_sms_v(name, value, &out->device_sms[idx], err, errlen);
                copy_name(st->sms_by[idx], name, strlen(name));
                break;
            case V_PRIO: {
                char *by = idx < 0 ? st->prio_default_by : st->prio_by[idx];
                uint32_t *dst = idx < 0 ? &st->prio_default : &out->priority[idx];
                if (by[0]) return repeated(st, by, name, value, parse_prio_v, dst, sizeof *dst, err, errlen);
                rc = parse_prio_v(name, value, dst, err, errlen);
                copy_name(by, name, strlen(name));
                break;
            }
            case V_BOARD:
                if (st->board_by[0])
                    return repeated(st, st->board_by, name, value, parse_path_v, out->board_dir, HK_PATH_MAX, err,
                                    errlen);
                rc = parse_path_v(name, value, out->board_dir, err, errlen);
                copy_name(st->board_by, name, strlen(name));
                break;
            case V_PATH:
                if (st->path_by[0])
                    return repeated(st, st->path_by, name, value, parse_path_v, out->ledger_path, HK_PATH_MAX, err,
                                    errlen);
                rc = parse_path_v(name, value, out->ledger_path, err, errlen);
                copy_name(st->path_by, name, strlen(name));
                break;
        }
        if (rc == HK_OK && idx > st->max_index) st->max_index = idx;
        return rc;
    }
    if (st->from_file) {
        char qn[128];
        hk__quote(qn, sizeof qn, name);
        hk__errf(err, errlen,
                 "unknown key %s (expected HOOKCORE_MEMORY_LIMIT_<i>, HOOKCORE_COMPUTE_LIMIT_<i>, "
                 "HOOKCORE_COMPUTE_MODE_<i>, HOOKCORE_COMPUTE_REF_MHZ_<i>, HOOKCORE_COMPUTE_ELASTICITY_<i>, "
                 "HOOKCORE_DEVICE_UUID_<i>, "
                 "HOOKCORE_CONTEXT_MEMORY_<i>, HOOKCORE_DEVICE_SMS_<i>, HOOKCORE_PRIORITY_<i>, "
                 "HOOKCORE_PRIORITY_BOARD or HOOKCORE_LEDGER)",
                 qn);
        return HK_EFAILCLOSED;
    }
    return HK_OK; /* some other HOOKCORE_ variable (HOOKCORE_LOG, ...): not a quota */
}

static int parse_env(parse_state *st, const char *const *envp, const hk_env_alias *aliases, char *err, size_t errlen) {
    for (size_t e = 0; envp != NULL && envp[e] != NULL; e++) {
        const char *entry = envp[e];
        const char *eq = strchr(entry, '=');
        if (eq == NULL) continue;
        char canon[NAME_MAX_LEN], name[NAME_MAX_LEN];
        size_t nlen = (size_t)(eq - entry);
        if (!canonical(entry, nlen, aliases, canon, sizeof canon)) continue;
        copy_name(name, entry, nlen);
        if (apply(st, name, canon, eq + 1, err, errlen) != HK_OK) return HK_EFAILCLOSED;
    }
    return HK_OK;
}

/* The config file: KEY=VALUE lines, neutral keys only; blank lines and lines starting with '#'
   are skipped; a trailing '\r' is dropped. Anything else is an error naming the line. */
static int parse_file(parse_state *st, const char *text, const char *path, char *err, size_t errlen) {
    char line[HK_PATH_MAX + 128], msg[HK_ERR_MAX];
    int lineno = 0;
    for (const char *p = text; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        lineno++;
        const char *next = nl ? nl + 1 : p + n;
        if (n > 0 && p[n - 1] == '\r') n--;
        int rc = HK_OK;
        if (n >= sizeof line) {
            hk__errf(msg, sizeof msg, "line too long (%zu bytes)", n);
            rc = HK_EFAILCLOSED;
        } else if (n > 0 && p[0] != '#') {
            memcpy(line, p, n);
            line[n] = '\0';
            char *eq = strchr(line, '=');
            size_t nlen = eq ? (size_t)(eq - line) : 0;
            size_t good = strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
            if (eq == NULL || nlen == 0 || nlen >= NAME_MAX_LEN || good != nlen) {
                char q[128];
                hk__quote(q, sizeof q, line);
                hk__errf(msg, sizeof msg,
                         "\"%s\" is not a KEY=VALUE line (keys are A-Z, 0-9 and _, with no "
                         "spaces around '=')",
                         q);
                rc = HK_EFAILCLOSED;
            } else {
                *eq = '\0';
                rc = apply(st, line, line, eq + 1, msg, sizeof msg);
            }
        }
        if (rc != HK_OK) {
            hk__errf(err, errlen, "config file %.200s line %d: %s", path ? path : "(text)", lineno, msg);
            return HK_EFAILCLOSED;
        }
        p = next;
    }
    st->any_key = 1; /* the file exists: the process is under a claim, even if it sets no limit */
    return HK_OK;
}

/* Defaults, flags, the UUID rules and the ledger path, once every entry is in. */
static int finish(parse_state *st, const hk_config_source *src, char *err, size_t errlen) {
    hk_config *out = st->out;
    int any_limit = 0, uuid_keyed = 0;
    for (int i = 0; i < HK_MAX_DEVICES; i++) uuid_keyed |= st->uuid_by[i][0] != '\0';
    for (int i = 0; i < HK_MAX_DEVICES; i++) {
        if (!st->mem_by[i][0]) out->mem_limit[i] = st->mem_default;
        if (!st->sm_by[i][0]) out->sm_limit[i] = st->sm_default;
        if (!st->mode_by[i][0]) out->compute_mode[i] = st->mode_default;
        if (!st->ctx_by[i][0]) out->ctx_bytes[i] = st->ctx_default;
        if (!st->prio_by[i][0]) out->priority[i] = st->prio_default;
        if (out->mem_limit[i] != HK_MEM_UNLIMITED) out->flags[i] |= HK_CFG_MEM_SET;
        if (out->sm_limit[i] != HK_SM_UNLIMITED) out->flags[i] |= HK_CFG_SM_SET;
        if (st->uuid_by[i][0]) out->flags[i] |= HK_CFG_UUID_SET;
        if (st->elast_by[i][0]) out->flags[i] |= HK_CFG_ELASTICITY_SET;
        any_limit |= (out->flags[i] & (HK_CFG_MEM_SET | HK_CFG_SM_SET)) != 0;
        if (st->mode_by[i][0] && out->compute_mode[i] == HK_COMPUTE_STRICT && out->sm_limit[i] == HK_SM_UNLIMITED) {
            hk__errf(err, errlen,
                     "%s=strict needs a compute limit below 100 on device %d (a strict cap of the whole "
                     "device caps nothing)",
                     st->mode_by[i], i);
            return fail(st);
        }
        if (!uuid_keyed || st->uuid_by[i][0]) continue;
        const char *by = st->mem_by[i][0] ? st->mem_by[i] : st->sm_by[i][0] ? st->sm_by[i] : NULL;
        if (by != NULL) {
            hk__errf(err, errlen,
                     "%s is set but HOOKCORE_DEVICE_UUID_%d is not (the claim is keyed by UUID, so "
                     "this limit would apply to no device)",
                     by, i);
            return fail(st);
        }
    }
    for (int i = 0; uuid_keyed && i < HK_MAX_DEVICES; i++) {
        for (int j = 0; j < i; j++) {
            if (st->uuid_by[i][0] && st->uuid_by[j][0] && hk_uuid_equal(out->uuid[i], out->uuid[j])) {
                char q[128];
                hk__quote(q, sizeof q, out->uuid[i]);
                hk__errf(err, errlen, "%s=\"%s\": same device as %s", st->uuid_by[i], q, st->uuid_by[j]);
                return fail(st);
            }
        }
    }
    out->device_count = (uint32_t)(st->max_index + 1);
    out->uuid_keyed = (uint32_t)uuid_keyed;
    out->origin = src->file_text ? HK_ORIGIN_FILE : st->any_key ? HK_ORIGIN_ENV : HK_ORIGIN_NONE;
    if (st->path_by[0]) return HK_OK;
    if (out->origin == HK_ORIGIN_FILE && src->file_path && strrchr(src->file_path, '/')) {
        /* The claim's directory holds the config and the ledger. */
        const char *slash = strrchr(src->file_path, '/');
        int n = snprintf(out->ledger_path, sizeof out->ledger_path, "%.*s/ledger", (int)(slash - src->file_path),
                         src->file_path);
        if (n < 0 || (size_t)n >= sizeof out->ledger_path) {
            hk__errf(err, errlen, "config file path too long: %.200s", src->file_path);
            return fail(st);
        }
    } else if (any_limit) {
        if (src->stem && *src->stem)
            snprintf(out->ledger_path, sizeof out->ledger_path, "/tmp/hookcore-%.64s.ledger", src->stem);
        else
            memcpy(out->ledger_path, HK_DEFAULT_LEDGER, sizeof HK_DEFAULT_LEDGER);
    }
    return HK_OK;
}

int hk_config_parse_source(const hk_config_source *src, hk_config *out, char *err, size_t errlen) {
    static const hk_config_source empty;
    if (err && errlen) err[0] = '\0';
    if (out == NULL) {
        hk__errf(err, errlen, "hk_config_parse: NULL config");
        return HK_EINVAL;
    }
    if (src == NULL) src = &empty;
    parse_state *st = calloc(1, sizeof *st); /* ~4 KiB of names: keep it off small stacks */
    if (st == NULL) {
        hk__errf(err, errlen, "out of host memory");
        return HK_EIO;
    }
    memset(out, 0, sizeof *out);
    st->out = out;
    st->max_index = -1;
    st->mem_default = HK_MEM_UNLIMITED;
    st->sm_default = HK_SM_UNLIMITED;
    for (int i = 0; i < HK_MAX_DEVICES; i++) {
        out->mem_limit[i] = HK_MEM_UNLIMITED;
        out->sm_limit[i] = HK_SM_UNLIMITED;
    }
    int rc;
    if (src->file_text != NULL) {
        st->from_file = 1; /* the file is authoritative: the environment's quota variables are ignored */
        rc = parse_file(st, src->file_text, src->file_path, err, errlen);
    } else {
        rc = parse_env(st, src->envp, src->aliases, err, errlen);
    }
    if (rc == HK_OK) {
        char msg[HK_ERR_MAX];
        rc = finish(st, src, msg, sizeof msg);
        if (rc != HK_OK && st->from_file)
            hk__errf(err, errlen, "config file %.200s: %s", src->file_path ? src->file_path : "(text)", msg);
        else if (rc != HK_OK)
            hk__errf(err, errlen, "%s", msg);
    } else {
        fail(st);
    }
    free(st);
    return rc;
}

int hk_config_parse(const char *const *envp, hk_config *out, char *err, size_t errlen) {
    hk_config_source src = {.envp = envp};
    return hk_config_parse_source(&src, out, err, errlen);
}

int hk_config_from_environ(hk_config *out, char *err, size_t errlen) {
    return hk_config_parse((const char *const *)environ, out, err, errlen);
}
