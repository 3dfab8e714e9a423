/* registry.c - the hook registry: every shim's interposers and real pointers, loaded once.
 *
 * A shim's real library is opened (RTLD_NOW | RTLD_NODELETE) the first time one of its names is
 * needed, and every hook and aux name is resolved in it with libc's own dlsym, so the loader
 * never meets our interposer. A name the driver lacks keeps a NULL real pointer: the interposer
 * then answers as the driver would (not found / not initialised).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "dlsym.h"
#include "preload.h"

static pthread_mutex_t g_load_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int t_loading; /* a library constructor calling back into us while we load */

/* A shim's `library` may name several files separated by ':' (a runtime whose file name carries
   its major version): a file the process has already loaded wins (RTLD_NOLOAD matches it by name
   or, through a symlink, by inode), else the first that opens. */
static void *open_library(const char *names) {
    char one[256];
    for (int pass = 0; pass < 2; pass++) {
        for (const char *p = names; *p;) {
            size_t n = strcspn(p, ":");
            if (n > 0 && n < sizeof one) {
                memcpy(one, p, n);
                one[n] = 0;
                void *h = dlopen(one, RTLD_NOW | RTLD_NODELETE | (pass == 0 ? RTLD_NOLOAD : 0));
                if (h) return h;
            }
            p += n + (p[n] == ':');
        }
    }
    return NULL;
}

static void load(const hk_shim *s) {
    hk_dlsym_fn real = hk_preload_libc_dlsym();
    void *h = open_library(s->library);
    s->rt->handle = h;
    if (h && real) {
        for (size_t i = 0; i < s->ntotal; i++) *s->hooks[i].real = real(h, s->hooks[i].name);
    }
    if (!h && hk_log_debug()) hk_log("%s shim: cannot load %s: %s", s->name, s->library, dlerror());
}

void hk_preload_load(const hk_shim *s) {
    if (HK_LIKELY(hk_atomic_load_acquire(&s->rt->xloaded))) return;
    if (t_loading) return; /* re-entered from the real library's constructor: let it pass through */
    t_loading = 1;
    pthread_mutex_lock(&g_load_lock);
    if (!hk_atomic_load_relaxed(&s->rt->xloaded)) {
        load(s);
        hk_atomic_store_release(&s->rt->xloaded, 1); /* the real pointers before the flag */
    }
    pthread_mutex_unlock(&g_load_lock);
    t_loading = 0;
}

void *hk_preload_hook_of(const char *name) {
    for (const hk_shim *const *sp = hk_preload_shims; *sp; sp++) {
        const hk_shim *s = *sp;
        size_t pl = strlen(s->prefix);
        if (strncmp(name, s->prefix, pl) != 0) continue;
        for (size_t i = 0; i < s->nhooks; i++) {
            if (strcmp(s->hooks[i].name, name) != 0) continue;
            hk_preload_load(s);
            return *s->hooks[i].real ? s->hooks[i].hook : NULL; /* the driver lacks it: as it would */
        }
    }
    return NULL;
}

void *hk_preload_swap(const hk_shim *s, void *real) {
    if (hk_log_debug()) hk_atomic_add_relaxed(&hk_log_xswaps, 1);
    for (size_t i = 0; i < s->nhooks; i++)
        if (*s->hooks[i].real == real) return s->hooks[i].hook;
    return real;
}

int hk_preload_ordinal_of_uuid(const char *uuid) {
    for (const hk_shim *const *sp = hk_preload_shims; *sp; sp++) {
        if ((*sp)->ordinal_of_uuid) {
            int ord = (*sp)->ordinal_of_uuid(uuid);
            if (ord >= 0) return ord;
        }
    }
    return -1;
}

int hk_preload_device_alone(int ldev) {
    for (const hk_shim *const *sp = hk_preload_shims; *sp; sp++) {
        if ((*sp)->device_alone) {
            int a = (*sp)->device_alone(ldev);
            if (a >= 0) return a;
        }
    }
    return -1;
}

uint32_t hk_preload_clock_ratio_milli(int ldev) {
    for (const hk_shim *const *sp = hk_preload_shims; *sp; sp++) {
        if ((*sp)->clock_ratio_milli) {
            uint32_t r = (*sp)->clock_ratio_milli(ldev);
            if (r) return r;
        }
    }
    return 0;
}
