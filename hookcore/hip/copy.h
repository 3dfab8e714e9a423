/* copy.h - the HIP copy and memset entry points the shim meters, as one X-macro table.
 *
 * X(name, parameters, arguments, stream, bytes, kind): `stream` is the stream the work runs on
 * (NULL = the null stream, where a synchronous call's work goes), `bytes` the amount moved or
 * set, `kind` separates signatures (a 1 MiB host-to-device copy is not a 1 MiB memset).
 * hip.h declares the prototypes from it and launch.c defines the interposers; hooks.def lists
 * the same names (a test compares the library's exports with hooks.def). HK_HIP_COPIES_SPT: the
 * per-thread default stream's variants (_spt).
 */
#ifndef HOOKCORE_HIP_COPY_H
#define HOOKCORE_HIP_COPY_H

#define HK_HIP_ST , hipStream_t st
/* A 3D extent's bytes (its width is in bytes for linear memory); hipMemcpy3D's parameter struct is
   not read (its signature is its kind alone: the meter charges what the events measure). */
#define HK_HIP_VOLUME(e) ((uint64_t)(e).width * ((e).height ? (e).height : 1) * ((e).depth ? (e).depth : 1))

#define HK_HIP_COPIES(X)                                                                                               \
    X(hipMemcpy, (void *dst, const void *src, size_t n, hipMemcpyKind k), (dst, src, n, k), NULL, n, 1)                \
    X(hipMemcpyAsync, (void *dst, const void *src, size_t n, hipMemcpyKind k HK_HIP_ST), (dst, src, n, k, st), st, n,  \
      1)                                                                                                               \
    X(hipMemcpyWithStream, (void *dst, const void *src, size_t n, hipMemcpyKind k HK_HIP_ST), (dst, src, n, k, st),    \
      st, n, 1)                                                                                                        \
    X(hipMemcpyHtoD, (hipDeviceptr_t dst, void *src, size_t n), (dst, src, n), NULL, n, 2)                             \
    X(hipMemcpyHtoDAsync, (hipDeviceptr_t dst, void *src, size_t n HK_HIP_ST), (dst, src, n, st), st, n, 2)            \
    X(hipMemcpyDtoH, (void *dst, hipDeviceptr_t src, size_t n), (dst, src, n), NULL, n, 3)                             \
    X(hipMemcpyDtoHAsync, (void *dst, hipDeviceptr_t src, size_t n HK_HIP_ST), (dst, src, n, st), st, n, 3)            \
    X(hipMemcpyDtoD, (hipDeviceptr_t dst, hipDeviceptr_t src, size_t n), (dst, src, n), NULL, n, 4)                    \
    X(hipMemcpyDtoDAsync, (hipDeviceptr_t dst, hipDeviceptr_t src, size_t n HK_HIP_ST), (dst, src, n, st), st, n, 4)   \
    X(hipMemcpy2D, (void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h, hipMemcpyKind k),            \
      (dst, dp, src, sp, w, h, k), NULL, (uint64_t)w *h, 6)                                                            \
    X(hipMemcpy2DAsync,                                                                                                \
      (void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h, hipMemcpyKind k HK_HIP_ST),               \
      (dst, dp, src, sp, w, h, k, st), st, (uint64_t)w *h, 6)                                                          \
    X(hipMemcpyPeer, (void *dst, int dd, const void *src, int sd, size_t n), (dst, dd, src, sd, n), NULL, n, 5)        \
    X(hipMemcpyPeerAsync, (void *dst, int dd, const void *src, int sd, size_t n HK_HIP_ST), (dst, dd, src, sd, n, st), \
      st, n, 5)                                                                                                        \
    X(hipMemset, (void *dst, int v, size_t n), (dst, v, n), NULL, n, 9)                                                \
    X(hipMemsetAsync, (void *dst, int v, size_t n HK_HIP_ST), (dst, v, n, st), st, n, 9)                               \
    X(hipMemsetD8, (hipDeviceptr_t dst, unsigned char v, size_t n), (dst, v, n), NULL, n, 10)                          \
    X(hipMemsetD8Async, (hipDeviceptr_t dst, unsigned char v, size_t n HK_HIP_ST), (dst, v, n, st), st, n, 10)         \
    X(hipMemsetD32, (hipDeviceptr_t dst, int v, size_t n), (dst, v, n), NULL, 4 * (uint64_t)n, 11)                     \
    X(hipMemsetD32Async, (hipDeviceptr_t dst, int v, size_t n HK_HIP_ST), (dst, v, n, st), st, 4 * (uint64_t)n, 11)    \
    X(hipMemcpyToSymbol, (const void *sym, const void *src, size_t n, size_t off, hipMemcpyKind k),                    \
      (sym, src, n, off, k), NULL, n, 7)                                                                               \
    X(hipMemcpyToSymbolAsync, (const void *sym, const void *src, size_t n, size_t off, hipMemcpyKind k HK_HIP_ST),     \
      (sym, src, n, off, k, st), st, n, 7)                                                                             \
    X(hipMemcpyFromSymbol, (void *dst, const void *sym, size_t n, size_t off, hipMemcpyKind k), (dst, sym, n, off, k), \
      NULL, n, 8)                                                                                                      \
    X(hipMemcpyFromSymbolAsync, (void *dst, const void *sym, size_t n, size_t off, hipMemcpyKind k HK_HIP_ST),         \
      (dst, sym, n, off, k, st), st, n, 8)                                                                             \
    X(hipMemset2D, (void *dst, size_t pitch, int v, size_t w, size_t h), (dst, pitch, v, w, h), NULL, (uint64_t)w *h,  \
      12)                                                                                                              \
    X(hipMemset2DAsync, (void *dst, size_t pitch, int v, size_t w, size_t h HK_HIP_ST), (dst, pitch, v, w, h, st), st, \
      (uint64_t)w *h, 12)                                                                                              \
    X(hipMemset3D, (hipPitchedPtr pp, int v, hipExtent e), (pp, v, e), NULL, HK_HIP_VOLUME(e), 14)                     \
    X(hipMemset3DAsync, (hipPitchedPtr pp, int v, hipExtent e HK_HIP_ST), (pp, v, e, st), st, HK_HIP_VOLUME(e), 14)    \
    X(hipMemcpy3D, (const void *p), (p), NULL, 0, 13)                                                                  \
    X(hipMemcpy3DAsync, (const void *p HK_HIP_ST), (p, st), st, 0, 13)

/* Their per-thread default stream twins (what a program built with -fgpu-default-stream=per-thread
   calls): the same work, where the null stream means hipStreamPerThread, so the meter's events go
   to the stream the work runs on. */
#define HK_HIP_PT(st) ((st) ? (st) : hipStreamPerThread)

#define HK_HIP_COPIES_SPT(X)                                                                                           \
    X(hipMemcpy_spt, (void *dst, const void *src, size_t n, hipMemcpyKind k), (dst, src, n, k), hipStreamPerThread, n, \
      1)                                                                                                               \
    X(hipMemcpyAsync_spt, (void *dst, const void *src, size_t n, hipMemcpyKind k HK_HIP_ST), (dst, src, n, k, st),     \
      HK_HIP_PT(st), n, 1)                                                                                             \
    X(hipMemcpy2D_spt, (void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h, hipMemcpyKind k),        \
      (dst, dp, src, sp, w, h, k), hipStreamPerThread, (uint64_t)w *h, 6)                                              \
    X(hipMemcpy2DAsync_spt,                                                                                            \
      (void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h, hipMemcpyKind k HK_HIP_ST),               \
      (dst, dp, src, sp, w, h, k, st), HK_HIP_PT(st), (uint64_t)w *h, 6)                                               \
    X(hipMemset_spt, (void *dst, int v, size_t n), (dst, v, n), hipStreamPerThread, n, 9)                              \
    X(hipMemsetAsync_spt, (void *dst, int v, size_t n HK_HIP_ST), (dst, v, n, st), HK_HIP_PT(st), n, 9)                \
    X(hipMemcpyToSymbol_spt, (const void *sym, const void *src, size_t n, size_t off, hipMemcpyKind k),                \
      (sym, src, n, off, k), hipStreamPerThread, n, 7)                                                                 \
    X(hipMemcpyToSymbolAsync_spt, (const void *sym, const void *src, size_t n, size_t off, hipMemcpyKind k HK_HIP_ST), \
      (sym, src, n, off, k, st), HK_HIP_PT(st), n, 7)                                                                  \
    X(hipMemcpyFromSymbol_spt, (void *dst, const void *sym, size_t n, size_t off, hipMemcpyKind k),                    \
      (dst, sym, n, off, k), hipStreamPerThread, n, 8)                                                                 \
    X(hipMemcpyFromSymbolAsync_spt, (void *dst, const void *sym, size_t n, size_t off, hipMemcpyKind k HK_HIP_ST),     \
      (dst, sym, n, off, k, st), HK_HIP_PT(st), n, 8)                                                                  \
    X(hipMemset2D_spt, (void *dst, size_t pitch, int v, size_t w, size_t h), (dst, pitch, v, w, h),                    \
      hipStreamPerThread, (uint64_t)w *h, 12)                                                                          \
    X(hipMemset2DAsync_spt, (void *dst, size_t pitch, int v, size_t w, size_t h HK_HIP_ST), (dst, pitch, v, w, h, st), \
      HK_HIP_PT(st), (uint64_t)w *h, 12)                                                                               \
    X(hipMemset3D_spt, (hipPitchedPtr pp, int v, hipExtent e), (pp, v, e), hipStreamPerThread, HK_HIP_VOLUME(e), 14)   \
    X(hipMemset3DAsync_spt, (hipPitchedPtr pp, int v, hipExtent e HK_HIP_ST), (pp, v, e, st), HK_HIP_PT(st),           \
      HK_HIP_VOLUME(e), 14)                                                                                            \
    X(hipMemcpy3D_spt, (const void *p), (p), hipStreamPerThread, 0, 13)                                                \
    X(hipMemcpy3DAsync_spt, (const void *p HK_HIP_ST), (p, st), HK_HIP_PT(st), 0, 13)

#endif
