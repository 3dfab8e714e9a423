/* cambricon_devices.c - HOOKCORE_STUB_MLUS and the sMLU table file (see cambricon_devices.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cambricon_devices.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <unistd.h>

const char *cmb_get(const cmb_device *d, const char *key) { return stub_entry_get(&d->entry, key); }

long long cmb_get_int(const cmb_device *d, const char *key, long long dflt) {
    const char *v = cmb_get(d, key);
    if (!v) return dflt;
    char *end;
    long long n = strtoll(v, &end, 0);
    return (*end || end == v) ? dflt : n;
}

/* "MLU-" + 8-4-4-4-12 hex digits: 1 or 0. */
static int uuid_ok(const char *u) {
    static const int groups[] = {8, 4, 4, 4, 12};
    if (strncasecmp(u, "MLU-", 4) != 0) return 0;
    const char *p = u + 4;
    for (int g = 0; g < 5; g++) {
        for (int k = 0; k < groups[g]; k++, p++) {
            if (!isxdigit((unsigned char)*p)) return 0;
        }
        if (g < 4 && *p++ != '-') return 0;
    }
    return *p == 0;
}

typedef struct parse_ctx {
    cmb_device *out;
    int max, n;
} parse_ctx;

static int take_mlu(void *ctx, int pos, const stub_entry *e, char *err, size_t errlen) {
    parse_ctx *c = ctx;
    if (c->n >= c->max) {
        snprintf(err, errlen, "more than %d MLUs", c->max);
        return -1;
    }
    cmb_device *d = &c->out[c->n];
    memset(d, 0, sizeof *d);
    d->entry = *e;
    const char *uuid = cmb_get(d, "uuid");
    if (!uuid || !uuid_ok(uuid)) {
        snprintf(err, errlen, "MLU %d: uuid=%s: expected MLU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)", pos,
                 uuid ? uuid : "(missing)");
        return -1;
    }
    for (int k = 0; k < c->n; k++) {
        if (strcasecmp(c->out[k].uuid, uuid) == 0) {
            snprintf(err, errlen, "MLU %d: uuid %s already used by MLU %d", pos, uuid, k);
            return -1;
        }
    }
    memcpy(d->uuid, uuid, strlen(uuid) + 1);
    d->memory = 48ULL << 30;
    const char *mem = cmb_get(d, "memory");
    char why[200];
    if (mem && stub_quantity(mem, &d->memory, why, sizeof why) != 0) {
        snprintf(err, errlen, "MLU %d: %s", pos, why);
        return -1;
    }
    const char *name = cmb_get(d, "name");
    if (!name) name = "MLU370-X8";
    memcpy(d->name, name, strlen(name) + 1);
    d->slot = (int)cmb_get_int(d, "slot", pos);
    if (d->slot < 0 || d->slot > 255) {
        snprintf(err, errlen, "MLU %d: slot must be 0..255", pos);
        return -1;
    }
    c->n++;
    return 0;
}

int cmb_parse(const char *spec, cmb_device *out, int max, char *err, size_t errlen) {
    parse_ctx c = {out, max, 0};
    return stub_grammar_parse(spec, "MLU", take_mlu, &c, err, errlen) < 0 ? -1 : c.n;
}

int cmb_from_env(cmb_device *out, int max) {
    char err[256];
    int n = cmb_parse(getenv("HOOKCORE_STUB_MLUS"), out, max, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "stub: HOOKCORE_STUB_MLUS: %s\n", err);
        return 0;
    }
    return n;
}

/* --- the sMLU table ---------------------------------------------------------------------------- */

static int parse_table(FILE *f, cmb_table *t) {
    memset(t, 0, sizeof *t);
    char line[256], word[16], name[CMB_NAME_MAX];
    while (fgets(line, sizeof line, f)) {
        int slot, id, profile;
        unsigned int quota;
        unsigned long long memory;
        if (sscanf(line, "%15s", word) != 1) continue;
        if (!strcmp(word, "profile") && t->nprofiles < CMB_MAX_PROFILES &&
            sscanf(line, "%*s %d %d %u %llu", &slot, &id, &quota, &memory) == 4) {
            t->profiles[t->nprofiles++] = (cmb_profile){slot, id, quota, memory};
        } else if (!strcmp(word, "instance") && t->ninstances < CMB_MAX_INSTANCES &&
                   sscanf(line, "%*s %d %d %d %99s", &slot, &id, &profile, name) == 4) {
            cmb_instance *in = &t->instances[t->ninstances++];
            *in = (cmb_instance){slot, id, profile, {0}};
            memcpy(in->name, name, strlen(name) + 1);
        }
    }
    return 0;
}

int cmb_table_read(cmb_table *t) {
    const char *path = getenv("HOOKCORE_STUB_CNDEV_SMLU");
    memset(t, 0, sizeof *t);
    if (!path || !*path) {
        errno = ENOENT;
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : -1; /* not made yet: no instance */
    parse_table(f, t);
    fclose(f);
    return 0;
}

int cmb_table_lock(cmb_table *t) {
    const char *path = getenv("HOOKCORE_STUB_CNDEV_SMLU");
    if (!path || !*path || strlen(path) > 4000) {
        errno = ENOENT;
        return -1;
    }
    char lock[4096 + 8];
    snprintf(lock, sizeof lock, "%s.lock", path);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX) != 0 || cmb_table_read(t) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int cmb_table_unlock(int fd, const cmb_table *t, int save) {
    int rc = 0;
    if (save) {
        const char *path = getenv("HOOKCORE_STUB_CNDEV_SMLU");
        char tmp[4096 + 16];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (!f) {
            rc = -1;
        } else {
            for (int i = 0; i < t->nprofiles; i++) {
                const cmb_profile *p = &t->profiles[i];
                fprintf(f, "profile %d %d %u %llu\n", p->slot, p->id, p->quota, p->memory);
            }
            for (int i = 0; i < t->ninstances; i++) {
                const cmb_instance *in = &t->instances[i];
                fprintf(f, "instance %d %d %d %s\n", in->slot, in->id, in->profile, in->name);
            }
            rc = (fclose(f) == 0 && rename(tmp, path) == 0) ? 0 : -1;
        }
    }
    flock(fd, LOCK_UN);
    close(fd);
    return rc;
}

void cmb_instance_node(int slot, int id, char *out, size_t len) {
    snprintf(out, len, "/dev/cambricon-caps/cap_dev%d_mi%d", slot, id);
}

const cmb_profile *cmb_profile_of(const cmb_table *t, int slot, int id) {
    for (int i = 0; i < t->nprofiles; i++) {
        if (t->profiles[i].slot == slot && t->profiles[i].id == id) return &t->profiles[i];
    }
    return NULL;
}

unsigned long long cmb_slot_used(const cmb_table *t, int slot) {
    unsigned long long used = 0;
    for (int i = 0; i < t->ninstances; i++) {
        const cmb_instance *in = &t->instances[i];
        const cmb_profile *p = in->slot == slot ? cmb_profile_of(t, slot, in->profile) : NULL;
        if (p) used += p->memory;
    }
    return used;
}
