"""Claims contending for one GPU (issue 26, item 2), on the stub's shared engine and the shared
virtual clock: counted quantities, never rates on the host's clock.

Two processes (two claims, or one claim's two) run `shim_client launch` on one simulated device that
time-slices streams (HOOKCORE_STUB_ENGINE_FILE, 2 ms slices, compute preemption: hookcore/stub/
cuda_engine.h) while a shared virtual clock (HOOKCORE_STUB_CLOCK_FILE) makes every run the same
sequence of events on any machine. A batch's event window then holds the other tenant's slices
that ran meanwhile, as on a GPU, so what is tested is the limiter's estimate of its own work: each
claim's books must show the device time its own kernels took (count x kernel time, known exactly),
and each must get its share of the device's time.

Where the points went (measured here before the fix): a batch was closed only by 32 submissions,
2 ms of host time or a host pause, so a loop of 10 x 1 ms kernels per sync made 10 ms batches that
always spanned the other tenant's slices; a 30% claim beside a 70% one was charged 1.48x its work and
got 20.2% of the device. Batches now close at about 0.5 ms of estimated device time (inside a slice),
most run without a foreign slice in their window, and the lowest cost seen per signature is their
own: 29.7 + 69.5%.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import hookcore
from tests.hook.clients import client_env
from tests.hook.conftest import ROOT, cc
from tests.limiter_books import fake_clock, virtual_preload

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

UUID0 = "GPU-57554201-0000-4000-8000-000000000000"  # the stub's device 0, as NVML names it
KERNEL_US = 1000  # each submission: 1 ms of device time when it has the device to itself
SECONDS = "2"


@dataclass(frozen=True)
class Got:
    count: int  # kernels completed
    kernel_us: int  # each kernel's device time alone
    elapsed_ns: int  # on the shared virtual clock
    books: hookcore.LimiterUsage | None

    @property
    def work_ns(self) -> int:
        return self.count * self.kernel_us * 1000

    @property
    def pct(self) -> float:
        return 100 * self.work_ns / self.elapsed_ns


def contend(client: Path, libs: HookLibs, tmp: Path, claims: list[tuple[str, int]], slice_us: int = 2000,
            kernel_us: int = KERNEL_US) -> list[Got]:
    """Run one `launch` client per (claim name, share %) at once; processes naming one claim share
    its ledger; share 0 = no compute limit (a memory quota only: hooked, never throttled)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "clock").touch()
    (tmp / "engine").touch()
    procs = []
    for name, share in claims:
        env = {"HOOKCORE_STUB_CLOCK_FILE": str(tmp / "clock"), "HOOKCORE_STUB_CLOCK_PARTIES": str(len(claims)),
               "HOOKCORE_STUB_ENGINE_FILE": str(tmp / "engine"), "STUB_ENGINE_SLICE_US": str(slice_us),
               "HOOKCORE_LEDGER": str(tmp / f"{name}.ledger"), "HOOKCORE_MEMORY_LIMIT_0": "1Gi"}
        if share:
            env["HOOKCORE_COMPUTE_LIMIT_0"] = str(share)
        e = client_env(libs, f"{fake_clock()} {libs.libvgpu}", **env)
        procs.append(subprocess.Popen([str(client), "launch", str(kernel_us), "0", SECONDS], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for (name, share), p in zip(claims, procs, strict=True):
        so, se = p.communicate(timeout=120)
        assert p.returncode == 0, so + se
        count, ns = next(ln for ln in so.splitlines() if ln.startswith("RAN ")).split()[1:3]
        books = None
        if share:
            with hookcore.Ledger(tmp / f"{name}.ledger") as led:
                books = led.limiter(0)
        out.append(Got(int(count), kernel_us, int(float(ns)), books))
    return out


def charged_own_work(g: Got, slack: float = 0.02) -> None:
    """The claim's books show its own kernels' device time (not the other tenant's slices inside its
    windows), within `slack` and a batch."""
    assert g.books is not None
    assert abs(g.books.charged_ns - g.work_ns) <= slack * g.work_ns + 1_000_000, g


def test_two_claims_at_50_each_get_what_two_native_processes_get(client: Path, hookcore_libs: HookLibs,
                                                                 tmp_path: Path) -> None:
    native = contend(client, hookcore_libs, tmp_path / "native", [("a", 0), ("b", 0)])
    pair = contend(client, hookcore_libs, tmp_path / "pair", [("a", 50), ("b", 50)])
    for n, g in zip(native, pair, strict=True):
        assert g.pct >= n.pct - 1, (native, pair)
        charged_own_work(g)
    assert all(g.books and g.books.elapsed_ns > g.books.charged_ns for g in pair), pair  # the windows held the other's


def test_30_and_70_each_get_their_share(client: Path, hookcore_libs: HookLibs, tmp_path: Path) -> None:
    low, high = contend(client, hookcore_libs, tmp_path, [("a", 30), ("b", 70)])
    assert abs(low.pct - 30) <= 1 and abs(high.pct - 70) <= 1, (low, high)
    charged_own_work(low)
    charged_own_work(high)
    assert low.books and low.books.elapsed_ns > 1.2 * low.books.charged_ns, low   # what the estimate removed


@pytest.mark.parametrize("kernel_us", [200, 1000])
def test_one_claims_two_processes_hold_the_claims_share(client: Path, hookcore_libs: HookLibs, tmp_path: Path,
                                                        kernel_us: int) -> None:
    """Two processes of one 50% claim contend with each other for the device: together they get the
    claim's 50% (+-3), charged their own work."""
    a, b = contend(client, hookcore_libs, tmp_path, [("c", 50), ("c", 50)], kernel_us=kernel_us)
    total = a.pct + b.pct
    assert abs(total - 50) <= 3, (a, b)
    assert a.books is not None
    assert abs(a.books.charged_ns - (a.work_ns + b.work_ns)) <= 0.03 * (a.work_ns + b.work_ns) + 2_000_000, (a, b)


@pytest.fixture(scope="module")
def nvml_peers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' NVML double (tests/hook/c/nvml_clocks.c), which answers a process count."""
    d = tmp_path_factory.mktemp("nvml")
    cc(d / "libnvidia-ml.so.1", "-shared", "-fPIC", str(ROOT / "tests/hook/c/nvml_clocks.c"))
    return d


def gappy(client: Path, libs: HookLibs, nvml: Path, tmp: Path, peers: str | None) -> hookcore.LimiterUsage:
    """A launch-bound loop alone on the stub device (20 us kernels, 0..90 us of host code after each,
    varying: the device idles inside its batches by a different amount each time), at a 30% share,
    with NVML's utilization samples naming `peers` busy processes (None: NVML cannot tell)."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = {"HOOKCORE_DEVICE_UUID_0": UUID0, "HOOKCORE_LEDGER": str(tmp / "l"), "HOOKCORE_MEMORY_LIMIT_0": "1Gi",
           "HOOKCORE_COMPUTE_LIMIT_0": "30"}
    if peers is not None:
        env["STUB_NVML_PEERS"] = peers
    e = client_env(libs, virtual_preload(libs.libvgpu), **env)
    e["LD_LIBRARY_PATH"] = f"{nvml}:{libs.stub_dir}"
    proc = subprocess.run([str(client), "launch", "20", "0", "0.5", "90"], env=e, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with hookcore.Ledger(tmp / "l") as ledger:
        return ledger.limiter(0)


def test_alone_on_the_device_a_batch_is_charged_its_window(client: Path, hookcore_libs: HookLibs, nvml_peers: Path,
                                                           tmp_path: Path) -> None:
    """Nothing else can run inside the windows of the device's only process: the host gaps in them are
    its own, and the lowest window seen per signature would charge it less than it holds the device
    (on the H100, a launch-bound loop at 30% got 37.5% of its native throughput so)."""
    for peers in ("1", "0"):  # NVML saw only this process run kernels lately (or none yet)
        alone = gappy(client, hookcore_libs, nvml_peers, tmp_path / f"alone-{peers}", peers)
        assert alone.charged_ns == alone.elapsed_ns > 0, (peers, alone)
    for peers in ("2", None):  # another process ran kernels, or nobody can tell: the estimate, as before
        got = gappy(client, hookcore_libs, nvml_peers, tmp_path / f"peers-{peers}", peers)
        assert 0 < got.charged_ns < 0.97 * got.elapsed_ns, (peers, got)
