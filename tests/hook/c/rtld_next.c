/* rtld_next.c - dlsym(RTLD_NEXT, ...) keeps its meaning under the shim's dlsym interposer.
 *
 * Built three times: -DPART_A -> liba.so, -DPART_B -> libb.so, -DPART_MAIN -> the program, linked
 * with -la -lb. Both libraries define twin(); liba asks for the *next* twin after itself, which is
 * libb's. An interposer that called the real dlsym with a normal call (not a tail call) would make
 * libvgpu.so the caller, and the "next" twin after libvgpu.so is liba's own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#if defined(PART_A)
int twin(void) { return 1; }
void *twin_next(void) { return dlsym(RTLD_NEXT, "twin"); }
#elif defined(PART_B)
int twin(void) { return 2; }
#else
void *twin_next(void);
int main(void) {
    int (*f)(void) = (int (*)(void))twin_next();
    int v = f ? f() : 0;
    printf("NEXT %d\n", v);
    return v == 2 ? 0 : 1;
}
#endif
