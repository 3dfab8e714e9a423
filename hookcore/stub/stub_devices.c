/* stub_devices.c - the fake GPUs of HOOKCORE_STUB_DEVICES (keys in stub_devices.h, grammar in
 * stub_grammar.h). */
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

const char *stub_device_get(const stub_device_desc *d, const char *key) { return stub_entry_get(&d->entry, key); }

typedef struct parse_ctx {
    stub_device_desc *out;
    int max, n;
} parse_ctx;

/* One device of the description: its uuid, memory and name checked and decoded. */
static int take_device(void *ctx, int pos, const stub_entry *e, char *err, size_t errlen) {
    parse_ctx *c = ctx;
    if (c->n == c->max) {
        snprintf(err, errlen, "more than %d devices", c->max);
        return -1;
    }
    stub_device_desc *d = &c->out[c->n];
    memset(d, 0, sizeof *d);
    d->entry = *e;
    const char *uuid = stub_device_get(d, "uuid");
    if (!uuid) {
        snprintf(err, errlen, "device %d: uuid is required", pos);
        return -1;
    }
    if (uuid_bytes(uuid, d->uuid_bytes) != 0) {
        snprintf(err, errlen, "device %d: uuid=%s: expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)", pos, uuid);
        return -1;
    }
    for (int i = 0; i < c->n; i++) {
        if (strcasecmp(c->out[i].uuid, uuid) == 0) {
            snprintf(err, errlen, "device %d: uuid %s already used by device %d", pos, uuid, i);
            return -1;
        }
    }
    memcpy(d->uuid, uuid, strlen(uuid) + 1); /* both STUB_VALUE_MAX */
    const char *mem = stub_device_get(d, "memory");
    d->memory = DEFAULT_MEMORY;
    char why[200];
    if (mem && stub_quantity(mem, &d->memory, why, sizeof why) != 0) {
        snprintf(err, errlen, "device %d: %s", pos, why);
        return -1;
    }
    const char *sms = stub_device_get(d, "sms");
    d->sms = STUB_DEFAULT_SMS;
    if (sms) {
        char *end = NULL;
        unsigned long v = strtoul(sms, &end, 10);
        if (!(*sms >= '1' && *sms <= '9') || *end || v > 4096) {
            snprintf(err, errlen, "device %d: sms=%s: expected an SM count, 1..4096", pos, sms);
            return -1;
        }
        d->sms = (unsigned)v;
    }
    const char *name = stub_device_get(d, "name");
    if (name)
        memcpy(d->name, name, strlen(name) + 1);
    else
        snprintf(d->name, sizeof d->name, "Stub GPU %d", pos);
    c->n++;
    return 0;
}

int stub_devices_parse(const char *spec, stub_device_desc *out, int max, char *err, size_t errlen) {
    parse_ctx c = {out, max, 0};
    return stub_grammar_parse(spec, "device", take_device, &c, err, errlen) < 0 ? -1 : c.n;
}

int stub_devices_from_env(stub_device_desc *out, int max) {
    char err[256];
    const char *spec = getenv("HOOKCORE_STUB_DEVICES");
    if (spec) {
        int n = stub_devices_parse(spec, out, max, err, sizeof err);
        if (n >= 0) return n;
        char line[400];
        int len = snprintf(line, sizeof line, "stub: HOOKCORE_STUB_DEVICES: %s; the stub has no device\n", err);
        if (len > 0 && write(STDERR_FILENO, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1) < 0) {}
        return 0;
    }
    const char *c = getenv("STUB_CUDA_DEVICES");
    int count = c ? atoi(c) : 1;
    if (count < 0) count = 0;
    if (count > max) count = max;
    unsigned long long mem = DEFAULT_MEMORY;
    const char *m = getenv("STUB_CUDA_MEMORY");
    if (m && stub_quantity(m, &mem, err, sizeof err) != 0) mem = DEFAULT_MEMORY;
    for (int i = 0; i < count; i++) {
        stub_device_desc *d = &out[i];
        memset(d, 0, sizeof *d);
        snprintf(d->uuid, sizeof d->uuid, "GPU-57554201-0000-4000-8000-0000000000%02x", i);
        uuid_bytes(d->uuid, d->uuid_bytes);
        d->memory = mem;
        d->sms = STUB_DEFAULT_SMS;
        snprintf(d->name, sizeof d->name, "Stub GPU %d", i);
    }
    return count;
}

int stub_device_lookup(const stub_device_desc *devs, int n, const char *entry, size_t len) {
    while (len > 0 && (*entry == ' ')) {
        entry++;
        len--;
    }
    while (len > 0 && entry[len - 1] == ' ') len--;
    if (len == 0) return -1;
    size_t digits = 0;
    while (digits < len && entry[digits] >= '0' && entry[digits] <= '9') digits++;
    if (digits == len) {
        long v = len < 9 ? strtol(entry, NULL, 10) : -1;
        return v >= 0 && v < n ? (int)v : -1;
    }
    if (len >= 4 && strncasecmp(entry, "GPU-", 4) == 0) {
        entry += 4;
        len -= 4;
    }
    if (len == 0) return -1;
    int found = -1;
    for (int i = 0; i < n; i++) {
        if (strncasecmp(devs[i].uuid + 4, entry, len) != 0) continue;
        if (found >= 0) return -1; /* ambiguous prefix */
        found = i;
    }
    return found;
}
