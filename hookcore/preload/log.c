/* log.c - the preload layer's stderr log: one write(2) per line, no stdio (usable before main and
 * from any thread), "hookcore: " prefix. HOOKCORE_LOG=debug turns on the debug lines. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

_Atomic int hk_log_xdebug;
_Atomic unsigned long hk_log_xdlsym_calls, hk_log_xswaps;

void hk_log(const char *fmt, ...) {
    char buf[600];
    memcpy(buf, "hookcore: ", 10);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + 10, sizeof buf - 11, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t len = 10 + ((size_t)n < sizeof buf - 11 ? (size_t)n : sizeof buf - 12);
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}

__attribute__((constructor)) static void hk_log_ctor(void) {
    const char *l = getenv("HOOKCORE_LOG");
    hk_atomic_store_relaxed(&hk_log_xdebug, l != NULL && strcmp(l, "debug") == 0);
}
