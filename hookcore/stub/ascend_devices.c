/* ascend_devices.c - HOOKCORE_STUB_NPUS, parsed once per stub library (see ascend_devices.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ascend_devices.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

long long asd_parse_quantity(const char *s) {
    if (!s || !*s) return -1;
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0) return -1;
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1}, {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
        {"K", 1e3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            double bytes = v * units[i].mult;
            if (bytes < 1 || bytes > 9.0e18) return -1;
            return (long long)bytes;
        }
    }
    return -1;
}

const char *asd_get(const asd_device *d, const char *key) {
    for (int i = 0; i < d->nkeys; i++)
        if (strcmp(d->kv[i].key, key) == 0) return d->kv[i].value;
    return NULL;
}

long long asd_get_int(const asd_device *d, const char *key, long long dflt) {
    const char *v = asd_get(d, key);
    if (!v) return dflt;
    char *end;
    long long n = strtoll(v, &end, 0);
    return (*end || end == v) ? dflt : n;
}

/* "NPU-" + 5 x 8 hex digits separated by '-' -> five words; 0 or -1. */
static int die_words(const char *u, unsigned int out[5]) {
    if (strncasecmp(u, "NPU-", 4) != 0 || strlen(u) != 4 + 5 * 8 + 4) return -1;
    const char *p = u + 4;
    for (int w = 0; w < 5; w++) {
        unsigned int v = 0;
        for (int k = 0; k < 8; k++, p++) {
            if (!isxdigit((unsigned char)*p)) return -1;
            v = v * 16 + (unsigned)(isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10));
        }
        out[w] = v;
        if (w < 4 && *p++ != '-') return -1;
    }
    return 0;
}

static void trim(char **s, size_t *n) {
    while (*n && isspace((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

int asd_parse(const char *spec, asd_device *out, int max, char *err, size_t errlen) {
    int n = 0;
    const char *p = spec ? spec : "";
    while (*p) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        char *entry = (char *)p;
        size_t elen = len;
        trim(&entry, &elen);
        p += len + (semi ? 1 : 0);
        if (elen == 0) continue;
        if (n >= max) {
            snprintf(err, errlen, "more than %d NPUs", max);
            return -1;
        }
        asd_device *d = &out[n];
        memset(d, 0, sizeof *d);
        size_t i = 0;
        while (i < elen) {
            size_t j = i;
            while (j < elen && entry[j] != ',') j++;
            char *kv = entry + i;
            size_t kvlen = j - i;
            i = j + 1;
            trim(&kv, &kvlen);
            if (kvlen == 0) continue;
            char *eq = memchr(kv, '=', kvlen);
            if (!eq) {
                snprintf(err, errlen, "NPU %d: %.*s: expected key=value", n, (int)kvlen, kv);
                return -1;
            }
            char *key = kv, *val = eq + 1;
            size_t klen = (size_t)(eq - kv), vlen = kvlen - klen - 1;
            trim(&key, &klen);
            trim(&val, &vlen);
            if (klen == 0 || klen >= ASD_KEY_MAX || vlen >= ASD_VALUE_MAX || memchr(val, '=', vlen)) {
                snprintf(err, errlen, "NPU %d: %.*s: bad key or value", n, (int)kvlen, kv);
                return -1;
            }
            if (d->nkeys >= ASD_MAX_KEYS) {
                snprintf(err, errlen, "NPU %d: more than %d keys", n, ASD_MAX_KEYS);
                return -1;
            }
            for (int k = 0; k < d->nkeys; k++) {
                if (strlen(d->kv[k].key) == klen && strncmp(d->kv[k].key, key, klen) == 0) {
                    snprintf(err, errlen, "NPU %d: key %.*s given twice", n, (int)klen, key);
                    return -1;
                }
            }
            memcpy(d->kv[d->nkeys].key, key, klen);
            memcpy(d->kv[d->nkeys].value, val, vlen);
            d->nkeys++;
        }
        const char *uuid = asd_get(d, "uuid");
        if (!uuid) {
            snprintf(err, errlen, "NPU %d: uuid is required", n);
            return -1;
        }
        if (die_words(uuid, d->die) != 0) {
            snprintf(err, errlen, "NPU %d: uuid=%s: expected NPU-xxxxxxxx-xxxxxxxx-xxxxxxxx-xxxxxxxx-xxxxxxxx (hex)",
                     n, uuid);
            return -1;
        }
        for (int k = 0; k < n; k++) {
            if (strcasecmp(out[k].uuid, uuid) == 0) {
                snprintf(err, errlen, "NPU %d: uuid %s already used by NPU %d", n, uuid, k);
                return -1;
            }
        }
        memcpy(d->uuid, uuid, strlen(uuid) + 1);   /* both ASD_VALUE_MAX */
        const char *mem = asd_get(d, "memory");
        long long bytes = mem ? asd_parse_quantity(mem) : 64LL << 30;
        if (bytes <= 0) {
            snprintf(err, errlen, "NPU %d: memory=%s: expected bytes or a quantity such as 64Gi", n, mem);
            return -1;
        }
        d->memory = (unsigned long long)bytes;
        const char *name = asd_get(d, "name");
        if (!name) name = "910B3";
        memcpy(d->name, name, strlen(name) + 1);
        n++;
    }
    return n;
}

int asd_from_env(asd_device *out, int max) {
    char err[256];
    int n = asd_parse(getenv("HOOKCORE_STUB_NPUS"), out, max, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "stub: HOOKCORE_STUB_NPUS: %s\n", err);
        return 0;
    }
    return n;
}
