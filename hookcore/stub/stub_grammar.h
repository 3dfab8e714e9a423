/* stub_grammar.h - the one grammar of the stubs' fake-device variables, HOOKCORE_STUB_DEVICES
 * (stub libcuda and libnvidia-ml, stub_devices.c) and HOOKCORE_STUB_NPUS (the Ascend stubs,
 * ascend_devices.c). dra/fakes writes and reads the same grammar from Python.
 *
 *   spec  = entry *(";" entry)     one device per entry; empty entries (";;", a trailing ';') skipped
 *   entry = pair *("," pair)       empty pairs ("a=1,,b=2") skipped
 *   pair  = key "=" value          spaces and tabs around the key and the value are trimmed
 *   key   = 1..23 characters, none of , ; =
 *   value = 1..95 characters, none of , ; = (spaces inside are kept: "name=NVIDIA H200")
 * A key appears at most once per entry, an entry has at most STUB_MAX_KEYS keys. What the keys
 * mean is each caller's; quantities (memory=141Gi) are the core's (hk_parse_mem: one rule in C).
 *
 * Private to the stubs; not part of any hook library.
 */
#ifndef HOOKCORE_STUB_GRAMMAR_H
#define HOOKCORE_STUB_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden) /* each stub library has its own copy; none exports it */

#define STUB_MAX_KEYS  24
#define STUB_KEY_MAX   24 /* with the NUL */
#define STUB_VALUE_MAX 96 /* with the NUL */

typedef struct stub_entry {
    int nkeys; /* every key=value as given, in order */
    struct {
        char key[STUB_KEY_MAX];
        char value[STUB_VALUE_MAX];
    } kv[STUB_MAX_KEYS];
} stub_entry;

/* Called once per entry, in order (pos counts entries from 0): 0, or -1 with a message in err. */
typedef int (*stub_entry_fn)(void *ctx, int pos, const stub_entry *e, char *err, size_t errlen);

/* Parse `spec` (NULL = empty): the number of entries, or -1 with a one-line message in err that
   names the entry as "<what> <pos>" (what = "device", "NPU"). */
int stub_grammar_parse(const char *spec, const char *what, stub_entry_fn fn, void *ctx, char *err, size_t errlen);

/* The value of `key`, or NULL. */
const char *stub_entry_get(const stub_entry *e, const char *key);

/* A line as one record of `size` bytes (at most 128): 1 and the record written, or 0. */
typedef int (*stub_parse_fn)(const char *line, void *record);

/* The file the variable `env` names (unset or empty: nothing), a record a line (the stubs'
   process lists): lines blank or starting with '#' are skipped; one longer than 255 bytes or one
   `parse` refuses is skipped and, when `say`, named on stderr as "stub: <env> <path> line <n>:
   expected <expect>, skipped". The first `max` records go to `out` (`size` bytes each); returns
   how many were written. Lines past `max` are still checked (and named when `say`). */
unsigned stub_read_records(const char *env, const char *expect, int say, stub_parse_fn parse, void *out, size_t size,
                           unsigned max);

/* An unsigned decimal of at most `max` at *p (blanks before it skipped) ending at a blank or the
   line's end: 1 with *out set and *p past it; 0 for anything else (a record's field). */
int stub_parse_u64(const char **p, uint64_t max, uint64_t *out);

/* Bytes of a quantity by the core's rule (hk_parse_mem); 0 and *bytes, or -1 with `why` set. */
int stub_quantity(const char *value, unsigned long long *bytes, char *why, size_t whylen);

#pragma GCC visibility pop

#endif
