"""libvhip.so (hookcore's HIP hook) against the stub HIP runtime, on CPU.

The workload is tests/hygon_dcu/c/hip_client.c, linked with -lamdhip64 (calls through the PLT; its
DT_NEEDED is the stub's soname libamdhip64.so.6, so the hook finds the runtime the process loaded
by inode, not by name) and, for the dlopen + dlsym path, Python ctypes. The stub
(hookcore/stub/README.md) runs a kernel for the microseconds its handle names and a copy for one
nanosecond per byte, so the compute limiter is measured on it, on the tests' virtual clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import hookcore
from tests.hook.conftest import hookcore_ext  # noqa: F401  (fixture)
from tests.limiter_books import Run, assert_held, ran, virtual_preload

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hookcore" / "build"
GiB, MiB = 1 << 30, 1 << 20
INVALID, OOM, FAILCLOSED = 1, 2, 3
DEVICES = ";".join([
    "pci=0000:c1:00.0,memory=8Gi,name=K100_AI",
    "pci=0000:c2:00.0,memory=8Gi,name=K100_AI",
    "pci=0000:81:00.0,memory=8Gi,name=K100_AI",
])
STRIP = ("HOOKCORE_", "HIP_", "CUDA_", "ROCR_", "LD_PRELOAD")
APIS = ["malloc", "pitch", "mempitch", "3d", "managed", "async", "pool", "ext", "array", "array3d", "mipmap", "drvarray",
        "drvarray3d", "vmm"]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    proc = subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", "libs", "testing"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"make -C hookcore libs testing failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    out = tmp_path_factory.mktemp("hip") / "hip_client"
    stub = hookcore.stub_dir()
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(out), str(Path(__file__).parent / "c" / "hip_client.c"),
                    f"-L{stub}", "-lamdhip64", "-ldl", f"-Wl,-rpath,{stub}"], check=True)
    return out


def environ(testing: bool = False, preload: str = "vhip", virtual: bool = False, **env: str) -> dict[str, str]:
    """The client's environment; `virtual`: on the tests' virtual clock (tests/limiter_books.py)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(STRIP)}
    lib_dir = BUILD / "testing" if testing else BUILD
    libs = [lib_dir / f"lib{stem}.so" for stem in preload.split()]
    base.update({
        "HOOKCORE_STUB_HIP_DEVICES": DEVICES,
        "LD_LIBRARY_PATH": f"{hookcore.stub_dir()}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "LD_PRELOAD": virtual_preload(*libs) if virtual else " ".join(map(str, libs)),
    })
    base.update(env)
    return base


def lines(out: str, tag: str) -> list[list[int]]:
    return [[int(float(x)) for x in ln.split()[1:]] for ln in out.splitlines() if ln.startswith(tag + " ")]


@pytest.fixture
def run(client: Path, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def go(*args: str, testing: bool = False, stdin: str = "", virtual: bool = False, preload: str = "vhip",
           **env: str) -> subprocess.CompletedProcess[str]:
        if any(k.startswith(("HOOKCORE_MEMORY", "HOOKCORE_COMPUTE", "HOOKCORE_DEVICE", "HIP_DEVICE_MEMORY")) for k in env):
            env.setdefault("HOOKCORE_LEDGER", str(tmp_path / "ledger"))
        return subprocess.run([str(client), *args], env=environ(testing, preload, virtual, **env), input=stdin,
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


@pytest.mark.parametrize("api", APIS)
def test_every_allocation_path_is_held_to_the_quota(run, api: str) -> None:
    """1.5 GiB + 0.5 GiB fill a 2 GiB quota exactly (each charged once, at its real size: a pitched
    allocation at the stub's pitch, an array at its elements); one more page is refused with
    hipErrorOutOfMemory before the runtime sees it; the frees give every byte back."""
    out = ok(run("alloc", "-a", api, str(3 * GiB // 2), str(GiB // 2), "4096", HOOKCORE_MEMORY_LIMIT_0="2Gi"))
    assert lines(out, "ALLOC") == [[3 * GiB // 2, 0], [GiB // 2, 0], [4096, OOM]]
    before, after = lines(out, "INFO")
    assert before == [0, 2 * GiB, 0]  # free 0 of a 2 GiB total: what the claim sees, not the device's 8 GiB
    assert lines(out, "FREE") == [[0, 0]] and after == [2 * GiB, 2 * GiB, 0]


def test_a_mipmapped_array_is_charged_every_level(run) -> None:
    """Hostile: 1 GiB of 8-bit elements in 4 levels holds 1 GiB x (1 + 1/4 + 1/16 + 1/64): refused
    under a 1.25 GiB quota, which the base level alone fits (before, mipmapped arrays were not
    charged at all: any size fit any quota)."""
    assert lines(ok(run("alloc", "-a", "mipmap4", str(GiB), HOOKCORE_MEMORY_LIMIT_0="1280Mi")), "ALLOC") == [[GiB, OOM]]
    assert lines(ok(run("alloc", "-a", "mipmap", str(GiB), HOOKCORE_MEMORY_LIMIT_0="1280Mi")), "ALLOC") == [[GiB, 0]]
    out = ok(run("alloc", "-a", "mipmap4", str(GiB), HOOKCORE_MEMORY_LIMIT_0="1360Mi"))  # 1 GiB x 85/64 = 1360 MiB
    assert lines(out, "ALLOC") == [[GiB, 0]] and lines(out, "INFO")[0][:2] == [0, 1360 * MiB]


@pytest.mark.parametrize("api", ["malloc", "pitch", "managed", "array"])
def test_memory_a_device_reset_took_is_given_back(run, api: str) -> None:
    """hipDeviceReset frees every pointer and array the process made on the device: 40 MiB fit again
    under a 64 MiB quota (the charge used to stay until the process exited, and this was refused).
    Freeing the old pointer afterwards fails in the runtime and gives nothing back a second time:
    a third 40 MiB is refused."""
    out = ok(run("resetmem", "-a", api, str(40 * MiB), HOOKCORE_MEMORY_LIMIT_0="64Mi"))
    assert lines(out, "GONE") == [[0]] and lines(out, "AGAIN") == [[0]], out
    assert lines(out, "STALE") == [[INVALID]] and lines(out, "THIRD") == [[OOM]], out


def test_a_reset_of_another_device_gives_nothing_back(run) -> None:
    """Hostile: a reset of device 1 (the claim's too) frees nothing on device 0: its 40 MiB stay
    charged, 40 more do not fit there, and only freeing the first makes room."""
    keys = {"HOOKCORE_DEVICE_UUID_0": "pci-0000:c1:00.0", "HOOKCORE_MEMORY_LIMIT_0": "64Mi",
            "HOOKCORE_DEVICE_UUID_1": "pci-0000:c2:00.0", "HOOKCORE_MEMORY_LIMIT_1": "64Mi"}
    out = ok(run("resetmem", "-d", "0", "-r", "1", str(40 * MiB), **keys))
    assert [lines(out, tag) for tag in ("GONE", "AGAIN", "STALE", "THIRD")] == [[[0]], [[OOM]], [[0]], [[0]]], out


def test_refused_before_the_runtime_allocates(tmp_path: Path) -> None:
    """Over quota the runtime is never asked: the stub's own count of used bytes stays at what
    was admitted (ctypes reads the stub's test-only counter in the same process)."""
    code = textwrap.dedent("""
        import ctypes
        hip = ctypes.CDLL("libamdhip64.so")
        hip.hipSetDevice(0)
        hip.stubHipUsedBytes.restype = ctypes.c_ulonglong
        p = ctypes.c_void_p()
        first = hip.hipMalloc(ctypes.byref(p), ctypes.c_size_t(3 << 30))
        second = hip.hipMalloc(ctypes.byref(p), ctypes.c_size_t(2 << 30))
        print(first, second, hip.stubHipUsedBytes(0))
    """)
    env = environ(HOOKCORE_MEMORY_LIMIT_0="4Gi", HOOKCORE_LEDGER=str(tmp_path / "ledger"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", str(OOM), str(3 << 30)]


def test_memory_info_and_device_total_report_the_quota(run) -> None:
    out = ok(run("info", HOOKCORE_MEMORY_LIMIT_0="3Gi"))
    assert lines(out, "INFO") == [[3 * GiB, 3 * GiB, 0]] and lines(out, "TOTAL") == [[3 * GiB, 0]]


def test_hamis_hip_memory_limit_is_read_as_an_alias(run) -> None:
    """HAMi's HIP hook variable (amd-hami-core), in HAMi's MiB unit; the neutral key is the same."""
    out = ok(run("alloc", str(3000 * MiB), "1", HIP_DEVICE_MEMORY_LIMIT_0="3000m"))
    assert lines(out, "ALLOC") == [[3000 * MiB, 0], [1, OOM]] and lines(out, "INFO")[0][1] == 3000 * MiB


def test_claim_keyed_by_pci_bus_id_survives_reordering(run) -> None:
    keys = {"HOOKCORE_DEVICE_UUID_0": "pci-0000:c1:00.0", "HOOKCORE_MEMORY_LIMIT_0": "1Gi",
            "HOOKCORE_DEVICE_UUID_1": "pci-0000:C2:00.0", "HOOKCORE_MEMORY_LIMIT_1": "3Gi"}
    assert lines(ok(run("info", **keys)), "INFO")[0][1] == GiB
    # the workload reorders its devices: ordinal 0 is now 0000:c2:00.0, and gets that one's quota
    assert lines(ok(run("info", HIP_VISIBLE_DEVICES="1,0", **keys)), "INFO")[0][1] == 3 * GiB
    # HIP reads CUDA_VISIBLE_DEVICES when HIP_VISIBLE_DEVICES is unset: the same holds
    assert lines(ok(run("info", CUDA_VISIBLE_DEVICES="1,0", **keys)), "INFO")[0][1] == 3 * GiB
    # a device the container sees but the claim does not hold (0000:81:00.0) has no quota at all
    out = ok(run("alloc", "-d", "2", str(MiB), **keys))
    assert lines(out, "ALLOC") == [[MiB, OOM]] and lines(out, "INFO")[0][:2] == [0, 0]
    out = ok(run("alloc", "-d", "2", "-a", "vmm", str(2 * MiB), **keys))  # also through the VMM path
    assert lines(out, "ALLOC") == [[2 * MiB, OOM]]


def test_config_file_is_authoritative(run, tmp_path: Path) -> None:
    conf = tmp_path / "root" / "vhip"
    conf.mkdir(parents=True)
    (conf / "config").write_text(f"HOOKCORE_MEMORY_LIMIT_0=1Gi\nHOOKCORE_LEDGER={tmp_path / 'file-ledger'}\n")
    out = ok(run("alloc", str(GiB), "1", testing=True, HOOKCORE_TESTING_CONFIG_ROOT=str(tmp_path / "root"),
                 HOOKCORE_MEMORY_LIMIT_0="7Gi", HIP_DEVICE_MEMORY_LIMIT_0="7g"))  # a tenant's own limits: ignored
    assert lines(out, "ALLOC") == [[GiB, 0], [1, OOM]]
    assert (tmp_path / "file-ledger").exists()


@pytest.mark.parametrize("value", ["12x", "-1Gi", "0"])
def test_garbage_config_fails_closed(run, value: str) -> None:
    proc = run("alloc", str(MiB), HOOKCORE_MEMORY_LIMIT_0=value)
    assert lines(ok(proc), "ALLOC") == [[MiB, FAILCLOSED]]
    messages = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(messages) == 1 and messages[0].startswith("hookcore:") and "HOOKCORE_MEMORY_LIMIT_0" in messages[0]


def test_vmm_memory_stays_charged_while_mapped(run) -> None:
    """A physical allocation released while still mapped holds its memory (HIP's VMM semantics):
    a second one of the same size does not fit a 1.5 GiB quota until the last mapping goes."""
    out = ok(run("vmm", "1G", HOOKCORE_MEMORY_LIMIT_0="1536Mi"))
    assert lines(out, "MAPPED") == [[OOM]] and lines(out, "UNMAPPED") == [[0]]
    # Hostile: with the hook's mapping table full, a mapping it could not count is refused (before,
    # it was made uncounted, the release gave the 1 GiB back while it stayed mapped, and a second
    # 1 GiB fit: 2 GiB on 1.5); unmapped, the released handle's charge is back for the next create.
    assert lines(out, "MAPFULL") == [[OOM]] and lines(out, "AFTERFULL") == [[0]]


def test_captured_allocations_and_graph_nodes_stay_charged(run) -> None:
    """Hostile: a stream-ordered allocation captured into a graph is the graph's memory, which its
    pool keeps reserved between launches: charged for the process's life, its captured free gives
    nothing back (before, it gave the charge back, and every launch held the memory uncharged); an
    allocation node added to the graph is charged when added."""
    out = ok(run("graphmem", "600M", HOOKCORE_MEMORY_LIMIT_0="1Gi"))
    assert lines(out, "CAPTURED") == [[0, OOM]] and lines(out, "NODES") == [[0, OOM]]
    out = ok(run("graphmem", "300M", HOOKCORE_MEMORY_LIMIT_0="1Gi"))  # 300 captured + 2 x 300 fit, 4 x 300 do not
    assert lines(out, "CAPTURED") == [[0, 0]] and lines(out, "NODES") == [[2, OOM]]


def test_shared_vmm_memory_stays_charged(run) -> None:
    """Hostile: 400 MiB created, exported, imported and the import mapped, the original released,
    under a 1 GiB quota. Exporting pins the original's charge (an importer the hook cannot see may
    hold the memory) and the import is charged when mapped, so 400 MiB more do not fit (before,
    export and import were not followed: the release gave the 400 MiB back while the import kept
    them mapped, uncharged)."""
    out = ok(run("share", "400M", HOOKCORE_MEMORY_LIMIT_0="1Gi"))
    assert lines(out, "IMPORT") == [[0, OOM]]


def test_memory_a_pool_keeps_stays_charged(run) -> None:
    """Hostile: four pools at release threshold UINT64_MAX, each 600 MiB allocated and freed
    (stream-ordered), under a 1 GiB quota. A pool keeps freed memory resident, so its freed
    allocation stays charged (before, hipFreeAsync gave it back: all four fit, 2.4 GiB a real pool keeps):
    the second to fourth are refused. Trimming pool 0, destroying pool 1, lowering the device pool's
    threshold and a device reset each give back what was kept; a pool's next allocation is charged
    against what it keeps first (REUSED)."""
    out = ok(run("pools", "600M", HOOKCORE_MEMORY_LIMIT_0="1Gi"))
    assert lines(out, "POOL") == [[0, 0], [1, OOM], [2, OOM], [3, OOM]]
    assert [lines(out, k) for k in ("TRIMMED", "DESTROYED", "DEFAULT", "REUSED", "LOWERED", "RESET")] == [
        [[0]], [[0]], [[OOM]], [[0]], [[0]], [[0]]]
    # a threshold set after the allocation, before its free, still keeps it
    assert lines(out, "LATE") == [[OOM]]
    # pools 0, 2, 3, the device's and the late one have books: 251 more of HK_MAX_POOLS (256); one
    # past them is refused rather than left keeping memory the books do not see
    assert lines(out, "OVERFLOW") == [[251, OOM]]


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

US = 1000  # each submission keeps the stub device busy for 1 ms
BATCH = 16  # hip_client waits for its stream every 16 submissions


def limited(run, tmp_path: Path, mode: str, share: int, seconds: str = "1.5") -> tuple[Run, hookcore.LimiterUsage]:
    """`mode` under a compute share: the client's run and the claim's limiter afterwards."""
    out = ok(run("rate", mode, str(US), seconds, virtual=True, HOOKCORE_COMPUTE_LIMIT_0=str(share)))
    with hookcore.Ledger(tmp_path / "ledger") as ledger:
        return ran(out, US * 1000, BATCH), ledger.limiter(0)


@pytest.mark.parametrize("mode,share", [
    ("kernel", 30), ("kernel", 70), ("ext", 50), ("coop", 30), ("module", 50), ("extmodule", 30), ("graph", 50),
    ("copy", 30), ("h2d", 50), ("memset", 30), ("d32", 70),
    ("tosymbol", 30), ("memset2d", 50), ("memset3d", 30), ("copy3d", 50),
    ("modcoop", 30), ("kernelex", 50), ("drvex", 30),
    ("kernel_spt", 30), ("coop_spt", 50), ("graph_spt", 30), ("copy_spt", 50), ("memset_spt", 30), ("sync_spt", 40),
    ("memset2d_spt", 50), ("copy3d_spt", 30),
])
def test_limiter_holds_the_share(run, tmp_path: Path, mode: str, share: int) -> None:
    """Every launch path, graph launches, copies and memsets are metered: the claim gets its share
    of the device's time, within the limiter's burst and two batches (on the virtual clock, so
    the host's load moves nothing). The per-thread default stream's entry points too (`_spt`,
    what a program built with -fgpu-default-stream=per-thread calls), hipModuleLaunchCooperativeKernel
    and the extensible launches (hipLaunchKernelExC, hipDrvLaunchKernelEx): before, they ran
    unmetered."""
    got, usage = limited(run, tmp_path, mode, share)
    assert_held(usage, [got], share)


def test_limiter_holds_across_a_device_reset(run, tmp_path: Path) -> None:
    """hipDeviceReset halfway through a 30% run, with kernels still queued, takes the process's
    streams and events (the stub returns hipErrorContextIsDestroyed for them from then on). The shim
    tells the meter around the reset: the work in flight is charged while its events live, the
    meter's pooled events are given up, and it never calls the runtime with an event the reset took
    (on CUDA's real driver such a call crashed the process); the share holds on both sides."""
    out = ok(run("rate", "reset", str(US), "2", virtual=True, HOOKCORE_COMPUTE_LIMIT_0="30"))
    assert "DEAD 0" in out.splitlines(), out
    with hookcore.Ledger(tmp_path / "ledger") as ledger:
        assert_held(ledger.limiter(0), [ran(out, US * 1000, BATCH)], 30)


def test_limiter_holds_synchronous_copies(run, tmp_path: Path) -> None:
    """hipMemcpy waits for its own copy: each is metered on the null stream and charged its
    device time (a synchronous call's batch closes after 2 ms, well inside BATCH)."""
    out = ok(run("rate", "sync", str(US), "1.5", virtual=True, HOOKCORE_COMPUTE_LIMIT_0="40"))
    with hookcore.Ledger(tmp_path / "ledger") as ledger:
        assert_held(ledger.limiter(0), [ran(out, US * 1000, BATCH)], 40)


def test_limiter_off_costs_nothing(run, tmp_path: Path) -> None:
    """A memory quota alone sets up no limiter: on the virtual clock the hooked client runs exactly
    as many submissions as the bare one (no wait, no device time added)."""
    native = ran(ok(run("rate", "kernel", str(US), "1.0", preload="", virtual=True)), US * 1000, BATCH)
    hooked = ran(ok(run("rate", "kernel", str(US), "1.0", virtual=True, HOOKCORE_MEMORY_LIMIT_0="1Gi")), US * 1000, BATCH)
    assert hooked == native and native.device_ns == native.elapsed_ns, (native, hooked)  # the device never idled
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
# dlopen + dlsym (how Python frameworks reach HIP), libvgpu + libvhip in one process, fork


BOTH = textwrap.dedent("""
    import ctypes, json
    cuda = ctypes.CDLL("libcuda.so.1")
    hip = ctypes.CDLL("libamdhip64.so")
    def cu_alloc(n):
        p = ctypes.c_uint64(); return cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n))
    def hip_alloc(n):
        p = ctypes.c_void_p(); return hip.hipMalloc(ctypes.byref(p), ctypes.c_size_t(n))
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cuda.cuInit(0); cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev); cuda.cuCtxSetCurrent(ctx)
    hip.hipSetDevice(0)
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    cuda.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)); cu_total = t.value
    hip.hipMemGetInfo(ctypes.byref(f), ctypes.byref(t)); hip_total = t.value
    print(json.dumps({"cu": [cu_alloc(1 << 30), cu_alloc(1 << 30)], "hip": [hip_alloc(3 << 30), hip_alloc(1 << 30)],
                      "cu_total": cu_total, "hip_total": hip_total}))
""")


@pytest.mark.parametrize("configured", ["both", "vhip"])
def test_libvgpu_and_libvhip_in_one_process(client: Path, tmp_path: Path, configured: str) -> None:
    """A heterogeneous container: the CUDA hook and the HIP hook side by side, each holding its
    own API to its own claim's config (CUDA_VISIBLE_DEVICES, set for the GPU, is not read by HIP
    once HIP_VISIBLE_DEVICES is set, as the DCU driver's edits set it)."""
    root = tmp_path / "root"
    files = {"vhip": "HOOKCORE_MEMORY_LIMIT_0=3Gi\nHOOKCORE_DEVICE_UUID_0=pci-0000:c1:00.0\n",
             "vgpu": "HOOKCORE_MEMORY_LIMIT_0=1536Mi\n"}
    for stem, text in files.items():
        if stem == "vgpu" and configured != "both":
            continue  # unconfigured: libvgpu stays dormant beside a working libvhip
        (root / stem).mkdir(parents=True)
        (root / stem / "config").write_text(text + f"HOOKCORE_LEDGER={tmp_path / stem}.ledger\n")
    gpu = "GPU-11111111-2222-3333-4444-555555555555"
    env = environ(testing=True, preload="vgpu vhip", HOOKCORE_TESTING_CONFIG_ROOT=str(root),
                  HOOKCORE_STUB_DEVICES=f"uuid={gpu},memory=16Gi", CUDA_VISIBLE_DEVICES=gpu, HIP_VISIBLE_DEVICES="0")
    proc = subprocess.run([sys.executable, "-c", BOTH], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["hip"] == [0, OOM] and got["hip_total"] == 3 * GiB  # HIP through dlsym: held to 3 GiB
    if configured == "both":
        assert got["cu"] == [0, 2] and got["cu_total"] == 1536 * MiB  # CUDA held to its own 1.5 GiB
    else:
        assert got["cu"] == [0, 0] and got["cu_total"] == 16 * GiB


def test_fork_child_gets_its_own_slot(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import ctypes, os
        hip = ctypes.CDLL("libamdhip64.so"); hip.hipSetDevice(0)
        def a(n):
            p = ctypes.c_void_p(); return hip.hipMalloc(ctypes.byref(p), ctypes.c_size_t(n))
        print("PARENT", a(1 << 30), flush=True)
        pid = os.fork()
        if pid == 0:
            print("CHILD", a(1 << 30), a(1 << 30), flush=True); os._exit(0)
        os.waitpid(pid, 0)
        print("AFTER", a(1 << 30), flush=True)
    """)
    env = environ(HOOKCORE_MEMORY_LIMIT_0="2Gi", HOOKCORE_LEDGER=str(tmp_path / "ledger"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # the child is charged its own allocations (not its parent's), and they return when it exits
    assert proc.stdout.split() == ["PARENT", "0", "CHILD", "0", str(OOM), "AFTER", "0"]


def test_parse_config_knows_the_hip_alias(hookcore_ext) -> None:  # noqa: F811
    """The Python wrapper parses a configuration as libvhip.so does (the Makefile's alias table)."""
    cfg = hookcore_ext.parse_config({"HIP_DEVICE_MEMORY_LIMIT_0": "3000m"}, stem="vhip")
    assert cfg.devices[0].memory == 3000 * MiB
