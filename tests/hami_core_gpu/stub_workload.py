"""A CUDA workload for the stub driver: `python stub_workload.py [BYTES...]`.

Run with the hook preloaded and the stub libcuda on the library path, it initialises CUDA on
device 0, reports what cuMemGetInfo says (``INFO free total``), allocates each size in turn
(``ALLOC bytes result``, result 0 = success, 2 = out of memory) and holds them until stdin closes.
It calls the driver API through ctypes (dlopen + dlsym, as Python frameworks do), so the hook sees
what a real framework's calls would look like.
"""

from __future__ import annotations

import ctypes
import sys


def main() -> int:
    cuda = ctypes.CDLL("libcuda.so.1")
    if (r := cuda.cuInit(0)) != 0:
        print(f"INIT {r}", flush=True)
        return 1
    dev = ctypes.c_int()
    ctx = ctypes.c_void_p()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    print(f"INFO {free.value} {total.value}", flush=True)
    held = []
    for size in (int(a) for a in sys.argv[1:]):
        ptr = ctypes.c_uint64()
        r = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
        print(f"ALLOC {size} {r}", flush=True)
        if r == 0:
            held.append(ptr)
    print("READY", flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
