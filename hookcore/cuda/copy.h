/* copy.h - the copy and memset entry points the shim meters, as one X-macro table.
 *
 * X(name, parameters, arguments, stream, bytes, kind): `stream` is the stream the work runs on
 * (NULL = the legacy default stream of a synchronous call, CU_STREAM_PER_THREAD for _ptds, the
 * caller's stream -- per-thread for NULL under _ptsz -- for asynchronous calls), `bytes` the
 * amount moved or set, `kind` separates signatures (a 1 MiB H2D copy is not a 1 MiB memset).
 * shim.h declares the prototypes from it and copy.c defines the interposers; hooks.def lists the
 * same names (a test compares the library's exports with hooks.def).
 */
#ifndef HOOKCORE_CUDA_COPY_H
#define HOOKCORE_CUDA_COPY_H

#define HK_PTSZ(s) ((s) ? (s) : CU_STREAM_PER_THREAD)
#define HK_EXT2(p) ((uint64_t)(p ? (p)->WidthInBytes * (p)->Height : 0))
#define HK_EXT3(p) ((uint64_t)(p ? (p)->WidthInBytes * (p)->Height * ((p)->Depth ? (p)->Depth : 1) : 0))

#define HK_CP_ARGS_D(x)    (CUdeviceptr dst, CUdeviceptr src, size_t n x)
#define HK_CP_ARGS_H2D(x)  (CUdeviceptr dst, const void *src, size_t n x)
#define HK_CP_ARGS_D2H(x)  (void *dst, CUdeviceptr src, size_t n x)
#define HK_CP_ARGS_PEER(x) (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n x)
#define HK_MS_ARGS(t, x)   (CUdeviceptr dst, t v, size_t n x)
#define HK_MS2_ARGS(t, x)  (CUdeviceptr dst, size_t pitch, t v, size_t w, size_t h x)
#define HK_ST              , CUstream st

#define HK_COPIES(X)                                                                                                   \
    X(cuMemcpy, HK_CP_ARGS_D(), (dst, src, n), NULL, n, 1)                                                             \
    X(cuMemcpy_ptds, HK_CP_ARGS_D(), (dst, src, n), CU_STREAM_PER_THREAD, n, 1)                                        \
    X(cuMemcpyAsync, HK_CP_ARGS_D(HK_ST), (dst, src, n, st), st, n, 1)                                                 \
    X(cuMemcpyAsync_ptsz, HK_CP_ARGS_D(HK_ST), (dst, src, n, st), HK_PTSZ(st), n, 1)                                   \
    X(cuMemcpyHtoD_v2, HK_CP_ARGS_H2D(), (dst, src, n), NULL, n, 2)                                                    \
    X(cuMemcpyHtoD_v2_ptds, HK_CP_ARGS_H2D(), (dst, src, n), CU_STREAM_PER_THREAD, n, 2)                               \
    X(cuMemcpyHtoDAsync_v2, HK_CP_ARGS_H2D(HK_ST), (dst, src, n, st), st, n, 2)                                        \
    X(cuMemcpyHtoDAsync_v2_ptsz, HK_CP_ARGS_H2D(HK_ST), (dst, src, n, st), HK_PTSZ(st), n, 2)                          \
    X(cuMemcpyDtoH_v2, HK_CP_ARGS_D2H(), (dst, src, n), NULL, n, 3)                                                    \
    X(cuMemcpyDtoH_v2_ptds, HK_CP_ARGS_D2H(), (dst, src, n), CU_STREAM_PER_THREAD, n, 3)                               \
    X(cuMemcpyDtoHAsync_v2, HK_CP_ARGS_D2H(HK_ST), (dst, src, n, st), st, n, 3)                                        \
    X(cuMemcpyDtoHAsync_v2_ptsz, HK_CP_ARGS_D2H(HK_ST), (dst, src, n, st), HK_PTSZ(st), n, 3)                          \
    X(cuMemcpyDtoD_v2, HK_CP_ARGS_D(), (dst, src, n), NULL, n, 4)                                                      \
    X(cuMemcpyDtoD_v2_ptds, HK_CP_ARGS_D(), (dst, src, n), CU_STREAM_PER_THREAD, n, 4)                                 \
    X(cuMemcpyDtoDAsync_v2, HK_CP_ARGS_D(HK_ST), (dst, src, n, st), st, n, 4)                                          \
    X(cuMemcpyDtoDAsync_v2_ptsz, HK_CP_ARGS_D(HK_ST), (dst, src, n, st), HK_PTSZ(st), n, 4)                            \
    X(cuMemcpyPeer, HK_CP_ARGS_PEER(), (dst, dc, src, sc, n), NULL, n, 5)                                              \
    X(cuMemcpyPeer_ptds, HK_CP_ARGS_PEER(), (dst, dc, src, sc, n), CU_STREAM_PER_THREAD, n, 5)                         \
    X(cuMemcpyPeerAsync, HK_CP_ARGS_PEER(HK_ST), (dst, dc, src, sc, n, st), st, n, 5)                                  \
    X(cuMemcpyPeerAsync_ptsz, HK_CP_ARGS_PEER(HK_ST), (dst, dc, src, sc, n, st), HK_PTSZ(st), n, 5)                    \
    X(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *p), (p), NULL, HK_EXT2(p), 6)                                               \
    X(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *p), (p), CU_STREAM_PER_THREAD, HK_EXT2(p), 6)                          \
    X(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *p), (p), NULL, HK_EXT2(p), 6)                                      \
    X(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *p), (p), CU_STREAM_PER_THREAD, HK_EXT2(p), 6)                 \
    X(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *p, CUstream st), (p, st), st, HK_EXT2(p), 6)                           \
    X(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *p, CUstream st), (p, st), HK_PTSZ(st), HK_EXT2(p), 6)             \
    X(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *p), (p), NULL, HK_EXT3(p), 7)                                               \
    X(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *p), (p), CU_STREAM_PER_THREAD, HK_EXT3(p), 7)                          \
    X(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *p, CUstream st), (p, st), st, HK_EXT3(p), 7)                           \
    X(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D *p, CUstream st), (p, st), HK_PTSZ(st), HK_EXT3(p), 7)             \
    X(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *p), (p), NULL, HK_EXT3(p), 8)                                         \
    X(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER *p), (p), CU_STREAM_PER_THREAD, HK_EXT3(p), 8)                    \
    X(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *p, CUstream st), (p, st), st, HK_EXT3(p), 8)                     \
    X(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER *p, CUstream st), (p, st), HK_PTSZ(st), HK_EXT3(p), 8)       \
    X(cuMemsetD8_v2, HK_MS_ARGS(unsigned char, ), (dst, v, n), NULL, n, 9)                                             \
    X(cuMemsetD8_v2_ptds, HK_MS_ARGS(unsigned char, ), (dst, v, n), CU_STREAM_PER_THREAD, n, 9)                        \
    X(cuMemsetD8Async, HK_MS_ARGS(unsigned char, HK_ST), (dst, v, n, st), st, n, 9)                                    \
    X(cuMemsetD8Async_ptsz, HK_MS_ARGS(unsigned char, HK_ST), (dst, v, n, st), HK_PTSZ(st), n, 9)                      \
    X(cuMemsetD16_v2, HK_MS_ARGS(unsigned short, ), (dst, v, n), NULL, 2 * (uint64_t)n, 10)                            \
    X(cuMemsetD16_v2_ptds, HK_MS_ARGS(unsigned short, ), (dst, v, n), CU_STREAM_PER_THREAD, 2 * (uint64_t)n, 10)       \
    X(cuMemsetD16Async, HK_MS_ARGS(unsigned short, HK_ST), (dst, v, n, st), st, 2 * (uint64_t)n, 10)                   \
    X(cuMemsetD16Async_ptsz, HK_MS_ARGS(unsigned short, HK_ST), (dst, v, n, st), HK_PTSZ(st), 2 * (uint64_t)n, 10)     \
    X(cuMemsetD32_v2, HK_MS_ARGS(unsigned int, ), (dst, v, n), NULL, 4 * (uint64_t)n, 11)                              \
    X(cuMemsetD32_v2_ptds, HK_MS_ARGS(unsigned int, ), (dst, v, n), CU_STREAM_PER_THREAD, 4 * (uint64_t)n, 11)         \
    X(cuMemsetD32Async, HK_MS_ARGS(unsigned int, HK_ST), (dst, v, n, st), st, 4 * (uint64_t)n, 11)                     \
    X(cuMemsetD32Async_ptsz, HK_MS_ARGS(unsigned int, HK_ST), (dst, v, n, st), HK_PTSZ(st), 4 * (uint64_t)n, 11)       \
    X(cuMemsetD2D8_v2, HK_MS2_ARGS(unsigned char, ), (dst, pitch, v, w, h), NULL, (uint64_t)w *h, 12)                  \
    X(cuMemsetD2D8_v2_ptds, HK_MS2_ARGS(unsigned char, ), (dst, pitch, v, w, h), CU_STREAM_PER_THREAD, (uint64_t)w *h, \
      12)                                                                                                              \
    X(cuMemsetD2D8Async, HK_MS2_ARGS(unsigned char, HK_ST), (dst, pitch, v, w, h, st), st, (uint64_t)w *h, 12)         \
    X(cuMemsetD2D8Async_ptsz, HK_MS2_ARGS(unsigned char, HK_ST), (dst, pitch, v, w, h, st), HK_PTSZ(st),               \
      (uint64_t)w *h, 12)                                                                                              \
    X(cuMemsetD2D16_v2, HK_MS2_ARGS(unsigned short, ), (dst, pitch, v, w, h), NULL, 2 * (uint64_t)w * h, 13)           \
    X(cuMemsetD2D16_v2_ptds, HK_MS2_ARGS(unsigned short, ), (dst, pitch, v, w, h), CU_STREAM_PER_THREAD,               \
      2 * (uint64_t)w * h, 13)                                                                                         \
    X(cuMemsetD2D16Async, HK_MS2_ARGS(unsigned short, HK_ST), (dst, pitch, v, w, h, st), st, 2 * (uint64_t)w * h, 13)  \
    X(cuMemsetD2D16Async_ptsz, HK_MS2_ARGS(unsigned short, HK_ST), (dst, pitch, v, w, h, st), HK_PTSZ(st),             \
      2 * (uint64_t)w * h, 13)                                                                                         \
    X(cuMemsetD2D32_v2, HK_MS2_ARGS(unsigned int, ), (dst, pitch, v, w, h), NULL, 4 * (uint64_t)w * h, 14)             \
    X(cuMemsetD2D32_v2_ptds, HK_MS2_ARGS(unsigned int, ), (dst, pitch, v, w, h), CU_STREAM_PER_THREAD,                 \
      4 * (uint64_t)w * h, 14)                                                                                         \
    X(cuMemsetD2D32Async, HK_MS2_ARGS(unsigned int, HK_ST), (dst, pitch, v, w, h, st), st, 4 * (uint64_t)w * h, 14)    \
    X(cuMemsetD2D32Async_ptsz, HK_MS2_ARGS(unsigned int, HK_ST), (dst, pitch, v, w, h, st), HK_PTSZ(st),               \
      4 * (uint64_t)w * h, 14)

#endif
