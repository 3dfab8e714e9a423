/* elfsym.c - a symbol of libc, looked up in libc's own dynamic symbol table.
 *
 * Why: this library interposes both dlsym and dlvsym (a tenant must not reach glibc's dlsym
 * through either, see dlsym.c), so its own references to them bind to its interposers. The loader
 * still needs glibc's real dlsym, and the trampolines need the next dlsym/dlvsym. The process's
 * link maps (reached with dladdr1 from a function this library does not interpose) name every
 * loaded object; in libc.so (glibc >= 2.34) or libdl.so (older glibc, where dlsym lived) the
 * dynamic section gives the symbol and string tables and the GNU (or SysV) hash table, searched
 * as ld.so does.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "dlsym.h"

static HK_NO_SANITIZE uint32_t gnu_hash(const char *s) {
    uint32_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = h * 33 + *p;
    return h;
}

static HK_NO_SANITIZE uint32_t sysv_hash(const char *s) {
    uint32_t h = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h = (h << 4) + *p;
        uint32_t g = h & 0xf0000000u;
        if (g) h ^= g >> 24;
        h &= ~g;
    }
    return h;
}

static HK_NO_SANITIZE int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static HK_NO_SANITIZE void *defined(const struct link_map *lm, const ElfW(Sym) * sym, const char *strtab,
                                    const char *name) {
    if (sym->st_shndx == SHN_UNDEF || sym->st_value == 0) return NULL;
    if ((sym->st_info & 0xf) != STT_FUNC) return NULL; /* ST_TYPE, the same for ELF32 and ELF64 */
    return same(strtab + sym->st_name, name) ? (void *)(lm->l_addr + sym->st_value) : NULL;
}

/* 1 if the object's file name is libc.so* or libdl.so* (dlsym lived in libdl before glibc 2.34). */
static HK_NO_SANITIZE int is_libc(const char *path) {
    const char *base = path;
    for (const char *p = path; p && *p; p++)
        if (*p == '/') base = p + 1;
    return base &&
           ((base[0] == 'l' && base[1] == 'i' && base[2] == 'b' && base[3] == 'c' && base[4] == '.') ||
            (base[0] == 'l' && base[1] == 'i' && base[2] == 'b' && base[3] == 'd' && base[4] == 'l' && base[5] == '.'));
}

static HK_NO_SANITIZE void *lookup_in(const struct link_map *lm, const char *name);

HK_NO_SANITIZE void *hk_preload_libc_symbol(const char *name) {
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1((void *)&dlerror, &info, (void **)&lm, RTLD_DL_LINKMAP) || lm == NULL) return NULL;
    while (lm->l_prev) lm = lm->l_prev; /* every loaded object, in load order */
    for (; lm; lm = lm->l_next) {
        if (!lm->l_name || !is_libc(lm->l_name) || lm->l_ld == NULL) continue;
        void *p = lookup_in(lm, name);
        if (p) return p;
    }
    return NULL;
}

static HK_NO_SANITIZE void *lookup_in(const struct link_map *lm, const char *name) {
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gnu = NULL, *sysv = NULL;
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        uintptr_t p = d->d_un.d_ptr;
        if (p < lm->l_addr) p += lm->l_addr; /* ld.so relocates these in place on most targets */
        if (d->d_tag == DT_SYMTAB)
            symtab = (const ElfW(Sym) *)p;
        else if (d->d_tag == DT_STRTAB)
            strtab = (const char *)p;
        else if (d->d_tag == DT_GNU_HASH)
            gnu = (const uint32_t *)p;
        else if (d->d_tag == DT_HASH)
            sysv = (const uint32_t *)p;
    }
    if (!symtab || !strtab) return NULL;
    if (gnu) {
        uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_size = gnu[2];
        if (nbuckets == 0) return NULL;
        const ElfW(Addr) *bloom = (const ElfW(Addr) *)(const void *)&gnu[4];
        const uint32_t *buckets = (const uint32_t *)(const void *)&bloom[bloom_size];
        const uint32_t *chain = &buckets[nbuckets];
        uint32_t h = gnu_hash(name);
        uint32_t i = buckets[h % nbuckets];
        if (i < symoffset) return NULL;
        for (;; i++) {
            uint32_t ch = chain[i - symoffset];
            if ((ch | 1u) == (h | 1u)) {
                void *p = defined(lm, &symtab[i], strtab, name);
                if (p) return p;
            }
            if (ch & 1u) return NULL;
        }
    }
    if (sysv) {
        uint32_t nbucket = sysv[0];
        if (nbucket == 0) return NULL;
        const uint32_t *buckets = &sysv[2], *chain = &sysv[2 + nbucket];
        for (uint32_t i = buckets[sysv_hash(name) % nbucket]; i != 0; i = chain[i]) {
            void *p = defined(lm, &symtab[i], strtab, name);
            if (p) return p;
        }
    }
    return NULL;
}
