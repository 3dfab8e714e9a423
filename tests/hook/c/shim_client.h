/* shim_client.h - what the files of the shim tests' CUDA client share (shim_client.c has main and
 * the commands' list; shim_client_memory.c the memory commands, shim_client_work.c launches, copies
 * and threads). Build: cc -o shim_client tests/hook/c/shim_client*.c -ldl -lpthread
 */
#ifndef SHIM_CLIENT_H
#define SHIM_CLIENT_H

#include <stddef.h>

#include "../../../hookcore/cuda/cuda_abi.h"

#define MiB ((size_t)1 << 20)
#define V   12000 /* the cudaVersion every entry point is resolved for */

typedef CUresult (*gpa_v2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
extern gpa_v2_t gpa;
extern void *libcuda;
extern CUresult (*cuInit_)(unsigned);
extern CUresult (*cuDeviceGet_)(CUdevice *, int);
extern CUresult (*cuPrimaryRetain_)(CUcontext *, CUdevice);
extern CUresult (*cuCtxSetCurrent_)(CUcontext);
extern CUresult (*cuMemAlloc_)(CUdeviceptr *, size_t);
extern CUresult (*cuMemFree_)(CUdeviceptr);
extern CUresult (*cuMemGetInfo_)(size_t *, size_t *);
extern CUresult (*cuDeviceTotalMem_)(size_t *, CUdevice);

/* Print "FAIL ..." and exit 1. */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* An entry point through cuGetProcAddress (fails when it does not resolve). */
void *sym(const char *name, int ver, cuuint64_t flags);
/* Which shared object (basename) and symbol a pointer belongs to. */
const char *owner(void *p, const char **sname);
/* dlopen libcuda, resolve the entry points above, cuInit, make device `dev`'s primary context current. */
void setup(int dev);
void meminfo(size_t *f, size_t *t);
size_t parse_size(const char *s); /* bytes, or with a K or M suffix */
double now_s(void);               /* CLOCK_MONOTONIC, seconds */

/* shim_client_memory.c */
void cmd_quota(size_t chunk);
void cmd_vmm(void);
void cmd_async(void);
void cmd_arrays(void);
void cmd_pitch(void);
void cmd_grab(size_t chunk);
void cmd_churn(size_t chunk, size_t n);
void cmd_fork(size_t chunk);
void cmd_ctxmem(const char *how, size_t chunk, int array);

/* shim_client_work.c */
void cmd_copy(const char *what, size_t bytes, double seconds, int ptds);
void cmd_copynames(void);
void cmd_threads(int n, int iters);
void cmd_exitlaunch(unsigned us, unsigned n);
void cmd_launch(unsigned us, int graph, double seconds, unsigned gap_us, const char *where, const char *wait);
void cmd_relaunch(unsigned us, double seconds, const char *how);
void cmd_streamgone(unsigned us);
void cmd_capture(void);
void cmd_holdcapture(int mode, unsigned us, double seconds, int same, int query);

#endif /* SHIM_CLIENT_H */
