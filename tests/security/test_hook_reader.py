"""The node daemon survives what a tenant puts where its claim's ledger should be (issue 17).

Every `/metrics` scrape reads each prepared claim's ledger, a file the claim's containers can
write. On 165651d a FIFO named `ledger` froze the whole daemon (open() blocked holding the GIL), a
truncate/restore loop killed it with SIGBUS (the file was mmap'd), and a symlink published another
claim's usage under this claim's labels. Here each scrape must return within a second with the
error counted, other threads must keep running, and the scraping process must survive.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from kube_helpers import wait_for
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from truncate_loop import truncate_until_exit

import hookcore
from dra._runtime.ledger_metrics import LedgerCollector

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
VICTIM = "5f0e8d0e-0000-4000-8000-00000000a001"
TENANT = "5f0e8d0e-0000-4000-8000-00000000a002"


@dataclasses.dataclass(frozen=True)
class Claim:
    uid: str
    namespace: str
    name: str


@pytest.fixture(scope="module")
def ext() -> None:
    proc = subprocess.run(["make", "-C", str(ROOT / "hookcore"), "-s", "libs"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    hookcore.parse_memory("1Mi")   # the extension imports


def real_ledger(hooks: Path, uid: str, limit: int) -> Path:
    path = hooks / uid / "ledger"
    path.parent.mkdir(parents=True, exist_ok=True)
    hookcore.create_ledger(path, hookcore.claim_env([hookcore.DeviceQuota(0, limit, 100, None)], str(path)))
    return path


def scrape(hooks: Path, claims: list[Claim]) -> tuple[dict[tuple[str, str], float], float, int]:
    """One scrape: its samples by (name, claim_uid), how long it took, and how many times a
    counter thread ran meanwhile (0 would mean the scrape held the GIL throughout)."""
    registry = CollectorRegistry()
    registry.register(LedgerCollector("gpu.test", hooks, lambda: claims))
    ticks = 0
    stop = threading.Event()

    def tick() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    t0 = time.monotonic()
    text = generate_latest(registry).decode()
    took = time.monotonic() - t0
    stop.set()
    t.join()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, s.labels.get("claim_uid", ""))] = s.value
    return out, took, ticks


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "sparse"])
def test_a_hostile_ledger_is_counted_and_skipped(ext: None, tmp_path: Path, kind: str) -> None:
    hooks = tmp_path / "hooks"
    real_ledger(hooks, VICTIM, 512 * MiB)
    bad = hooks / TENANT / "ledger"
    bad.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "symlink":   # another claim's ledger: its usage must not appear under our labels
        bad.symlink_to(hooks / VICTIM / "ledger")
    elif kind == "directory":
        bad.mkdir()
    else:
        with bad.open("wb") as f:
            f.truncate(10 << 30)   # 10 GiB, sparse
    claims = [Claim(TENANT, "tenant", "t"), Claim(VICTIM, "victim", "v")]
    got, took, ticks = scrape(hooks, claims)
    assert took < 30, took  # a fifo or a 10 GiB read would block or take minutes: never waited for
    assert got[("dra_ledger_read_errors_total", "")] == 1
    assert not any(uid == TENANT for (name, uid) in got if name.startswith("dra_claim_"))
    assert got[("dra_claim_memory_limit_bytes", VICTIM)] == 512 * MiB   # the other claim is still reported
    assert ticks > 0


def test_a_ledger_truncated_in_a_loop_never_kills_the_reader(ext: None, tmp_path: Path) -> None:
    """A tenant truncating and restoring its ledger while the daemon scrapes 1000 times: the
    scraping process (a child here, so a SIGBUS cannot take the test runner with it) survives,
    every scrape returns (none blocks), and the failed reads are counted."""
    hooks = tmp_path / "hooks"
    path = real_ledger(hooks, TENANT, 256 * MiB)
    good = path.read_bytes()
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from prometheus_client import CollectorRegistry, generate_latest
        from dra._runtime.ledger_metrics import LedgerCollector
        class C:
            uid, namespace, name = {TENANT!r}, "t", "t"
        col = LedgerCollector("gpu.test", Path({str(hooks)!r}), lambda: [C()])
        reg = CollectorRegistry()
        reg.register(col)
        worst = 0.0
        for _ in range(1000):
            t0 = time.monotonic()
            generate_latest(reg)
            worst = max(worst, time.monotonic() - t0)
        print("DONE", worst, col.read_errors)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    flips = truncate_until_exit(path, good, proc)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (proc.returncode, err[-2000:])   # -7 (SIGBUS) on 165651d
    word, worst, errors = out.split()
    assert word == "DONE" and float(worst) < 30, out  # none blocked (a busy machine only slows them)
    assert flips > 10 and int(errors) > 0, (flips, out)


def test_a_read_past_its_deadline_is_given_up(ext: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline itself: a read that does not come back (here a Ledger whose open blocks on an
    event, standing in for a file system that hangs) is abandoned after the timeout, and the same
    ledger is not read again while that read is stuck."""
    path = real_ledger(tmp_path / "hooks", TENANT, 256 * MiB)
    release = threading.Event()
    real = hookcore.Ledger

    class Hanging(real):  # type: ignore[misc, valid-type]
        def __init__(self, p: str, snapshot: bool = False) -> None:
            release.wait(30)
            super().__init__(p, snapshot)

    monkeypatch.setattr(hookcore, "Ledger", Hanging)
    t0 = time.monotonic()
    with pytest.raises(hookcore.LedgerTimeout, match=r"no answer within 0\.3 s"):
        hookcore.read_ledger(path, timeout=0.3)
    assert time.monotonic() - t0 < 25  # given up long before the hanging open's 30 s
    with pytest.raises(hookcore.LedgerTimeout, match="earlier read has not returned"):
        hookcore.read_ledger(path, timeout=0.3)
    release.set()
    monkeypatch.setattr(hookcore, "Ledger", real)

    def read_again() -> hookcore.LedgerSnapshot | None:
        try:
            return hookcore.read_ledger(path, timeout=1.0)
        except hookcore.LedgerTimeout:
            return None

    snap = wait_for(read_again, 10, 0.01, what="the stuck read to finish and the ledger to be read again")
    assert snap.devices[0].memory_limit == 256 * MiB


def test_limits_come_from_the_claims_config_not_the_ledger(ext: None, tmp_path: Path) -> None:
    """A tenant rewriting its ledger's quota: the metrics keep the daemon's own config's."""
    hooks = tmp_path / "hooks"
    path = real_ledger(hooks, TENANT, 256 * MiB)
    (path.parent / "config").write_text(hookcore.config_file_text(
        hookcore.claim_env([hookcore.DeviceQuota(0, 256 * MiB, 30, None)], "/run/hookcore/vgpu/ledger")))
    with path.open("r+b") as f:
        f.seek(4096 + 64)
        f.write((1 << 62).to_bytes(8, "little"))
    got, _, _ = scrape(hooks, [Claim(TENANT, "t", "t")])
    assert got[("dra_claim_memory_limit_bytes", TENANT)] == 256 * MiB
    assert got[("dra_claim_compute_limit_percent", TENANT)] == 30
