/* demo.h - the fake vendor API (tests/hook/c/demodrv.c) the demo shim polices. */
#ifndef DEMO_H
#define DEMO_H
#include <stddef.h>

#define DEMO_OK              0
#define DEMO_OOM             2
#define DEMO_NOT_INITIALIZED 3

int demoInit(void);
int demoMalloc(void **p, size_t size);
int demoFree(void *p);
int demoMemInfo(size_t *free_b, size_t *total_b);
#endif
