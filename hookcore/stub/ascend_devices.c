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

const char *asd_get(const asd_device *d, const char *key) { return stub_entry_get(&d->entry, key); }

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

typedef struct parse_ctx {
    asd_device *out;
    int max, n;
} parse_ctx;

/* One NPU of the description: its uuid (die ID), memory and name checked and decoded. */
static int take_npu(void *ctx, int pos, const stub_entry *e, char *err, size_t errlen) {
    parse_ctx *c = ctx;
    if (c->n >= c->max) {
        snprintf(err, errlen, "more than %d NPUs", c->max);
        return -1;
    }
    asd_device *d = &c->out[c->n];
    memset(d, 0, sizeof *d);
    d->entry = *e;
    const char *uuid = asd_get(d, "uuid");
    if (!uuid) {
        snprintf(err, errlen, "NPU %d: uuid is required", pos);
        return -1;
    }
    if (die_words(uuid, d->die) != 0) {
        snprintf(err, errlen, "NPU %d: uuid=%s: expected NPU-xxxxxxxx-xxxxxxxx-xxxxxxxx-xxxxxxxx-xxxxxxxx (hex)", pos,
                 uuid);
        return -1;
    }
    for (int k = 0; k < c->n; k++) {
        if (strcasecmp(c->out[k].uuid, uuid) == 0) {
            snprintf(err, errlen, "NPU %d: uuid %s already used by NPU %d", pos, uuid, k);
            return -1;
        }
    }
    memcpy(d->uuid, uuid, strlen(uuid) + 1); /* both ASD_VALUE_MAX */
    const char *mem = asd_get(d, "memory");
    d->memory = 64ULL << 30;
    char why[200];
    if (mem && stub_quantity(mem, &d->memory, why, sizeof why) != 0) {
        snprintf(err, errlen, "NPU %d: %s", pos, why);
        return -1;
    }
    const char *name = asd_get(d, "name");
    if (!name) name = "910B3";
    memcpy(d->name, name, strlen(name) + 1);
    c->n++;
    return 0;
}

int asd_parse(const char *spec, asd_device *out, int max, char *err, size_t errlen) {
    parse_ctx c = {out, max, 0};
    return stub_grammar_parse(spec, "NPU", take_npu, &c, err, errlen) < 0 ? -1 : c.n;
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
