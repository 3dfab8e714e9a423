"""libvnpu.so (hookcore's Ascend hook) against the stub CANN libraries, on CPU.

The workload is tests/ascend/c/acl_client.c (linked with -lascendcl -lruntime: calls through the
PLT) and, for the dlopen + dlsym path, Python ctypes. The stub NPU (hookcore/stub/README.md) runs
submitted work for the microseconds its handle names, so the compute limiter is measured on it.
Both stub layouts run: ``split`` (CANN 8.x: ACL calls reach rt* through the PLT, so both shims
see them) and ``fused`` (the open-source runtime: they never reach an rt* symbol).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import hookcore
from tests.limiter_books import Run, assert_held, ran, virtual_preload

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hookcore" / "build"
GiB, MiB = 1 << 30, 1 << 20
OOM, FAILCLOSED = 207001, 100001
NPUS = ";".join([
    "uuid=NPU-00000001-00000000-00000000-00000000-00000000,memory=8Gi,phy=4",
    "uuid=NPU-00000002-00000000-00000000-00000000-00000000,memory=8Gi,phy=6",
    "uuid=NPU-00000003-00000000-00000000-00000000-00000000,memory=8Gi,phy=7",
])
STRIP = ("HOOKCORE_", "ASCEND_", "LD_PRELOAD", "CUDA_", "NPU_")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    proc = subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", "libs", "testing"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"make -C hookcore libs testing failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    out = tmp_path_factory.mktemp("acl") / "acl_client"
    stub = hookcore.stub_dir()
    subprocess.run(["cc", "-O2", "-o", str(out), str(Path(__file__).parent / "c" / "acl_client.c"), f"-L{stub}",
                    "-lascendcl", "-lruntime", f"-Wl,-rpath,{stub}"], check=True)
    return out


def environ(layout: str = "split", testing: bool = False, preload: str = "vnpu", virtual: bool = False,
            **env: str) -> dict[str, str]:
    """The client's environment; `virtual`: on the tests' virtual clock (tests/limiter_books.py)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(STRIP)}
    lib_dir = BUILD / "testing" if testing else BUILD
    libs = [lib_dir / f"lib{stem}.so" for stem in preload.split()]
    base.update({
        "HOOKCORE_STUB_NPUS": NPUS, "HOOKCORE_STUB_ACL_LAYOUT": layout,
        "LD_LIBRARY_PATH": f"{hookcore.stub_dir()}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "LD_PRELOAD": virtual_preload(*libs) if virtual else " ".join(map(str, libs)),
    })
    base.update(env)
    return base


def lines(out: str, tag: str) -> list[list[int]]:
    return [[int(float(x)) for x in ln.split()[1:]] for ln in out.splitlines() if ln.startswith(tag + " ")]


@pytest.fixture
def run(client: Path, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def go(*args: str, layout: str = "split", testing: bool = False, stdin: str = "", virtual: bool = False,
           **env: str) -> subprocess.CompletedProcess[str]:
        if any(k.startswith(("HOOKCORE_MEMORY", "HOOKCORE_COMPUTE", "HOOKCORE_DEVICE")) for k in env):
            env.setdefault("HOOKCORE_LEDGER", str(tmp_path / "ledger"))
        return subprocess.run([str(client), *args], env=environ(layout, testing, virtual=virtual, **env), input=stdin,
                              capture_output=True, text=True, timeout=60)
    return go


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


# --------------------------------------------------------------------------------------------
# Memory


def test_dormant_without_configuration(run) -> None:
    out = ok(run("alloc", str(6 * GiB)))
    assert lines(out, "ALLOC") == [[6 * GiB, 0]] and lines(out, "INFO")[0][1] == 8 * GiB


@pytest.mark.parametrize("layout", ["split", "fused"])
@pytest.mark.parametrize("api", ["acl", "rt", "phys", "cfg", "cached"])
def test_allocations_to_the_quota_and_past_it(run, layout: str, api: str) -> None:
    # 1.5 GiB fits a 2 GiB quota only if it is charged once, whichever layer sees it first
    out = ok(run("alloc", "-a", api, str(3 * GiB // 2), str(GiB // 2), "1", layout=layout, HOOKCORE_MEMORY_LIMIT_0="2Gi"))
    assert lines(out, "ALLOC") == [[3 * GiB // 2, 0], [GiB // 2, 0], [1, OOM]]
    before, after = lines(out, "INFO")
    assert before == [0, 2 * GiB, 0]  # free 0 of a 2 GiB total: what the claim sees, not the NPU's 8 GiB
    assert lines(out, "FREE") == [[0, 0]] and after == [2 * GiB, 2 * GiB, 0]


@pytest.mark.parametrize("layout", ["split", "fused"])
def test_memory_info_through_the_runtime_layer(run, layout: str) -> None:
    out = ok(run("info", "-r", layout=layout, HOOKCORE_MEMORY_LIMIT_0="3Gi"))
    assert lines(out, "INFO") == [[3 * GiB, 3 * GiB, 0]]


def test_claim_keyed_by_physical_id_survives_reordering(run) -> None:
    keys = {"HOOKCORE_DEVICE_UUID_0": "davinci4", "HOOKCORE_MEMORY_LIMIT_0": "1Gi",
            "HOOKCORE_DEVICE_UUID_1": "davinci6", "HOOKCORE_MEMORY_LIMIT_1": "3Gi"}
    assert lines(ok(run("info", **keys)), "INFO")[0][1] == GiB
    # the workload reorders its NPUs: runtime device 0 is now physical 6, and gets 6's quota
    assert lines(ok(run("info", ASCEND_RT_VISIBLE_DEVICES="1,0", **keys)), "INFO")[0][1] == 3 * GiB
    # an NPU outside the claim (physical 7) has no quota at all
    out = ok(run("alloc", "-d", "2", str(MiB), **keys))
    assert lines(out, "ALLOC") == [[MiB, OOM]] and lines(out, "INFO")[0][:2] == [0, 0]


def test_config_file_is_authoritative(run, tmp_path: Path) -> None:
    conf = tmp_path / "root" / "vnpu"
    conf.mkdir(parents=True)
    (conf / "config").write_text(f"HOOKCORE_MEMORY_LIMIT_0=1Gi\nHOOKCORE_LEDGER={tmp_path / 'file-ledger'}\n")
    out = ok(run("alloc", str(GiB), "1", testing=True, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path / "root"),
                 HOOKCORE_MEMORY_LIMIT_0="7Gi"))  # a tenant's own limit in the environment is ignored
    assert lines(out, "ALLOC") == [[GiB, 0], [1, OOM]]
    assert (tmp_path / "file-ledger").exists()


@pytest.mark.parametrize("value", ["12x", "-1Gi", "0"])
def test_garbage_config_fails_closed(run, value: str) -> None:
    proc = run("alloc", str(MiB), HOOKCORE_MEMORY_LIMIT_0=value)
    assert lines(ok(proc), "ALLOC") == [[MiB, FAILCLOSED]]
    messages = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(messages) == 1 and messages[0].startswith("hookcore:") and "HOOKCORE_MEMORY_LIMIT_0" in messages[0]


def _hold(client: Path, env: dict[str, str], size: int) -> subprocess.Popen[str]:
    p = subprocess.Popen([str(client), "alloc", str(size)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    while (line := p.stdout.readline()) and not line.startswith("READY"):
        if line.startswith("ALLOC"):
            p.result = int(line.split()[2])  # type: ignore[attr-defined]
    return p


def test_processes_of_one_claim_share_the_quota(client: Path, tmp_path: Path) -> None:
    env = environ(HOOKCORE_MEMORY_LIMIT_0="2Gi", HOOKCORE_LEDGER=str(tmp_path / "ledger"))
    procs = [_hold(client, env, 512 * MiB) for _ in range(5)]
    try:
        assert sorted(p.result for p in procs) == [0, 0, 0, 0, OOM]  # type: ignore[attr-defined]
    finally:
        for p in procs:
            p.communicate("", timeout=30)


def test_kill_9_gives_the_memory_back(client: Path, tmp_path: Path, run) -> None:
    env = environ(HOOKCORE_MEMORY_LIMIT_0="2Gi", HOOKCORE_LEDGER=str(tmp_path / "ledger"))
    holder = _hold(client, env, 3 * GiB // 2)
    assert holder.result == 0  # type: ignore[attr-defined]
    assert lines(ok(run("alloc", str(GiB), HOOKCORE_MEMORY_LIMIT_0="2Gi")), "ALLOC") == [[GiB, OOM]]
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    out = ok(run("alloc", str(3 * GiB // 2), HOOKCORE_MEMORY_LIMIT_0="2Gi"))
    assert lines(out, "ALLOC") == [[3 * GiB // 2, 0]]


# --------------------------------------------------------------------------------------------
# Compute: the limiter on the stub's simulated engine (1 ms of work per submission), asserted on
# its books in the ledger and on the virtual clock, never on the host's (tests/limiter_books.py)

US = 1000  # each submission keeps the stub NPU busy for 1 ms
BATCH = 16  # acl_client waits for its stream every 16 submissions


def limited(run, tmp_path: Path, mode: str, share: int, seconds: str = "1.5", layout: str = "split",
            virtual: bool = True) -> tuple[Run, hookcore.LimiterUsage]:
    """`mode` under a compute share: the client's run and the claim's limiter afterwards."""
    out = ok(run("rate", mode, str(US), seconds, layout=layout, virtual=virtual,
                 HOOKCORE_COMPUTE_LIMIT_0=str(share)))
    with hookcore.Ledger(tmp_path / "ledger") as ledger:
        return ran(out, US * 1000, BATCH), ledger.limiter(0)


@pytest.mark.parametrize("mode,share,layout", [
    ("kernel", 30, "split"), ("kernel", 50, "fused"), ("kernel", 70, "split"),
    ("v2", 50, "fused"), ("cfg", 30, "split"), ("model", 50, "split"), ("ri", 50, "fused"),
    ("rt", 50, "split"), ("rth", 30, "fused"), ("rtm", 70, "split"),
])
def test_limiter_holds_the_share(run, tmp_path: Path, mode: str, share: int, layout: str) -> None:
    """Every submission path is metered: the claim gets its share of the NPU's time, within the
    limiter's burst and two batches (on the virtual clock, so the host's load moves nothing)."""
    got, usage = limited(run, tmp_path, mode, share, layout=layout)
    assert_held(usage, [got], share)


@pytest.mark.parametrize("share", [30, 50])
def test_limiter_holds_synchronous_model_execution(run, tmp_path: Path, share: int) -> None:
    """aclmdlExecute waits for its own work: each call is metered and charged like an async one.
    (On the host's clock the client's own time between calls capped what it could use, and a
    loaded CI machine read 29.1% for a 34.9% expectation; on the virtual clock that time is 0.)"""
    got, usage = limited(run, tmp_path, "sync", share)
    assert_held(usage, [got], share)


@pytest.mark.parametrize("layout", ["split", "fused"])
def test_limiter_holds_across_a_device_reset(run, tmp_path: Path, layout: str) -> None:
    """Hostile: halfway through, with 8 submissions queued, the tenant resets the NPU
    (aclrtResetDevice takes the process's streams and events on it, the meter's timing events
    among them), sets it again and goes on. The ACL shim does not report resets (CANN counts
    aclrtSetDevice references and says nothing of whether one took the device), so the meter
    learns it from its events: a pair that fails to read or record is given up with its device's
    pooled pairs, never pooled again (before 86e3697 the dead pair came back for every later
    batch, whose launches then went unmetered: this test failed there), and the batch it timed is
    charged its host span. The whole run is held to the share."""
    out = ok(run("rate", "reset", str(US), "1.5", layout=layout, virtual=True, HOOKCORE_COMPUTE_LIMIT_0="30"))
    assert "RESET after" in out, out
    with hookcore.Ledger(tmp_path / "ledger") as ledger:
        usage = ledger.limiter(0)
    assert_held(usage, [ran(out, US * 1000, BATCH)], 30)


def test_limiter_holds_the_share_on_the_hosts_clock(run, tmp_path: Path) -> None:
    """The same limiter on the real clock: only the bounds a busy host cannot break (it can only
    make the client submit less): no more than the share of the wall time the run had, every
    batch charged, the client held back."""
    t0 = time.monotonic_ns()
    got, usage = limited(run, tmp_path, "kernel", 30, seconds="1.0", virtual=False)
    assert_held(usage, [got], 30, span_ns=time.monotonic_ns() - t0, virtual=False)


def test_limiter_off_costs_nothing(run, tmp_path: Path) -> None:
    """A memory quota alone sets up no limiter: on the virtual clock the hooked client runs exactly
    as many submissions as the bare one (no wait, no device time added). The hook's cost in host
    time is a benchmark's figure (bench/limiter_stub_cpu.py), not a test's."""
    native = ran(ok(run("rate", "kernel", str(US), "1.0", preload="", virtual=True)), US * 1000, BATCH)
    hooked = ran(ok(run("rate", "kernel", str(US), "1.0", virtual=True, HOOKCORE_MEMORY_LIMIT_0="1Gi")), US * 1000, BATCH)
    assert hooked == native and native.device_ns == native.elapsed_ns, (native, hooked)  # the NPU never idled
    with hookcore.Ledger(tmp_path / "ledger") as ledger:
        usage = ledger.limiter(0)
    assert not usage.active and usage.charged_ns == usage.throttled_ns == 0, usage


def test_limiter_is_claim_wide(client: Path, tmp_path: Path) -> None:
    """Two processes of one 50% claim draw on one bucket: together they get 50%, not 50% each. They
    share one virtual clock (a discrete-event simulation: it moves only while both wait)."""
    clock = tmp_path / "clock"
    clock.touch()
    env = environ(virtual=True, HOOKCORE_COMPUTE_LIMIT_0="50", HOOKCORE_LEDGER=str(tmp_path / "ledger"),
                  HOOKCORE_STUB_CLOCK_FILE=str(clock), HOOKCORE_STUB_CLOCK_PARTIES="2")
    procs = [subprocess.Popen([str(client), "rate", "kernel", str(US), "2"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, out + err
        runs.append(ran(out, US * 1000, BATCH))
    with hookcore.Ledger(tmp_path / "ledger") as ledger:
        assert_held(ledger.limiter(0), runs, 50)
    assert min(r.count for r in runs) > 0, runs


def test_capture_under_a_limit_records_no_event(run) -> None:
    # the stub refuses events on a capturing stream: a limiter that recorded one would fail the launch
    out = ok(run("capture", HOOKCORE_COMPUTE_LIMIT_0="50"))
    assert lines(out, "CAPTURE") == [[0, 0, 0, 500]]


# --------------------------------------------------------------------------------------------
# dlopen + dlsym (how Python frameworks reach ACL), and libvgpu + libvnpu in one process


BOTH = textwrap.dedent("""
    import ctypes, json
    cuda = ctypes.CDLL("libcuda.so.1")
    acl = ctypes.CDLL("libascendcl.so")
    def cu_alloc(n):
        p = ctypes.c_uint64(); return cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n))
    def acl_alloc(n):
        p = ctypes.c_void_p(); return acl.aclrtMalloc(ctypes.byref(p), ctypes.c_size_t(n), 0)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cuda.cuInit(0); cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev); cuda.cuCtxSetCurrent(ctx)
    acl.aclrtSetDevice(0)
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    cuda.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)); cu_total = t.value
    acl.aclrtGetMemInfo(1, ctypes.byref(f), ctypes.byref(t)); npu_total = t.value
    print(json.dumps({"cu": [cu_alloc(1 << 30), cu_alloc(1 << 30)], "npu": [acl_alloc(3 << 30), acl_alloc(1 << 30)],
                      "cu_total": cu_total, "npu_total": npu_total}))
""")


@pytest.mark.parametrize("configured", ["both", "vnpu"])
def test_libvgpu_and_libvnpu_in_one_process(client: Path, tmp_path: Path, configured: str) -> None:
    import json

    root = tmp_path / "root"
    files = {"vnpu": "HOOKCORE_MEMORY_LIMIT_0=3Gi\nHOOKCORE_DEVICE_UUID_0=davinci4\n",
             "vgpu": "HOOKCORE_MEMORY_LIMIT_0=1536Mi\n"}
    for stem, text in files.items():
        if stem == "vgpu" and configured != "both":
            continue  # unconfigured: libvgpu stays dormant beside a working libvnpu
        (root / stem).mkdir(parents=True)
        (root / stem / "config").write_text(text + f"HOOKCORE_LEDGER={tmp_path / stem}.ledger\n")
    env = environ(testing=True, preload="vgpu vnpu", HOOKCORE_TESTING_CONFIG_ROOT=str(root),
                  HOOKCORE_STUB_DEVICES="uuid=GPU-11111111-2222-3333-4444-555555555555,memory=16Gi")
    proc = subprocess.run([sys.executable, "-c", BOTH], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["npu"] == [0, OOM] and got["npu_total"] == 3 * GiB  # ACL through dlsym: held to 3 GiB
    if configured == "both":
        assert got["cu"] == [0, 2] and got["cu_total"] == 1536 * MiB  # CUDA held to its own 1.5 GiB
    else:
        assert got["cu"] == [0, 0] and got["cu_total"] == 16 * GiB


def test_fork_child_gets_its_own_slot(run, client: Path, tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import ctypes, os
        acl = ctypes.CDLL("libascendcl.so"); acl.aclrtSetDevice(0)
        def a(n):
            p = ctypes.c_void_p(); return acl.aclrtMalloc(ctypes.byref(p), ctypes.c_size_t(n), 0)
        print("PARENT", a(1 << 30), flush=True)
        pid = os.fork()
        if pid == 0:
            acl.aclrtSetDevice(0)
            print("CHILD", a(1 << 30), a(1 << 30), flush=True); os._exit(0)
        os.waitpid(pid, 0)
        print("AFTER", a(1 << 30), flush=True)
    """)
    env = environ(HOOKCORE_MEMORY_LIMIT_0="2Gi", HOOKCORE_LEDGER=str(tmp_path / "ledger"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # the child is charged its own allocations (not its parent's), and they return when it exits
    assert proc.stdout.split() == ["PARENT", "0", "CHILD", "0", str(OOM), "AFTER", "0"]
