/* stub_grammar.c - HOOKCORE_STUB_DEVICES / HOOKCORE_STUB_NPUS, split into entries (grammar in
 * stub_grammar.h). */
#include "stub_grammar.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/hookcore.h"

static void trim(const char **b, const char **e) {
    while (*b < *e && (**b == ' ' || **b == '\t')) (*b)++;
    while (*e > *b && ((*e)[-1] == ' ' || (*e)[-1] == '\t')) (*e)--;
}

const char *stub_entry_get(const stub_entry *e, const char *key) {
    for (int i = 0; i < e->nkeys; i++)
        if (strcmp(e->kv[i].key, key) == 0) return e->kv[i].value;
    return NULL;
}

int stub_quantity(const char *value, unsigned long long *bytes, char *why, size_t whylen) {
    uint64_t b = 0;
    if (hk_parse_mem("memory", value, &b, why, whylen) != HK_OK) return -1;
    *bytes = b;
    return 0;
}

/* One entry "k=v,k=v" in [b, e). */
static int parse_entry(const char *b, const char *e, const char *what, int pos, stub_entry *out, char *err,
                       size_t errlen) {
    memset(out, 0, sizeof *out);
    while (b < e) {
        const char *comma = memchr(b, ',', (size_t)(e - b));
        const char *ie = comma ? comma : e;
        const char *tb = b, *te = ie;
        b = comma ? comma + 1 : e;
        trim(&tb, &te);
        if (tb == te) continue;
        const char *eq = memchr(tb, '=', (size_t)(te - tb));
        if (!eq) {
            snprintf(err, errlen, "%s %d: \"%.*s\" is not key=value", what, pos, (int)(te - tb), tb);
            return -1;
        }
        const char *kb = tb, *ke = eq, *vb = eq + 1, *ve = te;
        trim(&kb, &ke);
        trim(&vb, &ve);
        if (ke == kb || (size_t)(ke - kb) >= STUB_KEY_MAX || ve == vb || (size_t)(ve - vb) >= STUB_VALUE_MAX ||
            memchr(vb, '=', (size_t)(ve - vb))) {
            snprintf(err, errlen, "%s %d: bad entry \"%.*s\" (key 1..%d, value 1..%d characters, one '=')", what, pos,
                     (int)(te - tb), tb, STUB_KEY_MAX - 1, STUB_VALUE_MAX - 1);
            return -1;
        }
        if (out->nkeys == STUB_MAX_KEYS) {
            snprintf(err, errlen, "%s %d: more than %d keys", what, pos, STUB_MAX_KEYS);
            return -1;
        }
        snprintf(out->kv[out->nkeys].key, STUB_KEY_MAX, "%.*s", (int)(ke - kb), kb);
        snprintf(out->kv[out->nkeys].value, STUB_VALUE_MAX, "%.*s", (int)(ve - vb), vb);
        for (int i = 0; i < out->nkeys; i++) {
            if (strcmp(out->kv[i].key, out->kv[out->nkeys].key) == 0) {
                snprintf(err, errlen, "%s %d: key %s given twice", what, pos, out->kv[i].key);
                return -1;
            }
        }
        out->nkeys++;
    }
    return 0;
}

int stub_grammar_parse(const char *spec, const char *what, stub_entry_fn fn, void *ctx, char *err, size_t errlen) {
    int pos = 0;
    const char *p = spec ? spec : "";
    stub_entry entry;
    err[0] = '\0';
    while (*p) {
        const char *semi = strchr(p, ';');
        const char *e = semi ? semi : p + strlen(p);
        const char *b = p, *te = e;
        trim(&b, &te);
        p = semi ? semi + 1 : e;
        if (b == te) continue;
        if (parse_entry(b, te, what, pos, &entry, err, errlen) != 0) return -1;
        if (fn(ctx, pos, &entry, err, errlen) != 0) return -1;
        pos++;
    }
    return pos;
}

/* Calls `fn` per line that is not blank or a comment, past its leading blanks; 1: taken. */
typedef int (*stub_line_fn)(void *ctx, const char *line);

static unsigned stub_read_lines(const char *env, const char *expect, int say, stub_line_fn fn, void *ctx) {
    const char *path = getenv(env);
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!f) return 0;
    char line[256];
    unsigned taken = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        int whole = strchr(line, '\n') || feof(f);
        for (int c = 0; !whole && c != '\n' && c != EOF;) c = fgetc(f); /* the rest of a long line */
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (whole && (*p == '#' || *p == '\n' || *p == '\r' || *p == 0)) continue;
        if (whole && fn(ctx, p)) {
            taken++;
        } else if (say) {
            fprintf(stderr, "stub: %s %s line %u: expected %s, skipped\n", env, path, lineno, expect);
        }
    }
    fclose(f);
    return taken;
}

typedef struct {
    stub_parse_fn parse;
    unsigned char *out;
    size_t size;
    unsigned n, max;
} records;

static int take_record(void *ctx, const char *line) {
    records *r = ctx;
    unsigned char scratch[128];
    if (r->size > sizeof scratch || !r->parse(line, scratch)) return 0;
    if (r->n < r->max) memcpy(r->out + (size_t)r->n++ * r->size, scratch, r->size);
    return 1;
}

int stub_parse_u64(const char **p, uint64_t max, uint64_t *out) {
    const char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || v > max || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) return 0;
    *out = v;
    *p = end;
    return 1;
}

unsigned stub_read_records(const char *env, const char *expect, int say, stub_parse_fn parse, void *out, size_t size,
                           unsigned max) {
    records r = {parse, out, size, 0, max};
    stub_read_lines(env, expect, say, take_record, &r);
    return r.n;
}
