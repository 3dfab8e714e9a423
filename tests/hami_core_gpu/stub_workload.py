"""A CUDA workload for the stub driver: `python stub_workload.py [--launch S | --hold S] [BYTES...]`.

Run with the hook preloaded and the stub libcuda on the library path, it initialises CUDA on
device 0, reports what cuMemGetInfo says (``INFO free total``), allocates each size in turn
(``ALLOC bytes result``, result 0 = success, 2 = out of memory), with ``--launch`` keeps the
device busy with 200 us kernels for SECONDS (the stub's kernel time is its CUfunction value in
microseconds; ``LAUNCHED n``), and holds its memory until stdin closes (``--hold``: for S seconds).
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
    args = sys.argv[1:]
    launch = float(args[1]) if args[:1] == ["--launch"] else 0.0
    hold = float(args[1]) if args[:1] == ["--hold"] else None
    args = args[2:] if launch or hold is not None else args
    held = []
    for size in (int(a) for a in args):
        ptr = ctypes.c_uint64()
        r = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
        print(f"ALLOC {size} {r}", flush=True)
        if r == 0:
            held.append(ptr)
    if launch:
        import time

        n, end = 0, time.monotonic() + launch
        while time.monotonic() < end:
            r = cuda.cuLaunchKernel(ctypes.c_void_p(200), 1, 1, 1, 1, 1, 1, 0, None, None, None)
            if r != 0:
                print(f"LAUNCH {r}", flush=True)
                return 1
            n += 1
        cuda.cuCtxSynchronize()
        print(f"LAUNCHED {n}", flush=True)
    print("READY", flush=True)
    if hold is not None:
        import time

        time.sleep(hold)
    else:
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
