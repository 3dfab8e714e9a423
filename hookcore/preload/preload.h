/* preload.h - the vendor-neutral preload layer shared by every hookcore library. */
#ifndef HOOKCORE_PRELOAD_H
#define HOOKCORE_PRELOAD_H

#include <stddef.h>

#define HK_HIDDEN __attribute__((visibility("hidden")))

/* This library's stem ("vgpu" for libvgpu.so), from its own file name. Never NULL. */
const char *hk_preload_stem(void) HK_HIDDEN;
/* Parse "lib<stem>.so..." (any directory); 0 and the stem in out, or -1. */
int hk_preload_stem_of(const char *file, char *out, size_t n) HK_HIDDEN;

#endif
