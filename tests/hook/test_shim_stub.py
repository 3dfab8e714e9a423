"""The CUDA/NVML shim (libvgpu.so) against the stub driver, no GPU needed.

Every test runs `tests/hook/c/shim_client.c` under LD_PRELOAD=libvgpu.so with the stub
libcuda.so.1 / libnvidia-ml.so.1 first on LD_LIBRARY_PATH. The client reaches the driver the way
the CUDA runtime does (dlopen + dlsym("cuGetProcAddress_v2") + cuGetProcAddress by base name and
cudaVersion), so these tests cover the real interception path, not direct calls.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import hookcore
from tests.hook.clients import build_rtld_next, client_env
from tests.limiter_books import assert_held, ran, virtual_preload

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
CUDA_ERROR_NOT_INITIALIZED = 3

# Physical stub GPU i has UUID GPU-57554201-0000-4000-8000-0000000000ii (hookcore/stub/cuda_stub.c).
STUB_UUID = "GPU-57554201-0000-4000-8000-0000000000{:02x}".format


@pytest.fixture
def run(client: Path, hookcore_libs: HookLibs, tmp_path: Path):
    """run(*args, preload=True, **env) -> CompletedProcess; a fresh ledger per test."""

    def _env(preload: bool, env: dict[str, str], virtual: bool = False) -> dict[str, str]:
        lib = [hookcore_libs.libvgpu] if preload else []
        return client_env(hookcore_libs, virtual_preload(*lib) if virtual else (lib[0] if lib else None),
                          CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "claim.ledger"), **env)

    def _run(*args: str, preload: bool = True, virtual: bool = False, timeout: float = 60,
             **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(client), *args], env=_env(preload, env, virtual), capture_output=True, text=True,
                              timeout=timeout)

    def _spawn(*args: str, virtual: bool = False, **env: str) -> subprocess.Popen:
        return subprocess.Popen([str(client), *args], env=_env(True, env, virtual), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    _run.spawn = _spawn  # type: ignore[attr-defined]
    return _run


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "FAIL" not in proc.stdout
    return proc.stdout


def ok_err(proc: subprocess.CompletedProcess) -> str:
    ok(proc)
    return proc.stderr


def mem(proc: subprocess.CompletedProcess) -> tuple[int, int, int]:
    line = next(ln for ln in ok(proc).splitlines() if ln.startswith("MEM "))
    free, total, devtotal = map(int, line.split()[1:])
    return free, total, devtotal


# --------------------------------------------------------------------------------------------
# Allocation paths: to the quota, CUDA_ERROR_OUT_OF_MEMORY past it, frees give it back.


def test_cuMemAlloc_through_cuGetProcAddress_to_the_quota(run) -> None:
    out = ok(run("quota", "8M", CUDA_DEVICE_MEMORY_LIMIT="64Mi"))
    assert f"OK meminfo total={64 * MiB}" in out
    assert "OK oom after 8 allocations" in out
    assert "OK free gives the quota back" in out and "OK all freed" in out


def test_quota_is_hami_syntax_too(run) -> None:
    out = ok(run("quota", "4M", CUDA_DEVICE_MEMORY_LIMIT="32m"))   # HAMi: lower-case m = MiB
    assert "OK oom after 8 allocations" in out


@pytest.mark.parametrize("path,expect", [
    ("vmm", ["OK vmm oom after 32 handles", "OK vmm release gives the quota back"]),
    ("async", ["OK async oom after 16 allocations", "OK async free gives the quota back"]),
    ("arrays", ["OK arrays charged and given back"]),
    ("pitch", ["OK pitch charged pitch x height"]),
])
def test_other_allocation_paths(run, path: str, expect: list[str]) -> None:
    out = ok(run(path, CUDA_DEVICE_MEMORY_LIMIT="64Mi"))
    for line in expect:
        assert line in out


@pytest.mark.parametrize("what", ["pointer", "array"])
@pytest.mark.parametrize("how", ["reset", "destroy"])
def test_memory_a_context_took_with_it_is_given_back(run, how: str, what: str) -> None:
    """40 MiB allocated in a context that then goes (a primary context reset: cudaDeviceReset; a
    created context destroyed: Numba's cuda.close()) went with it: 40 MiB fit again under a 64 MiB
    quota (the charge used to stay until the process exited, and this allocation was refused). The
    same for a CUDA array, which dies with its context too."""
    out = ok(run("ctxmem", how, "40M", what, CUDA_DEVICE_MEMORY_LIMIT="64Mi"))
    assert "GONE 0" in out and "AGAIN 0" in out, out


def test_a_destroy_the_driver_refuses_gives_nothing_back(run) -> None:
    """Hostile: a destruction the driver refuses leaves the context and its memory: the charge
    stays, and 40 more MiB do not fit under the 64 MiB quota."""
    out = ok(run("ctxmem", "destroy", "40M", CUDA_DEVICE_MEMORY_LIMIT="64Mi",
                 HOOKCORE_STUB_CUDA_FAIL="cuCtxDestroy_v2=201"))
    assert "GONE 201" in out and "AGAIN 2" in out, out  # CUDA_ERROR_INVALID_CONTEXT, then OUT_OF_MEMORY


def test_without_a_limit_the_driver_figures_pass_through(run) -> None:
    free, total, devtotal = mem(run("meminfo", STUB_CUDA_MEMORY="8Gi"))
    assert (free, total, devtotal) == (8 << 30, 8 << 30, 8 << 30)


def test_quota_never_exceeds_the_device(run) -> None:
    _, total, devtotal = mem(run("meminfo", STUB_CUDA_MEMORY="1Gi", CUDA_DEVICE_MEMORY_LIMIT="4Gi"))
    assert total == devtotal == 1 << 30


# --------------------------------------------------------------------------------------------
# Symbol resolution: versions, per-thread default stream, dlsym, unpoliced symbols.


def test_variants_dlsym_and_unpoliced_symbols(run) -> None:
    out = ok(run("resolve", CUDA_DEVICE_MEMORY_LIMIT="64Mi"))
    assert "OK cuGetProcAddress variants" in out and "OK dlsym path" in out


def test_stream_capture_passes_through_the_limiter(run) -> None:
    assert "OK capture" in ok(run("capture", CUDA_DEVICE_SM_LIMIT="50"))


def test_debug_log_names_the_hooks(run) -> None:
    proc = run("quota", "8M", CUDA_DEVICE_MEMORY_LIMIT="64Mi", HOOKCORE_LOG="debug")
    ok(proc)
    assert "cuGetProcAddress(cuMemAlloc, 12000, 0) -> hook cuMemAlloc_v2" in proc.stderr
    assert "-> ledger index 0" in proc.stderr


# --------------------------------------------------------------------------------------------
# Devices are keyed by UUID: CUDA_VISIBLE_DEVICES reordering keeps each quota on its GPU.


@pytest.mark.parametrize("visible", ["0,1", "1,0"])
def test_quota_follows_the_uuid(run, visible: str) -> None:
    env = dict(STUB_CUDA_DEVICES="2", CUDA_VISIBLE_DEVICES=visible,
               HOOKCORE_DEVICE_UUID_0=STUB_UUID(1), CUDA_DEVICE_MEMORY_LIMIT_0="64Mi",
               HOOKCORE_DEVICE_UUID_1=STUB_UUID(0), CUDA_DEVICE_MEMORY_LIMIT_1="128Mi")
    by_ordinal = [mem(run("meminfo", CLIENT_DEVICE=str(o), **env))[1] for o in (0, 1)]
    physical = [int(x) for x in visible.split(",")]
    quota_of_physical = {1: 64 * MiB, 0: 128 * MiB}
    assert by_ordinal == [quota_of_physical[p] for p in physical]


def test_gpu_outside_a_uuid_keyed_claim_gets_nothing(run) -> None:
    env = dict(STUB_CUDA_DEVICES="2", HOOKCORE_DEVICE_UUID_0=STUB_UUID(1), CUDA_DEVICE_MEMORY_LIMIT_0="64Mi")
    free, total, _ = mem(run("meminfo", CLIENT_DEVICE="0", **env))   # physical 0 is not in the claim
    assert (free, total) == (0, 0)


# --------------------------------------------------------------------------------------------
# NVML: nvidia-smi's view


def test_nvml_reports_quota_and_claim_usage(run) -> None:
    proc = ok(run("nvml", "0", CUDA_DEVICE_MEMORY_LIMIT="64Mi", STUB_NVML_USED="1Gi"))
    f = proc.split()
    r1, total1, used1, free1, r2, total2, used2, free2 = map(int, f[1:9])
    assert r1 == r2 == 0
    assert total1 == total2 == 64 * MiB
    assert used1 == used2 == 0 and free1 == free2 == 64 * MiB


def test_nvml_untouched_without_a_limit(run) -> None:
    f = ok(run("nvml", "0", STUB_NVML_USED="1Gi", STUB_CUDA_MEMORY="16Gi")).split()
    assert int(f[2]) == 16 << 30 and int(f[3]) == 1 << 30


# --------------------------------------------------------------------------------------------
# Several processes of one claim


def test_eight_processes_never_exceed_the_quota_together(run) -> None:
    procs = [run.spawn("grab", "4M", CUDA_DEVICE_MEMORY_LIMIT="256Mi") for _ in range(8)]
    got = []
    for p in procs:   # every process allocates until OOM and holds what it got
        line = p.stdout.readline()
        assert line.startswith("GOT "), line + p.stderr.read()
        got.append(int(line.split()[1]))
    for p in procs:
        p.stdin.close()
        assert p.wait(timeout=30) == 0
    assert sum(got) * 4 <= 256                       # never over the quota
    assert sum(got) * 4 >= 256 - 8 * 4               # and not starved (racers may both back off)


def test_kill_9_mid_allocation_gives_the_memory_back(run) -> None:
    p = run.spawn("churn", "4M", "48", CUDA_DEVICE_MEMORY_LIMIT="256Mi")
    assert p.stdout.readline().strip() == "READY"
    time.sleep(0.3)                                   # let it free/allocate in a tight loop
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    free, total, _ = mem(run("meminfo", CUDA_DEVICE_MEMORY_LIMIT="256Mi"))
    assert (free, total) == (256 * MiB, 256 * MiB)
    q = run.spawn("grab", "4M", CUDA_DEVICE_MEMORY_LIMIT="256Mi")
    assert q.stdout.readline().strip() == "GOT 64"
    q.stdin.close()
    assert q.wait(timeout=10) == 0


def test_a_forked_child_is_charged_to_the_claim_and_its_charge_ends_with_it(run) -> None:
    """Parent and child share the claim's one quota: the child sees the parent's block, the parent
    sees the child's while it lives, and once the child exits holding its block the charge is gone
    (the parent fills the rest of the quota). Each step is a number the hook answered: without it,
    the stub's device total and per-process counts would show none of this."""
    out = ok(run("fork", "8M", CUDA_DEVICE_MEMORY_LIMIT="64Mi"))
    got = {line.split(" ", 2)[1]: dict(kv.split("=") for kv in line.split()[2:])
           for line in out.splitlines() if line.startswith("FORK ") and "=" in line}
    assert got == {
        "parent": {"free": str(56 * MiB), "total": str(64 * MiB)},      # the quota, less the parent's block
        "child": {"free": str(56 * MiB), "then": str(48 * MiB)},        # the parent's block counts in the child
        "parent-while-child": {"free": str(48 * MiB)},                  # and the child's in the parent
        "parent-after-child": {"free": str(56 * MiB)},                  # gone with the child
    }, out
    assert "FORK refilled 7" in out                                     # 56 MiB left: seven 8 MiB blocks


# --------------------------------------------------------------------------------------------
# Fail closed: a bad value makes CUDA unusable, with one clear line, never unlimited.


@pytest.mark.parametrize("name,value", [
    ("CUDA_DEVICE_MEMORY_LIMIT", "12x"),
    ("CUDA_DEVICE_MEMORY_LIMIT", "1gb"),
    ("CUDA_DEVICE_MEMORY_LIMIT", "-5Gi"),
    ("CUDA_DEVICE_MEMORY_LIMIT_x", "1Gi"),
    ("CUDA_DEVICE_SM_LIMIT", "abc"),
    ("CUDA_DEVICE_SM_LIMIT", "0"),
])
def test_garbage_config_fails_closed(run, name: str, value: str) -> None:
    proc = run("init", **{name: value})
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("INIT"))
    assert line == f"INIT {CUDA_ERROR_NOT_INITIALIZED} ALLOC {CUDA_ERROR_NOT_INITIALIZED} LAUNCH 3"
    messages = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(messages) == 1, proc.stderr
    assert messages[0].startswith("hookcore:") and name in messages[0]


def test_good_config_initialises(run) -> None:
    line = next(ln for ln in ok(run("init", CUDA_DEVICE_MEMORY_LIMIT="1Gi")).splitlines() if ln.startswith("INIT"))
    assert line.startswith("INIT 0 ")
    # no context is current in `init`: the driver's own error comes back, the shim adds none
    assert line.split()[3] == "201"


# --------------------------------------------------------------------------------------------
# Compute limiter on the stub's simulated engine (kernel duration = CUfunction value in us),
# asserted on its books in the ledger and on the virtual clock (tests/limiter_books.py)

US = 1000  # 1 ms kernels (or graphs)
BATCH = 10  # shim_client syncs its stream every 10 launches


def usage(tmp_path: Path) -> hookcore.LimiterUsage:
    with hookcore.Ledger(tmp_path / "claim.ledger") as ledger:
        return ledger.limiter(0)


@pytest.mark.parametrize("share", [30, 50, 70])
@pytest.mark.parametrize("graph", ["0", "1"])
def test_limiter_holds_the_share(run, tmp_path: Path, share: int, graph: str) -> None:
    """Kernels and graphs get the claim's share of the GPU's time, within the limiter's burst and
    two batches, on the virtual clock (the host's load moves nothing)."""
    got = ran(ok(run("launch", str(US), graph, "1.5", virtual=True, CUDA_DEVICE_SM_LIMIT=str(share))), US * 1000, BATCH)
    assert_held(usage(tmp_path), [got], share)


def test_limiter_holds_the_share_on_the_hosts_clock(run, tmp_path: Path) -> None:
    """The same limiter on the real clock: only the bounds a busy host cannot break."""
    t0 = time.monotonic_ns()
    got = ran(ok(run("launch", str(US), "0", "1.0", CUDA_DEVICE_SM_LIMIT="30")), US * 1000, BATCH)
    assert_held(usage(tmp_path), [got], 30, span_ns=time.monotonic_ns() - t0, virtual=False)


def test_limiter_off_costs_nothing(run, tmp_path: Path) -> None:
    """A memory quota alone sets up no limiter: on the virtual clock the hooked client launches
    exactly as much as the bare one (no wait, no device time added). The hook's cost in host time
    is a benchmark's figure (bench/limiter_stub_cpu.py), not a test's."""
    native = ran(ok(run("launch", str(US), "0", "1.0", preload=False, virtual=True)), US * 1000, BATCH)
    hooked = ran(ok(run("launch", str(US), "0", "1.0", virtual=True, CUDA_DEVICE_MEMORY_LIMIT="1Gi")), US * 1000, BATCH)
    assert hooked == native and native.device_ns == native.elapsed_ns, (native, hooked)  # the GPU never idled
    got = usage(tmp_path)
    assert not got.active and got.charged_ns == got.throttled_ns == 0, got


def test_limiter_is_claim_wide(run, tmp_path: Path) -> None:
    """Two processes of one claim at 50% share one bucket: together they get 50%, not 50% each.
    They share one virtual clock (a discrete-event simulation: it moves only while both wait)."""
    (tmp_path / "clock").touch()
    clock = {"HOOKCORE_STUB_CLOCK_FILE": str(tmp_path / "clock"), "HOOKCORE_STUB_CLOCK_PARTIES": "2"}
    procs = [run.spawn("launch", str(US), "0", "2", virtual=True, CUDA_DEVICE_SM_LIMIT="50", **clock) for _ in range(2)]
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, out + err
        runs.append(ran(out, US * 1000, BATCH))
    assert_held(usage(tmp_path), runs, 50)
    assert min(r.count for r in runs) > 0, runs


# --------------------------------------------------------------------------------------------
# Under MPS (review 2026-12-04 #5): a kernel costs its device time x the share of the device's SMs
# its context may use, as the driver reports it (cuCtxGetExecAffinity). The stub acts as an MPS
# client when CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE are set: its contexts
# get ceil(SMs x percentage / 100) SMs, and kernels run slower on fewer SMs (hookcore/stub/README.md).
# The hostile cases (a raised percentage, a reset context, another context's stream, copies) are
# in tests/security/test_mps_ceiling.py.

MPS_US = 300  # a 0.3 ms kernel on the whole device: 1 ms on 30 of its 100 SMs


def mps(percent: int | None, sms: int = 100, device_sms: int | None = -1) -> dict[str, str]:
    """A stub device of `sms` SMs; an MPS client's environment at `percent` (None: no MPS); the claim's
    HOOKCORE_DEVICE_SMS_0 = `device_sms` (-1: `sms`, as the daemon reads it from NVML; None: not
    given, the hook asks CUDA, whose MULTIPROCESSOR_COUNT an MPS client answers with its own SMs)."""
    env = {"HOOKCORE_STUB_DEVICES": f"uuid={STUB_UUID(0)},sms={sms}"}
    if device_sms is not None:
        env["HOOKCORE_DEVICE_SMS_0"] = str(sms if device_sms == -1 else device_sms)
    if percent is not None:
        env |= {"CUDA_MPS_PIPE_DIRECTORY": "/nonexistent/mps-pipe", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percent)}
    return env


def test_an_mps_client_at_the_claims_share_is_not_throttled(run, tmp_path: Path) -> None:
    """An MPS client on 30% of the SMs, held by the hook to 30 cores and busy all the time, is
    charged 0.3 x its device time, which the 30% grant covers: it never waits and runs exactly as
    MPS alone lets it (H200 before the fix: 11.7% of native where MPS alone gave 39.2%)."""
    alone = ran(ok(run("launch", str(MPS_US), "0", "1.5", preload=False, virtual=True, **mps(30))), 1_000_000, BATCH)
    got = ran(ok(run("launch", str(MPS_US), "0", "1.5", virtual=True, CUDA_DEVICE_SM_LIMIT="30", **mps(30))),
              1_000_000, BATCH)
    books = usage(tmp_path)
    assert got == alone and got.device_ns == got.elapsed_ns, (alone, got)  # the device never idled
    assert books.sm_ppm == 300_000 and books.throttled_ns == 0, books
    assert books.device_ns >= got.device_ns - got.batch_ns, books  # every batch charged, the last (open) aside
    assert abs(books.charged_ns - 0.3 * books.device_ns) <= got.count, books  # 1 ns of rounding a batch at most
    assert books.charged_ns <= books.granted_ns + 0.3 * got.batch_ns, books  # the grant covers it, but a batch in flight


def test_without_mps_a_kernel_is_charged_its_device_time(run, tmp_path: Path) -> None:
    """No MPS: the context has every SM, the fraction is 1 and the limiter is what it was."""
    got = ran(ok(run("launch", str(MPS_US), "0", "1.5", virtual=True, CUDA_DEVICE_SM_LIMIT="30", **mps(None))),
              MPS_US * 1000, BATCH)
    books = usage(tmp_path)
    assert books.sm_ppm == hookcore.SM_PPM_FULL and books.charged_ns == books.device_ns, books
    assert_held(books, [got], 30)


def test_the_h200s_mps_share_is_its_provisioned_sms(run, tmp_path: Path) -> None:
    """132 SMs at 30%: 40 SMs (rounded up), charged 40/132 of the device time (rounded up) and held
    to 30% of SM x time: the client gets 30 / (40/132) = 99% of its MPS share."""
    got = ran(ok(run("launch", "1000", "0", "1.5", virtual=True, CUDA_DEVICE_SM_LIMIT="30", **mps(30, sms=132))),
              1000 * 1000 * 132 // 40, BATCH)
    books = usage(tmp_path)
    assert books.sm_ppm == -(-40 * hookcore.SM_PPM_FULL // 132), books
    share = assert_held(books, [got], 30, charge=books.sm_ppm / hookcore.SM_PPM_FULL)
    assert share > 90, share


@pytest.mark.parametrize(("driver", "device_sms"), [
    ({"HOOKCORE_STUB_CUDA_FAIL": "cuCtxGetExecAffinity=224"}, -1),  # CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY
    ({"HOOKCORE_STUB_EXEC_AFFINITY_SMS": "0"}, -1),
    ({"HOOKCORE_STUB_EXEC_AFFINITY_SMS": "101"}, -1),  # more than the device has
    ({}, 20),  # the config's count below the context's 30 SMs
    ({"HOOKCORE_STUB_CUDA_FAIL": "cuDeviceGetAttribute=1"}, None),  # no count in the config, none from CUDA
    ({}, None),  # no count in the config: CUDA's, in an MPS client its own 30 (the H200's driver)
    ({"HOOKCORE_STUB_CUDA_FAIL": "cuStreamGetCtx=201"}, -1),
], ids=["affinity-fails", "zero-sms", "too-many-sms", "config-below-context", "no-device-count",
        "mps-client-device-count", "no-stream-context"])
def test_an_unknown_sm_share_is_a_full_charge(run, tmp_path: Path, driver: dict[str, str], device_sms: int | None) -> None:
    """Fail safe: whatever the driver does not answer, or answers out of range, the kernel is
    charged its whole device time (an MPS client at 30% is then limited twice, never under-charged)."""
    got = ran(ok(run("launch", str(MPS_US), "0", "1.5", virtual=True, CUDA_DEVICE_SM_LIMIT="30",
                     **mps(30, device_sms=device_sms), **driver)), 1_000_000, BATCH)
    books = usage(tmp_path)
    assert books.sm_ppm == hookcore.SM_PPM_FULL and books.charged_ns == books.device_ns, books
    assert_held(books, [got], 30)


def test_the_sm_share_is_asked_once_per_context(run) -> None:
    """The driver is asked when a context first runs metered work, not per launch or batch."""
    err = ok_err(run("launch", str(MPS_US), "0", "0.5", virtual=True, CUDA_DEVICE_SM_LIMIT="30", HOOKCORE_LOG="debug",
                     **mps(30)))
    asked = [ln for ln in err.splitlines() if "cuCtxGetExecAffinity" in ln]
    assert len(asked) == 1 and "(30 SMs), device 0 (100 SMs, the claim's config): charged at 300000/1000000" \
        in asked[0], asked


# --------------------------------------------------------------------------------------------
# The dlsym interposer is transparent for everything it does not police


def test_rtld_next_keeps_its_meaning(hookcore_libs: HookLibs, tmp_path: Path) -> None:
    build_rtld_next(tmp_path, ROOT / "tests/hook/c/rtld_next.c")
    env = {"LD_LIBRARY_PATH": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    native = subprocess.run([str(tmp_path / "next")], env=env, capture_output=True, text=True)
    hooked = subprocess.run([str(tmp_path / "next")], env={**env, "LD_PRELOAD": str(hookcore_libs.libvgpu)},
                            capture_output=True, text=True)
    assert native.stdout.strip() == "NEXT 2", native.stdout + native.stderr
    assert hooked.stdout.strip() == "NEXT 2", hooked.stdout + hooked.stderr
