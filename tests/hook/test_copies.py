"""Copies and memsets go through the compute limiter like launches (issue 8 item 2), on the stub.

The stub libcuda simulates every copy/memset entry point: `bytes` take bytes / STUB_COPY_MBPS
(1000 MB/s here, so a 1 MB copy keeps the simulated engine busy for 1 ms) and synchronous ones
also wait for it. Under a compute share the device time of those copies is held to the share:
asserted on the limiter's books in the ledger and on the virtual clock (tests/limiter_books.py),
within the limiter's burst and two batches -- never on rates on the host's clock, where a
synchronous copy's device idles while a busy host comes back (issue 26).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import hookcore
from tests.hook.clients import client_env
from tests.limiter_books import Run, assert_held, ran, virtual_preload

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

MB = 1_000_000
COPY_NS = 1_000_000   # 1 MB at 1000 MB/s
BATCH = 10            # shim_client waits every 10 copies (each, when they are synchronous)
KINDS = ["memcpy", "htod", "dtoh", "dtod", "peer", "2d", "3d", "memset8", "memset16", "memset32", "memset2d8"]


def copies(client: Path, libs: HookLibs, tmp_path: Path, what: str, seconds: float = 1.2, ptds: bool = False,
           preload: bool = True, **env: str) -> tuple[Run, hookcore.LimiterUsage]:
    """`what` on the virtual clock: the client's run and the claim's limiter afterwards."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ledger = tmp_path / "claim.ledger"
    e = client_env(libs, virtual_preload(*([libs.libvgpu] if preload else [])), STUB_COPY_MBPS="1000",
                   CUDA_DEVICE_MEMORY_SHARED_CACHE=str(ledger), **env)
    args = [str(client), "copy", what, str(MB), str(seconds)] + (["ptds"] if ptds else [])
    proc = subprocess.run(args, env=e, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if not ledger.exists():
        return ran(proc.stdout, COPY_NS, BATCH), hookcore.LimiterUsage(index=0, active=False, share=0, charged_ns=0,
                                                                        throttled_ns=0, tokens_ns=0, granted_ns=0)
    with hookcore.Ledger(ledger) as led:
        return ran(proc.stdout, COPY_NS, BATCH), led.limiter(0)


def test_every_copy_and_memset_entry_point_is_hooked_per_variant(client: Path, hookcore_libs: HookLibs,
                                                                 tmp_path: Path) -> None:
    e = client_env(hookcore_libs, hookcore_libs.libvgpu, CUDA_DEVICE_SM_LIMIT="50",
                   CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "l"))
    proc = subprocess.run([str(client), "copynames"], env=e, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [ln.split()[1:] for ln in proc.stdout.splitlines() if ln.startswith("COPYNAME")]
    assert len(rows) == 58
    for base, per_thread, lib, hook in rows:
        assert lib == "libvgpu.so", (base, per_thread, lib, hook)
        if per_thread == "0":
            assert "_pt" not in hook and hook.startswith(base), (base, hook)
        else:   # the per-thread-default-stream variant: _ptds for synchronous calls, _ptsz for async
            assert hook.endswith("_ptsz" if "Async" in base else "_ptds"), (base, hook)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_copies_are_held_to_the_share(client: Path, hookcore_libs: HookLibs, tmp_path: Path, kind: str,
                                      mode: str) -> None:
    what = kind if mode == "sync" else f"{kind}-async"
    got, books = copies(client, hookcore_libs, tmp_path, what, CUDA_DEVICE_SM_LIMIT="30")
    assert_held(books, [got], 30)


@pytest.mark.parametrize("what", ["dtod", "htod-async", "memset32-async"])
def test_per_thread_stream_variants_are_held_too(client: Path, hookcore_libs: HookLibs, tmp_path: Path,
                                                 what: str) -> None:
    got, books = copies(client, hookcore_libs, tmp_path, what, ptds=True, CUDA_DEVICE_SM_LIMIT="50")
    assert_held(books, [got], 50)


@pytest.mark.parametrize("what", ["dtod-async", "memset32"])
def test_unlimited_copies_are_not_slowed(client: Path, hookcore_libs: HookLibs, tmp_path: Path, what: str) -> None:
    """A memory quota only (no compute limit): the copies take the fast path, no limiter is set up,
    and on the virtual clock the hooked client copies exactly as much as the bare one. (The hook's
    cost in host time is a benchmark's figure: bench/limiter_stub_cpu.py.)"""
    native, _ = copies(client, hookcore_libs, tmp_path / "native", what, 0.8, preload=False)
    hooked, books = copies(client, hookcore_libs, tmp_path / "hooked", what, 0.8, CUDA_DEVICE_MEMORY_LIMIT="1Gi")
    assert hooked == native and native.device_ns == native.elapsed_ns, (native, hooked)  # the engine never idled
    assert not books.active and books.charged_ns == books.throttled_ns == 0, books


def test_copies_and_launches_share_the_claims_bucket(client: Path, hookcore_libs: HookLibs, tmp_path: Path) -> None:
    """One process of the claim copies, another launches 1 ms kernels: together they get the 50%,
    on one virtual clock they share (a discrete-event simulation: it moves only while both wait)."""
    (tmp_path / "clock").touch()
    e = client_env(hookcore_libs, virtual_preload(hookcore_libs.libvgpu), STUB_COPY_MBPS="1000",
                   CUDA_DEVICE_SM_LIMIT="50", CUDA_DEVICE_MEMORY_SHARED_CACHE=str(tmp_path / "claim.ledger"),
                   HOOKCORE_STUB_CLOCK_FILE=str(tmp_path / "clock"), HOOKCORE_STUB_CLOCK_PARTIES="2")
    procs = [subprocess.Popen([str(client), "copy", "dtod-async", str(MB), "2"], env=e, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True),
             subprocess.Popen([str(client), "launch", "1000", "0", "2"], env=e, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)]
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, out + err
        runs.append(ran(out, COPY_NS, BATCH))   # a 1 ms kernel costs what a 1 MB copy does
    with hookcore.Ledger(tmp_path / "claim.ledger") as led:
        assert_held(led.limiter(0), runs, 50)
    assert min(r.count for r in runs) > 0, runs   # neither starves the other
