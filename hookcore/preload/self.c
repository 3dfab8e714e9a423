/* self.c - which hook library this is: the stem of its own file name.
 *
 * libvgpu.so -> "vgpu", libvnpu.so.1 -> "vnpu". The stem names the config file
 * (/run/hookcore/<stem>/config) and the default ledger, so several hookcore libraries preloaded
 * into one process each find their own claim. Found with dladdr() on a function of this library;
 * the stem it was built as (hk_preload_built_stem) when the name does not parse.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "preload.h"

static char g_stem[33];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* "lib<stem>.so[.N...]" -> stem, when stem is [a-z0-9_-]{1,32}. */
int hk_preload_stem_of(const char *file, char *out, size_t n) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (strncmp(base, "lib", 3) != 0) return -1;
    base += 3;
    const char *so = strstr(base, ".so");
    if (!so || (so[3] != '\0' && so[3] != '.')) return -1;
    size_t len = (size_t)(so - base);
    if (len == 0 || len > 32 || len >= n) return -1;
    for (size_t i = 0; i < len; i++) {
        char c = base[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return -1;
    }
    memcpy(out, base, len);
    out[len] = '\0';
    return 0;
}

static void find_stem(void) {
    Dl_info info;
    if (dladdr((void *)&hk_preload_stem, &info) && info.dli_fname &&
        hk_preload_stem_of(info.dli_fname, g_stem, sizeof g_stem) == 0)
        return;
    strncpy(g_stem, hk_preload_built_stem, sizeof g_stem - 1);
}

const char *hk_preload_stem(void) {
    pthread_once(&g_once, find_stem);
    return g_stem;
}
