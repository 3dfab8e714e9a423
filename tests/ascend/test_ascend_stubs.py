"""The stub CANN libraries (libascendcl.so on libruntime.so) that the Ascend hook is tested on:
devices, memory, the simulated engine, capture, and the two layouts of the ACL and rt layers.

Each case runs in a fresh Python process (the stubs read their environment once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hookcore
from tests.limiter_books import fake_clock

GiB = 1 << 30
NPU = "uuid=NPU-{0:08x}-00000000-00000000-00000000-00000001,memory={1},phy={2}"
PRELUDE = """
import ctypes, json, time
acl = ctypes.CDLL("libascendcl.so", mode=ctypes.RTLD_GLOBAL)
rt = ctypes.CDLL("libruntime.so", mode=ctypes.RTLD_GLOBAL)
def ptr(): return ctypes.c_void_p()
def alloc(n, fn="aclrtMalloc"):
    p = ptr(); r = getattr(acl, fn)(ctypes.byref(p), ctypes.c_size_t(n), 0); return r, p
def info():
    f, t = ctypes.c_size_t(), ctypes.c_size_t(); r = acl.aclrtGetMemInfo(1, ctypes.byref(f), ctypes.byref(t))
    return r, f.value, t.value
"""


def run(code: str, npus: str, **env: str) -> dict:
    full = {k: v for k, v in os.environ.items() if k != "ASCEND_RT_VISIBLE_DEVICES"}
    full.update({"HOOKCORE_STUB_NPUS": npus, **env})
    full["LD_LIBRARY_PATH"] = f"{hookcore.stub_dir()}:{full.get('LD_LIBRARY_PATH', '')}"
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=full, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", autouse=True)
def built(stub_dcmi: Path) -> None:
    assert (hookcore.stub_dir() / "libascendcl.so").exists()


def two() -> str:
    return ";".join([NPU.format(1, "8Gi", 4), NPU.format(2, "2Gi", 6)])


def test_devices_visible_devices_and_physical_ids() -> None:
    code = """
    n = ctypes.c_uint(); acl.aclrtGetDeviceCount(ctypes.byref(n))
    phys = []
    for i in range(n.value):
        p = ctypes.c_int(); acl.aclrtGetPhyDevIdByLogicDevId(i, ctypes.byref(p)); phys.append(p.value)
    d = ctypes.c_int(); before = acl.aclrtGetDevice(ctypes.byref(d))
    acl.aclrtSetDevice(1); acl.aclrtGetDevice(ctypes.byref(d))
    print(json.dumps({"n": n.value, "phys": phys, "before": before, "cur": d.value, "total": info()[2]}))
    """
    assert run(code, two()) == {"n": 2, "phys": [4, 6], "before": 107002, "cur": 1, "total": 2 * GiB}
    # ASCEND_RT_VISIBLE_DEVICES selects and reorders the container's NPUs, as the real runtime does
    assert run(code, two(), ASCEND_RT_VISIBLE_DEVICES="1,0")["phys"] == [6, 4]
    assert run(code, two(), ASCEND_RT_VISIBLE_DEVICES="1")["phys"] == [6]


def test_memory_to_capacity_and_refused_past_it() -> None:
    got = run("""
    acl.aclrtSetDevice(1)
    r1, p1 = alloc(1 << 30); r2, p2 = alloc(1 << 30, "aclrtMallocAlign32"); r3, _ = alloc(1)
    full = info()
    acl.aclrtFree(p1)
    h = ptr(); r4 = acl.aclrtMallocPhysical(ctypes.byref(h), ctypes.c_size_t(512 << 20), None, ctypes.c_uint64(0))
    print(json.dumps({"r": [r1, r2, r3, r4], "full": full, "after": info(), "freephys": acl.aclrtFreePhysical(h),
                      "double": acl.aclrtFree(p1), "used": rt.stubNpuUsedBytes(1)}))
    """, two())
    assert got["r"] == [0, 0, 207001, 0]
    assert got["full"] == [0, 0, 2 * GiB] and got["after"] == [0, GiB - (512 << 20), 2 * GiB]
    assert got["freephys"] == 0 and got["double"] == 107000 and got["used"] == GiB


def test_engine_runs_work_for_its_handles_duration() -> None:
    """On the virtual clock (hookcore/stub/fake_clock.c): the durations exactly, whatever the host's load."""
    got = run("""
    acl.aclrtSetDevice(0)
    s = ptr(); acl.aclrtCreateStream(ctypes.byref(s))
    a, b = ptr(), ptr(); acl.aclrtCreateEvent(ctypes.byref(a)); acl.aclrtCreateEventWithFlag(ctypes.byref(b), 8)
    acl.aclrtRecordEvent(a, s)
    t0 = time.monotonic()
    for _ in range(20): acl.aclrtLaunchKernel(ctypes.c_void_p(2000), 1, None, 0, s)   # 20 x 2 ms
    acl.aclrtRecordEvent(b, s)
    st = ctypes.c_int(); acl.aclrtQueryEventStatus(b, ctypes.byref(st)); pending = st.value
    acl.aclrtSynchronizeEvent(b); wall = time.monotonic() - t0
    acl.aclrtQueryEventStatus(b, ctypes.byref(st))
    ms = ctypes.c_float(); acl.aclrtEventElapsedTime(ctypes.byref(ms), a, b)
    t1 = time.monotonic(); r = acl.aclmdlExecute(30000, None, None); model = time.monotonic() - t1   # 30 ms, sync
    print(json.dumps({"pending": pending, "done": st.value, "ms": ms.value, "wall": wall, "model": model, "r": r,
                      "launches": rt.stubNpuLaunchCount()}))
    """, two(), LD_PRELOAD=str(fake_clock()))
    assert got["pending"] == 0 and got["done"] == 1 and got["r"] == 0
    assert got["ms"] == 40 and got["wall"] == pytest.approx(0.040, abs=1e-6)
    assert got["model"] == pytest.approx(0.030, abs=1e-6) and got["launches"] == 21


def test_capture_records_work_and_the_graph_runs_for_its_total() -> None:
    got = run("""
    acl.aclrtSetDevice(0)
    s = ptr(); acl.aclrtCreateStream(ctypes.byref(s))
    acl.aclmdlRICaptureBegin(s, 0)
    for _ in range(5): acl.aclrtLaunchKernel(ctypes.c_void_p(3000), 1, None, 0, s)
    e = ptr(); acl.aclrtCreateEvent(ctypes.byref(e)); refused = acl.aclrtRecordEvent(e, s)
    ri = ptr(); acl.aclmdlRICaptureEnd(s, ctypes.byref(ri))
    t0 = time.monotonic(); acl.aclmdlRIExecute(ri, -1); took = time.monotonic() - t0
    print(json.dumps({"ri": ri.value, "refused": refused, "took": took}))
    """, two(), LD_PRELOAD=str(fake_clock()))   # on the virtual clock: the 15 ms exactly
    assert got["ri"] == 15000 and got["refused"] == 107028 and got["took"] == pytest.approx(0.015, abs=1e-6)


@pytest.mark.parametrize("layout,reached", [("split", "2 1 1"), ("fused", "0 0 0")])
def test_layouts_decide_whether_acl_calls_reach_rt_symbols(tmp_path: Path, layout: str, reached: str) -> None:
    spy = tmp_path / "librtspy.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(spy), str(Path(__file__).parent / "c" / "rt_spy.c"), "-ldl"],
                   check=True)
    got = run("""
    spy = ctypes.CDLL(None); spy.rtSpyCounts.restype = ctypes.c_char_p
    acl.aclrtSetDevice(0)
    alloc(1 << 20); alloc(1 << 20, "aclrtMallocAlign32")
    acl.aclrtLaunchKernel(ctypes.c_void_p(10), 1, None, 0, None)
    acl.aclmdlExecuteAsync(10, None, None, None)
    direct = rt.rtMalloc(ctypes.byref(ptr()), ctypes.c_uint64(1 << 20), 0, 0)
    print(json.dumps({"counts": spy.rtSpyCounts().decode(), "direct": direct}))
    """, two(), LD_PRELOAD=str(spy), HOOKCORE_STUB_ACL_LAYOUT=layout)
    # ACL's own rt* calls reach a preloaded rt* function only in "split"; a direct call through a
    # dlsym'd handle never does (the handle lookup bypasses the preload: hence libvnpu's dlsym)
    assert got["counts"] == reached and got["direct"] == 0
