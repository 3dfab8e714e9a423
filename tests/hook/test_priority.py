"""Priorities (issue 26, item 3; HAMi's ``nvidia.com/priority``): on a device where a high-priority
claim has work, normal claims wait; otherwise they use it as their shares allow.

Processes run `shim_client launch` (1 ms kernels) on the stub's shared, time-slicing engine and a
shared virtual clock (tests/hook/test_contention.py has the rig), each with the device's priority
board (hookcore/core/priority.h) in a directory of the test's: what is asserted is counted, the
kernels each process completed in its run and the books of its claim's limiter (time yielded).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import hookcore
from tests.hook.clients import client_env
from tests.limiter_books import fake_clock

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

UUID0 = "GPU-57554201-0000-4000-8000-000000000000"  # the stub's device 0 (legacy form)
KERNEL_NS = 1_000_000


@dataclass(frozen=True)
class Party:
    name: str  # its claim (its ledger, its config root)
    seconds: float
    share: int = 0  # 0: no compute limit
    priority: str | None = None  # None: no board at all
    env: dict[str, str] = field(default_factory=dict)  # the tenant's own variables
    file: bool = False  # the claim's config as a file (the daemon's way: authoritative over the environment)


@dataclass(frozen=True)
class Got:
    count: int
    elapsed_ns: int
    books: hookcore.LimiterUsage

    @property
    def pct(self) -> float:
        return 100 * self.count * KERNEL_NS / self.elapsed_ns


def board(tmp: Path) -> Path:
    return tmp / "boards" / UUID0


def run(client: Path, libs: HookLibs, testing_lib: Path, tmp: Path, parties: list[Party]) -> list[Got]:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "boards").mkdir(exist_ok=True)
    board(tmp).write_bytes(bytes(4096))  # as the daemon makes it
    (tmp / "clock").touch()
    (tmp / "engine").touch()
    procs = []
    for p in parties:
        keys = {"HOOKCORE_DEVICE_UUID_0": UUID0, "HOOKCORE_MEMORY_LIMIT_0": "1Gi"}
        if p.share:
            keys["HOOKCORE_COMPUTE_LIMIT_0"] = str(p.share)
        if p.priority:
            keys.update(HOOKCORE_PRIORITY_0=p.priority, HOOKCORE_PRIORITY_BOARD=str(tmp / "boards"))
        sim = {"HOOKCORE_STUB_CLOCK_FILE": str(tmp / "clock"), "HOOKCORE_STUB_CLOCK_PARTIES": str(len(parties)),
               "HOOKCORE_STUB_ENGINE_FILE": str(tmp / "engine")}
        if p.file:
            root = tmp / p.name / "root"
            (root / "vgpu").mkdir(parents=True, exist_ok=True)
            (root / "vgpu" / "config").write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
            e = client_env(libs, f"{fake_clock()} {testing_lib}", HOOKCORE_TESTING_CONFIG_ROOT=str(root), **sim,
                           **p.env)
        else:
            e = client_env(libs, f"{fake_clock()} {libs.libvgpu}", HOOKCORE_LEDGER=str(tmp / f"{p.name}.ledger"),
                           **keys, **sim, **p.env)
        procs.append(subprocess.Popen([str(client), "launch", "1000", "0", str(p.seconds)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p, proc in zip(parties, procs, strict=True):
        so, se = proc.communicate(timeout=120)
        assert proc.returncode == 0, so + se
        count, ns = next(ln for ln in so.splitlines() if ln.startswith("RAN ")).split()[1:3]
        ledger = tmp / p.name / "root" / "vgpu" / "ledger" if p.file else tmp / f"{p.name}.ledger"
        with hookcore.Ledger(ledger) as led:
            books = led.limiter(0)
        out.append(Got(int(count), int(float(ns)), books))
    return out


def test_a_normal_claim_yields_while_a_high_one_has_work_and_uses_its_share_otherwise(
        client: Path, hookcore_libs: HookLibs, testing_lib: Path, tmp_path: Path) -> None:
    """A high claim without a compute limit works for 0.5 s beside a normal 50% claim working for
    1 s: while both run, the high one gets what it gets alone (the whole device: >= 90%), the normal
    one waits (its books: about 0.5 s yielded) and then gets its 50%."""
    (alone,) = run(client, hookcore_libs, testing_lib, tmp_path / "alone", [Party("hi", 0.5, priority="high")])
    hi, lo = run(client, hookcore_libs, testing_lib, tmp_path / "both",
                 [Party("hi", 0.5, priority="high"), Party("lo", 1.0, 50, priority="normal")])
    assert alone.pct >= 99, alone
    assert hi.pct >= 0.9 * alone.pct, (hi, alone)
    assert 0.45e9 <= lo.books.yielded_ns <= 0.55e9, lo.books  # the high claim's run and its hold (20 ms)
    after = lo.elapsed_ns - lo.books.yielded_ns  # what was left of the normal claim's run
    assert abs(lo.count * KERNEL_NS - 0.5 * after) <= 0.05 * after, (lo, after)   # its 50% of that
    (solo,) = run(client, hookcore_libs, testing_lib, tmp_path / "solo", [Party("lo", 1.0, 50, priority="normal")])
    assert abs(solo.pct - 50) <= 1.5 and solo.books.yielded_ns == 0, solo


def test_without_priorities_the_pair_time_slices(client: Path, hookcore_libs: HookLibs, testing_lib: Path,
                                                 tmp_path: Path) -> None:
    """The control: the same pair without boards shares the device; the unlimited one gets about what
    is left of the 50% claim's share, far from the whole device."""
    hi, lo = run(client, hookcore_libs, testing_lib, tmp_path, [Party("hi", 0.5), Party("lo", 1.0, 50)])
    assert hi.pct < 80 and lo.books.yielded_ns == 0, (hi, lo)


def test_a_normal_claim_cannot_make_itself_high_by_its_environment(client: Path, hookcore_libs: HookLibs,
                                                                   testing_lib: Path, tmp_path: Path) -> None:
    """The claim's config file says normal; the tenant sets HOOKCORE_PRIORITY_0=high (and the HAMi
    name) in its environment: the file is authoritative, the tenant still waits for the high claim
    and never marks the board."""
    tenant = Party("lo", 1.0, 50, priority="normal", file=True,
                   env={"HOOKCORE_PRIORITY_0": "high", "HOOKCORE_PRIORITY": "high", "CUDA_TASK_PRIORITY": "0"})
    hi, lo = run(client, hookcore_libs, testing_lib, tmp_path, [Party("hi", 0.5, priority="high"), tenant])
    assert lo.books.yielded_ns >= 0.45e9 and hi.pct >= 90, (hi, lo)
    (alone,) = run(client, hookcore_libs, testing_lib, tmp_path / "alone", [tenant])
    assert alone.books.yielded_ns == 0 and abs(alone.pct - 50) <= 1.5, alone  # alone: its share
    assert board(tmp_path / "alone").read_bytes() == bytes(4096)  # it never wrote the board


def test_a_normal_claim_cannot_make_itself_high_by_writing_its_ledger(client: Path, hookcore_libs: HookLibs,
                                                                     testing_lib: Path, tmp_path: Path) -> None:
    """Priority is not in the ledger: a tenant that fills every reserved byte of its ledger's header
    and device record with 0xff (whatever it hopes means "high") before its processes start still
    waits."""
    tenant = Party("lo", 1.0, 50, priority="normal", file=True)
    ledger = tmp_path / "lo" / "root" / "vgpu" / "ledger"
    ledger.parent.mkdir(parents=True)
    hookcore.create_ledger(ledger, {"HOOKCORE_LEDGER": str(ledger), "HOOKCORE_MEMORY_LIMIT_0": str(1 << 30),
                                    "HOOKCORE_COMPUTE_LIMIT_0": "50", "HOOKCORE_DEVICE_UUID_0": UUID0})
    with open(ledger, "r+b") as f:  # hookcore/core/internal.h: the header's reserved bytes, device 0's
        f.seek(72)
        f.write(b"\xff" * 184)
        f.seek(4096 + 96)
        f.write(b"\xff" * 152)
    hi, lo = run(client, hookcore_libs, testing_lib, tmp_path, [Party("hi", 0.5, priority="high"), tenant])
    assert lo.books.yielded_ns >= 0.45e9 and hi.pct >= 90, (hi, lo)
