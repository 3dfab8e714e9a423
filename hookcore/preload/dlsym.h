/* dlsym.h - the real dlsym functions, for the preload layer's own lookups. */
#ifndef HOOKCORE_PRELOAD_DLSYM_H
#define HOOKCORE_PRELOAD_DLSYM_H

#include "preload.h"

typedef void *(*hk_dlsym_fn)(void *, const char *);
typedef void *(*hk_dlvsym_fn)(void *, const char *, const char *);

/* A function of libc by name, from libc's own dynamic symbol table (elfsym.c); NULL if absent. */
void *hk_preload_libc_symbol(const char *name) HK_HIDDEN;

/* glibc's dlsym (found in libc's symbol table, so never an interposer). NULL only if libc has none. */
hk_dlsym_fn hk_preload_libc_dlsym(void) HK_HIDDEN;

/* The dlsym the trampoline passes unpoliced lookups to: the next interposer of dlsym in the
   process (another hookcore library preloaded after this one) or glibc's. */
hk_dlsym_fn hk_preload_next_dlsym(void) HK_HIDDEN;

#endif
