/* preload.h - the vendor-neutral preload layer every hookcore library is built on.
 *
 * A hook library lib<stem>.so = core/ (config, ledger, admission, limiter, meter) + preload/ (this)
 * + a set of shims (see the Makefile's SHIMS_<stem>). A shim describes itself with one hk_shim:
 * the real library it stands in front of, its interposers (from its hooks.def), the real functions
 * it only calls, its legacy environment names (HK_ENV_ALIAS lines of the shim's env_aliases.def,
 * optional). The Makefile generates, per library, the list of its shims (hk_preload_shims) and the
 * export list (only dlsym and the HK_HOOK names of hooks.def); and for all libraries one lookup of
 * the legacy names by stem, hk_env_aliases_for() (build/gen/env_aliases.c), for the Python wrapper.
 *
 * What this layer does for every shim:
 *   - dlsym: a lookup of a policed name (dlopen + dlsym bypasses LD_PRELOAD) gets the interposer;
 *     every other lookup, RTLD_NEXT included, reaches the next dlsym with the caller's own return
 *     address (an assembly trampoline, not a hoped-for tail call) -- dlsym.c;
 *   - loading the real library once and resolving every hook's and aux function's real pointer,
 *     and swapping a real pointer for the interposer of the same variant (cuGetProcAddress) --
 *     registry.c;
 *   - the process state (uninitialised / ready / dormant / failed closed) around hk_init_with() --
 *     state.c;
 *   - logging to stderr without stdio (HOOKCORE_LOG=debug) -- log.c; the library's stem -- self.c.
 */
#ifndef HOOKCORE_PRELOAD_H
#define HOOKCORE_PRELOAD_H

#include <stddef.h>
#include <stdint.h>

#include "../core/atomic.h"
#include "../core/hookcore.h"

#define HK_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HK_HIDDEN      __attribute__((visibility("hidden")))
#define HK_EXPORT      __attribute__((visibility("default"))) /* interposers only; all else is hidden */
/* Code a sanitizer runtime may run through before it is initialised (its own dlsym lookups) must
   not be instrumented by it. */
#define HK_NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

/* ---------------------------------------------------------------------------------------------
 * Shims
 * ------------------------------------------------------------------------------------------- */
typedef struct hk_hook {
    const char *name; /* the driver's symbol name, e.g. "cuMemAlloc_v2" */
    void *hook;       /* our interposer; NULL for an aux function (called, not policed) */
    void **real;      /* where the real pointer goes */
} hk_hook;

typedef struct hk_shim_rt { /* per-shim mutable state */
    _Atomic int xloaded;    /* 1 once the real pointers are filled (published with release) */
    void *handle;           /* the real library (dlopen), NULL if absent */
} hk_shim_rt;

typedef struct hk_shim {
    const char *name;    /* the shim directory's name */
    const char *library; /* the real library to dlopen ("lib<vendor>.so.1"; several: "a.so:a.so.6", registry.c) */
    const char *prefix;  /* every hook name starts with it ("cu"): dlsym's quick test */
    const hk_hook *hooks;
    size_t nhooks; /* hooks[0..nhooks) are interposers, the rest aux */
    size_t ntotal;
    const hk_env_alias *aliases;              /* legacy environment names (env_aliases.def), NULL = none */
    int (*ordinal_of_uuid)(const char *uuid); /* optional: this API's device ordinal of a UUID */
    uint32_t (*clock_ratio_milli)(int ldev);  /* optional: clock now / clock at full load, x1000 */
    int (*device_alone)(int ldev);            /* optional: 1 the only compute process on it, 0 not, -1 unknown */
    void (*setup)(void);                      /* optional: once configured (READY), e.g. install meter ops */
    void (*atfork_child)(void);               /* optional: reset process-local state in a forked child */
    hk_shim_rt *rt;
} hk_shim;

/* Generated per library (build/gen/<stem>/shims.c): the library's shims, NULL-terminated. */
extern const hk_shim *const hk_preload_shims[] HK_HIDDEN;

/* Load the real library of `s` and resolve every real pointer, once; cheap after the first call. */
void hk_preload_load(const hk_shim *s) HK_HIDDEN;

/* The interposer registered for `name` in any shim of this library (loading that shim's real
   library), or NULL when the name is not policed or the driver lacks it. */
void *hk_preload_hook_of(const char *name) HK_HIDDEN;

/* The interposer of shim `s` whose real pointer is `real`, or `real` itself. */
void *hk_preload_swap(const hk_shim *s, void *real) HK_HIDDEN;

/* A device ordinal for `uuid` from any shim that can tell (a compute API's UUID query), or -1. */
int hk_preload_ordinal_of_uuid(const char *uuid) HK_HIDDEN;

/* Clock boost of ledger device `ldev` from any shim that can read clocks, x1000; 0 = unknown. */
uint32_t hk_preload_clock_ratio_milli(int ldev) HK_HIDDEN;

/* Whether this process is the only one with work on ledger device `ldev` (1), is not (0), or
   nobody can tell (-1), from any shim that can list a device's processes. */
int hk_preload_device_alone(int ldev) HK_HIDDEN;

/* ---------------------------------------------------------------------------------------------
 * Process state
 * ------------------------------------------------------------------------------------------- */
#define HK_STATE_UNINIT     0
#define HK_STATE_READY      1
#define HK_STATE_FAILCLOSED 2
#define HK_STATE_DORMANT    3 /* no configuration: every call passes straight through */
extern _Atomic int hk_preload_xstate HK_HIDDEN;
extern _Atomic int hk_preload_xlimiter_on HK_HIDDEN; /* some device has a compute limit */

int hk_preload_init_slow(void) HK_HIDDEN;
/* Initialise on first use (config, ledger); returns HK_STATE_*. */
static inline int hk_preload_ready(void) {
    int s = hk_atomic_load_acquire(&hk_preload_xstate);
    return HK_LIKELY(s != HK_STATE_UNINIT) ? s : hk_preload_init_slow();
}
static inline int hk_preload_limiter_on(void) { return hk_atomic_load_relaxed(&hk_preload_xlimiter_on); }

/* ---------------------------------------------------------------------------------------------
 * Logging (stderr, one write(2) per line, "hookcore: " prefix; no stdio)
 * ------------------------------------------------------------------------------------------- */
extern _Atomic int hk_log_xdebug HK_HIDDEN; /* HOOKCORE_LOG=debug */
static inline int hk_log_debug(void) { return HK_UNLIKELY(hk_atomic_load_relaxed(&hk_log_xdebug) != 0); }
void hk_log(const char *fmt, ...) HK_HIDDEN __attribute__((format(printf, 1, 2)));

/* Counters for the debug log only: bumped (relaxed) only while HOOKCORE_LOG=debug. */
extern _Atomic unsigned long hk_log_xdlsym_calls HK_HIDDEN, hk_log_xswaps HK_HIDDEN;

/* ---------------------------------------------------------------------------------------------
 * Identity
 * ------------------------------------------------------------------------------------------- */
/* This library's stem ("vgpu" for libvgpu.so), from its own file name. Never NULL. */
const char *hk_preload_stem(void) HK_HIDDEN;
/* Parse "lib<stem>.so..." (any directory); 0 and the stem in out, or -1. */
int hk_preload_stem_of(const char *file, char *out, size_t n) HK_HIDDEN;
/* The stem the Makefile built this library as (generated with the shim list). */
extern const char hk_preload_built_stem[] HK_HIDDEN;

#endif /* HOOKCORE_PRELOAD_H */
