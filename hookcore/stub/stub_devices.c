/* stub_devices.c - parse HOOKCORE_STUB_DEVICES (grammar in stub_devices.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "stub_devices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define DEFAULT_MEMORY (16ULL << 30)

long long stub_parse_quantity(const char *s) {
    static const struct { const char *suffix; long double mult; } units[] = {
        {"Ki", 1024.0L}, {"Mi", 1048576.0L}, {"Gi", 1073741824.0L}, {"Ti", 1099511627776.0L},
        {"Pi", 1125899906842624.0L}, {"Ei", 1152921504606846976.0L},
        {"k", 1e3L}, {"M", 1e6L}, {"G", 1e9L}, {"T", 1e12L}, {"P", 1e15L}, {"E", 1e18L}, {"", 1.0L},
    };
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    const char *p = s;
    int digits = 0, dot = 0;
    for (; (*p >= '0' && *p <= '9') || (*p == '.' && !dot); p++) {
        if (*p == '.') dot = 1;
        else digits++;
    }
    if (digits == 0) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].suffix) != 0) continue;
        long double v = strtold(s, NULL) * units[i].mult;
        if (v < 1.0L || v > 9.2e18L || v != (long double)(long long)v) return -1;   /* whole bytes only */
        return (long long)v;
    }
    return -1;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "GPU-" + 8-4-4-4-12 hex digits -> 16 bytes; 0 or -1. */
static int uuid_bytes(const char *u, unsigned char out[16]) {
    if (strncmp(u, "GPU-", 4) != 0 || strlen(u) != 40) return -1;
    const char *p = u + 4;
    int n = 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (p[i] != '-') return -1;
            continue;
        }
        int hi = hexval(p[i]), lo = hexval(p[i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[n++] = (unsigned char)(hi << 4 | lo);
        i++;
    }
    return n == 16 ? 0 : -1;
}

static void trim(const char **b, const char **e) {
    while (*b < *e && (**b == ' ' || **b == '\t')) (*b)++;
    while (*e > *b && ((*e)[-1] == ' ' || (*e)[-1] == '\t')) (*e)--;
}

const char *stub_device_get(const stub_device_desc *d, const char *key) {
    for (int i = 0; i < d->nkeys; i++)
        if (strcmp(d->kv[i].key, key) == 0) return d->kv[i].value;
    return NULL;
}

/* One device "k=v,k=v" in [b, e). */
static int parse_one(const char *b, const char *e, int pos, stub_device_desc *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    while (b < e) {
        const char *comma = memchr(b, ',', (size_t)(e - b));
        const char *ie = comma ? comma : e;
        const char *kb = b, *eq = memchr(b, '=', (size_t)(ie - b));
        b = comma ? comma + 1 : e;
        const char *tb = kb, *te = ie;
        trim(&tb, &te);
        if (tb == te) continue;   /* "a=1,,b=2" */
        if (!eq) {
            snprintf(err, errlen, "device %d: \"%.*s\" is not key=value", pos, (int)(te - tb), tb);
            return -1;
        }
        const char *ke = eq, *vb = eq + 1, *ve = ie;
        trim(&kb, &ke);
        trim(&vb, &ve);
        if (ke == kb || (size_t)(ke - kb) >= STUB_KEY_MAX || (size_t)(ve - vb) >= STUB_VALUE_MAX ||
            memchr(vb, '=', (size_t)(ve - vb))) {
            snprintf(err, errlen, "device %d: bad entry \"%.*s\" (keys < %d, values < %d characters, one '=')",
                     pos, (int)(te - tb), tb, STUB_KEY_MAX, STUB_VALUE_MAX);
            return -1;
        }
        if (d->nkeys == STUB_MAX_KEYS) {
            snprintf(err, errlen, "device %d: more than %d keys", pos, STUB_MAX_KEYS);
            return -1;
        }
        snprintf(d->kv[d->nkeys].key, STUB_KEY_MAX, "%.*s", (int)(ke - kb), kb);
        snprintf(d->kv[d->nkeys].value, STUB_VALUE_MAX, "%.*s", (int)(ve - vb), vb);
        for (int i = 0; i < d->nkeys; i++) {
            if (strcmp(d->kv[i].key, d->kv[d->nkeys].key) == 0) {
                snprintf(err, errlen, "device %d: key %s given twice", pos, d->kv[i].key);
                return -1;
            }
        }
        d->nkeys++;
    }
    const char *uuid = stub_device_get(d, "uuid");
    if (!uuid) {
        snprintf(err, errlen, "device %d: uuid is required", pos);
        return -1;
    }
    if (uuid_bytes(uuid, d->uuid_bytes) != 0) {
        snprintf(err, errlen, "device %d: uuid=%s: expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)", pos, uuid);
        return -1;
    }
    memcpy(d->uuid, uuid, strlen(uuid) + 1);   /* both STUB_VALUE_MAX */
    const char *mem = stub_device_get(d, "memory");
    d->memory = DEFAULT_MEMORY;
    if (mem) {
        long long m = stub_parse_quantity(mem);
        if (m <= 0) {
            snprintf(err, errlen, "device %d: memory=%s: expected bytes or a quantity like 141Gi", pos, mem);
            return -1;
        }
        d->memory = (unsigned long long)m;
    }
    const char *name = stub_device_get(d, "name");
    if (name) memcpy(d->name, name, strlen(name) + 1);
    else snprintf(d->name, sizeof d->name, "Stub GPU %d", pos);
    return 0;
}

int stub_devices_parse(const char *spec, stub_device_desc *out, int max, char *err, size_t errlen) {
    int n = 0, pos = 0;
    const char *p = spec ? spec : "";
    err[0] = '\0';
    while (*p) {
        const char *semi = strchr(p, ';');
        const char *e = semi ? semi : p + strlen(p);
        const char *b = p, *te = e;
        trim(&b, &te);
        if (b < te) {
            if (n == max) {
                snprintf(err, errlen, "more than %d devices", max);
                return -1;
            }
            if (parse_one(b, te, pos, &out[n], err, errlen) != 0) return -1;
            for (int i = 0; i < n; i++) {
                if (strcasecmp(out[i].uuid, out[n].uuid) == 0) {
                    snprintf(err, errlen, "device %d: uuid %s already used by device %d", pos, out[n].uuid, i);
                    return -1;
                }
            }
            n++;
            pos++;
        }
        p = semi ? semi + 1 : e;
    }
    return n;
}

int stub_devices_from_env(stub_device_desc *out, int max) {
    char err[256];
    const char *spec = getenv("HOOKCORE_STUB_DEVICES");
    if (spec) {
        int n = stub_devices_parse(spec, out, max, err, sizeof err);
        if (n >= 0) return n;
        char line[400];
        int len = snprintf(line, sizeof line, "stub: HOOKCORE_STUB_DEVICES: %s; the stub has no device\n", err);
        if (len > 0 && write(STDERR_FILENO, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1) < 0) {
        }
        return 0;
    }
    const char *c = getenv("STUB_CUDA_DEVICES");
    int count = c ? atoi(c) : 1;
    if (count < 0) count = 0;
    if (count > max) count = max;
    long long mem = stub_parse_quantity(getenv("STUB_CUDA_MEMORY"));
    for (int i = 0; i < count; i++) {
        stub_device_desc *d = &out[i];
        memset(d, 0, sizeof *d);
        snprintf(d->uuid, sizeof d->uuid, "GPU-57554201-0000-4000-8000-0000000000%02x", i);
        uuid_bytes(d->uuid, d->uuid_bytes);
        d->memory = mem > 0 ? (unsigned long long)mem : DEFAULT_MEMORY;
        snprintf(d->name, sizeof d->name, "Stub GPU %d", i);
    }
    return count;
}

int stub_device_lookup(const stub_device_desc *devs, int n, const char *entry, size_t len) {
    while (len > 0 && (*entry == ' ')) { entry++; len--; }
    while (len > 0 && entry[len - 1] == ' ') len--;
    if (len == 0) return -1;
    size_t digits = 0;
    while (digits < len && entry[digits] >= '0' && entry[digits] <= '9') digits++;
    if (digits == len) {
        long v = len < 9 ? strtol(entry, NULL, 10) : -1;
        return v >= 0 && v < n ? (int)v : -1;
    }
    if (len >= 4 && strncasecmp(entry, "GPU-", 4) == 0) { entry += 4; len -= 4; }
    if (len == 0) return -1;
    int found = -1;
    for (int i = 0; i < n; i++) {
        if (strncasecmp(devs[i].uuid + 4, entry, len) != 0) continue;
        if (found >= 0) return -1;   /* ambiguous prefix */
        found = i;
    }
    return found;
}
