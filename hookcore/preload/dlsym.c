/* dlsym.c - the dlsym interposer, a trampoline that never depends on the compiler.
 *
 * Why interpose dlsym at all: dlopen(<driver>) + dlsym(handle, name) searches that library's
 * scope, not the preload scope, so a program (or a vendor runtime) that loads the driver itself
 * would never meet our exported interposers. dlsym answers a policed name with the interposer.
 *
 * Everything else must behave exactly like the next dlsym, including dlsym(RTLD_NEXT, name), which
 * glibc resolves relative to its *caller's* return address. A C interposer calling the real dlsym
 * keeps that only if the compiler emits a sibling call (-O0 does not: RTLD_NEXT would then search
 * after libvgpu.so instead of after the caller). So dlsym is a few lines of assembly: save the
 * arguments, ask hk_dlsym_decide() for an interposer, and otherwise restore them and *jump* to the
 * next dlsym with the caller's return address untouched. Same code at every optimisation level.
 *
 * The next dlsym: dlsym(RTLD_NEXT, "dlsym") asked by this library, i.e. the dlsym of another
 * hookcore library preloaded after this one (so each answers its own names and passes the rest
 * on), or glibc's. glibc's own is found with dlvsym(RTLD_NEXT, "dlsym", <version>) and used by the
 * loader, which must never meet an interposer. If neither exists the trampoline returns NULL
 * rather than jumping to it.
 *
 * Sanitizer runtimes resolve their interceptors with dlsym(RTLD_NEXT, ...) before they are
 * initialised, so the decision path is built without their instrumentation (HK_NO_SANITIZE) and
 * touches nothing else for a name no shim polices.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <string.h>

#include "dlsym.h"

static HK_NO_SANITIZE int same_name(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static _Atomic(hk_dlsym_fn) g_libc;
_Atomic(hk_dlsym_fn) hk_dlsym_next HK_HIDDEN;   /* read by the dlsym trampoline */
_Atomic(hk_dlvsym_fn) hk_dlvsym_next HK_HIDDEN; /* read by the dlvsym trampoline */

/* The trampolines' own addresses (hidden labels: &dlsym could bind to another library's). */
extern char hk_dlsym_self[] HK_HIDDEN, hk_dlvsym_self[] HK_HIDDEN;

HK_NO_SANITIZE hk_dlsym_fn hk_preload_libc_dlsym(void) {
    hk_dlsym_fn f = hk_atomic_load_acquire(&g_libc);
    if (HK_LIKELY(f != NULL)) return f;
    /* Not through dlvsym: that name is this library's interposer now (elfsym.c says why). */
    f = (hk_dlsym_fn)hk_preload_libc_symbol("dlsym");
    hk_atomic_store_release(&g_libc, f);
    return f;
}

HK_NO_SANITIZE hk_dlsym_fn hk_preload_next_dlsym(void) {
    hk_dlsym_fn f = hk_atomic_load_acquire(&hk_dlsym_next);
    if (HK_LIKELY(f != NULL)) return f;
    hk_dlsym_fn libc = hk_preload_libc_dlsym();
    if (libc) f = (hk_dlsym_fn)libc(RTLD_NEXT, "dlsym"); /* called from here: "next after us" */
    if (!f) f = libc;
    hk_atomic_store_release(&hk_dlsym_next, f);
    return f;
}

static HK_NO_SANITIZE hk_dlvsym_fn next_dlvsym(void) {
    hk_dlvsym_fn f = hk_atomic_load_acquire(&hk_dlvsym_next);
    if (HK_LIKELY(f != NULL)) return f;
    hk_dlsym_fn libc = hk_preload_libc_dlsym();
    if (libc) f = (hk_dlvsym_fn)libc(RTLD_NEXT, "dlvsym");
    if (!f) f = (hk_dlvsym_fn)hk_preload_libc_symbol("dlvsym");
    hk_atomic_store_release(&hk_dlvsym_next, f);
    return f;
}

/* What a lookup of one of glibc's private symbol-lookup entry points gets: nothing. */
static void *refused(void *handle, const char *name) {
    (void)handle;
    (void)name;
    return NULL;
}

/* The ways to glibc's own symbol lookup, which would find the driver's real functions: a lookup
   of any of these names, through any handle (libc's own, RTLD_NEXT from a library loaded after
   this one, RTLD_DEFAULT), answers this library's interposer, so a tenant only ever holds ours. */
static HK_NO_SANITIZE void *lookup_function(const char *name) {
    if (name[0] != 'd' && name[0] != '_') return NULL;
    if (same_name(name, "dlsym")) return hk_dlsym_self;
    if (same_name(name, "dlvsym")) return hk_dlvsym_self;
    if (same_name(name, "__libc_dlsym") || same_name(name, "__libc_dlvsym") || same_name(name, "_dl_sym") ||
        same_name(name, "_dl_vsym"))
        return (void *)refused;
    return NULL;
}

/* Called by the trampolines: the interposer for a policed name, or NULL to pass the lookup on.
   Every handle is policed, RTLD_NEXT included: a library loaded after this one asking for the
   "next" cuMemAlloc_v2 would otherwise get the driver's. */
HK_HIDDEN void *hk_dlsym_decide(void *handle, const char *name);
HK_NO_SANITIZE void *hk_dlsym_decide(void *handle, const char *name) {
    (void)handle;
    if (HK_UNLIKELY(hk_atomic_load_relaxed(&hk_dlsym_next) == NULL)) hk_preload_next_dlsym();
    if (HK_UNLIKELY(hk_atomic_load_relaxed(&hk_dlvsym_next) == NULL)) next_dlvsym();
    if (HK_UNLIKELY(hk_atomic_load_relaxed(&hk_log_xdebug))) /* (macros only: no instrumented call) */
        hk_atomic_add_relaxed(&hk_log_xdlsym_calls, 1);
    if (name == NULL) return NULL;
    void *dl = lookup_function(name);
    if (dl) return dl;
    for (const hk_shim *const *sp = hk_preload_shims; *sp; sp++) {
        const char *p = (*sp)->prefix;
        if (name[0] == p[0] && strncmp(name, p, strlen(p)) == 0) return hk_preload_hook_of(name);
    }
    return NULL;
}

/* dlvsym: the same decision whatever the version asked for (the driver's symbols carry none;
   dlsym@GLIBC_2.34 and every other version of a lookup function get ours). */
HK_HIDDEN void *hk_dlvsym_decide(void *handle, const char *name, const char *version);
HK_NO_SANITIZE void *hk_dlvsym_decide(void *handle, const char *name, const char *version) {
    (void)version;
    return hk_dlsym_decide(handle, name);
}

__attribute__((constructor)) static void hk_dlsym_ctor(void) {
    hk_preload_next_dlsym();
    next_dlvsym();
}

#if defined(__x86_64__)
__asm__("    .text\n"
        "    .globl dlsym\n"
        "    .type dlsym, @function\n"
        "    .p2align 4\n"
        "    .globl hk_dlsym_self\n"
        "    .hidden hk_dlsym_self\n"
        "dlsym:\n"
        "hk_dlsym_self:\n"
        "    .cfi_startproc\n"
        "    endbr64\n"
        "    pushq %rdi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    pushq %rsi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    subq $8, %rsp\n" /* 16-byte stack alignment for the call */
        "    .cfi_adjust_cfa_offset 8\n"
        "    call hk_dlsym_decide\n"
        "    addq $8, %rsp\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rsi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rdi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    testq %rax, %rax\n"
        "    jnz 1f\n" /* an interposer: return it */
        "    movq hk_dlsym_next(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    jz 1f\n"     /* no dlsym to pass on to: return NULL */
        "    jmp *%rax\n" /* the caller's return address is still on top */
        "1:  ret\n"
        "    .cfi_endproc\n"
        "    .size dlsym, .-dlsym\n"
        "    .globl dlvsym\n"
        "    .type dlvsym, @function\n"
        "    .globl hk_dlvsym_self\n"
        "    .hidden hk_dlvsym_self\n"
        "    .p2align 4\n"
        "dlvsym:\n"
        "hk_dlvsym_self:\n"
        "    .cfi_startproc\n"
        "    endbr64\n"
        "    pushq %rdi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    pushq %rsi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    pushq %rdx\n" /* three pushes: the stack is 16-byte aligned again */
        "    .cfi_adjust_cfa_offset 8\n"
        "    call hk_dlvsym_decide\n"
        "    popq %rdx\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rsi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rdi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    testq %rax, %rax\n"
        "    jnz 1f\n"
        "    movq hk_dlvsym_next(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    jz 1f\n"
        "    jmp *%rax\n" /* the caller's return address is still on top */
        "1:  ret\n"
        "    .cfi_endproc\n"
        "    .size dlvsym, .-dlvsym\n");
#elif defined(__aarch64__)
__asm__("    .text\n"
        "    .globl dlsym\n"
        "    .type dlsym, %function\n"
        "    .globl hk_dlsym_self\n"
        "    .hidden hk_dlsym_self\n"
        "    .p2align 2\n"
        "dlsym:\n"
        "hk_dlsym_self:\n"
        "    hint 34\n" /* bti c */
        "    stp x29, x30, [sp, #-32]!\n"
        "    mov x29, sp\n"
        "    stp x0, x1, [sp, #16]\n"
        "    bl hk_dlsym_decide\n"
        "    mov x9, x0\n"
        "    ldp x0, x1, [sp, #16]\n"
        "    ldp x29, x30, [sp], #32\n" /* x30 = the caller's return address again */
        "    cbnz x9, 1f\n"
        "    adrp x16, hk_dlsym_next\n"
        "    ldr x16, [x16, #:lo12:hk_dlsym_next]\n"
        "    cbz x16, 2f\n"
        "    br x16\n"
        "1:  mov x0, x9\n"
        "    ret\n"
        "2:  mov x0, #0\n"
        "    ret\n"
        "    .size dlsym, .-dlsym\n"
        "    .globl dlvsym\n"
        "    .type dlvsym, %function\n"
        "    .globl hk_dlvsym_self\n"
        "    .hidden hk_dlvsym_self\n"
        "    .p2align 2\n"
        "dlvsym:\n"
        "hk_dlvsym_self:\n"
        "    hint 34\n"
        "    stp x29, x30, [sp, #-48]!\n"
        "    mov x29, sp\n"
        "    stp x0, x1, [sp, #16]\n"
        "    str x2, [sp, #32]\n"
        "    bl hk_dlvsym_decide\n"
        "    mov x9, x0\n"
        "    ldp x0, x1, [sp, #16]\n"
        "    ldr x2, [sp, #32]\n"
        "    ldp x29, x30, [sp], #48\n"
        "    cbnz x9, 3f\n"
        "    adrp x16, hk_dlvsym_next\n"
        "    ldr x16, [x16, #:lo12:hk_dlvsym_next]\n"
        "    cbz x16, 4f\n"
        "    br x16\n"
        "3:  mov x0, x9\n"
        "    ret\n"
        "4:  mov x0, #0\n"
        "    ret\n"
        "    .size dlvsym, .-dlvsym\n");
#else
#error "hookcore: the dlsym trampoline exists for x86_64 and aarch64 only"
#endif
