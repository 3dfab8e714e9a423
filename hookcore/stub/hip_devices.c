/* hip_devices.c - HOOKCORE_STUB_HIP_DEVICES, parsed once per stub library (see hip_devices.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "hip_devices.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *hd_get(const hd_device *d, const char *key) { return stub_entry_get(&d->entry, key); }

long long hd_get_int(const hd_device *d, const char *key, long long dflt) {
    const char *v = hd_get(d, key);
    if (!v) return dflt;
    char *end;
    long long n = strtoll(v, &end, 0);
    return (*end || end == v) ? dflt : n;
}

int hd_find(const hd_device *devs, int n, const char *pci) {
    for (int i = 0; i < n; i++)
        if (strcasecmp(devs[i].pci, pci) == 0) return i;
    return -1;
}

/* "dddd:bb:dd.f" (hex; the device number at most 0x1f, the function at most 7) -> its parts. */
static int bus_id(const char *s, hd_device *d) {
    char extra;
    if (strlen(s) != 12 || sscanf(s, "%4x:%2x:%2x.%1x%c", &d->domain, &d->bus, &d->dev, &d->fn, &extra) != 4) return -1;
    for (const char *p = s; *p; p++)
        if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.') return -1;
    if (d->dev > 0x1f || d->fn > 7) return -1;
    snprintf(d->pci, sizeof d->pci, "%04x:%02x:%02x.%x", d->domain, d->bus, d->dev, d->fn);
    return 0;
}

typedef struct parse_ctx {
    hd_device *out;
    int max, n;
} parse_ctx;

static int take_device(void *ctx, int pos, const stub_entry *e, char *err, size_t errlen) {
    parse_ctx *c = ctx;
    if (c->n >= c->max) {
        snprintf(err, errlen, "more than %d devices", c->max);
        return -1;
    }
    hd_device *d = &c->out[c->n];
    memset(d, 0, sizeof *d);
    d->entry = *e;
    const char *pci = hd_get(d, "pci");
    if (!pci) {
        snprintf(err, errlen, "device %d: pci (its PCI bus ID) is required", pos);
        return -1;
    }
    if (bus_id(pci, d) != 0) {
        snprintf(err, errlen, "device %d: pci=%s: expected dddd:bb:dd.f (hex)", pos, pci);
        return -1;
    }
    if (hd_find(c->out, c->n, d->pci) >= 0) {
        snprintf(err, errlen, "device %d: pci %s already used", pos, d->pci);
        return -1;
    }
    const char *mem = hd_get(d, "memory");
    d->memory = 64ULL << 30;
    char why[200];
    if (mem && stub_quantity(mem, &d->memory, why, sizeof why) != 0) {
        snprintf(err, errlen, "device %d: %s", pos, why);
        return -1;
    }
    const char *name = hd_get(d, "name");
    if (!name) name = "K100_AI";
    memcpy(d->name, name, strlen(name) + 1);
    c->n++;
    return 0;
}

int hd_parse(const char *spec, hd_device *out, int max, char *err, size_t errlen) {
    parse_ctx c = {out, max, 0};
    return stub_grammar_parse(spec, "device", take_device, &c, err, errlen) < 0 ? -1 : c.n;
}

int hd_from_env(hd_device *out, int max) {
    char err[256];
    int n = hd_parse(getenv("HOOKCORE_STUB_HIP_DEVICES"), out, max, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "stub: HOOKCORE_STUB_HIP_DEVICES: %s\n", err);
        return 0;
    }
    return n;
}
