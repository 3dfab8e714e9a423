"""The node daemon survives its tenants (security review 2026-12, §3 and finding 3's trigger).

At 165651d `/healthz`, `/readyz` and `/metrics` ran one thread per connection with no timeout, so
a tenant's pod could hold connections (and threads) open for ever; a ``*.json`` file in the
checkpoint dir whose name is no claim UID stopped the daemon at start. Here: 500 idle
connections, a stalled request head and a slow ``/metrics`` leave ``/healthz`` answering within a
second on a bounded number of threads, and the daemon starts beside the stray file.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import wait_for
from prometheus_client.core import GaugeMetricFamily

from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.metrics import HealthServer, Metrics
from dra._runtime.prepare import ClaimPreparer
from dra.testing.claims import RecordedClaims
from drivers.example.driver import ExampleDriver


class StuckCollector:
    """A collector whose scrape hangs until released (a ledger read stuck on a tenant's file)."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def collect(self) -> Iterator[Any]:
        self.entered.release()
        self.release.wait(30)
        yield GaugeMetricFamily("slow", "a slow series", value=1)


@pytest.fixture
def server() -> Iterator[tuple[HealthServer, Metrics]]:
    metrics = Metrics("d")
    srv = HealthServer(metrics, lambda: "", lambda: "", 0, "127.0.0.1", request_timeout=2.0, max_connections=256)
    srv.start()
    yield srv, metrics
    srv.stop()


def get(port: int, path: str, timeout: float = 5) -> tuple[int, float]:
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
        resp.read()
        return int(resp.status), time.monotonic() - t0


def test_500_idle_connections_leave_healthz_answering(server: tuple[HealthServer, Metrics]) -> None:
    """At 165651d each idle connection held a thread for ever: /healthz never answered. Asserted:
    it answers (a timeout far above the server's 2 s request timeout, so a loaded machine cannot
    fail it; the answer's latency is a figure for bench/, not a test) on a bounded number of threads."""
    srv, _ = server
    before = threading.active_count()
    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(500)]
    try:
        for _ in range(3):
            status, _took = get(srv.port, "/healthz", timeout=30)
            assert status == 200
        assert threading.active_count() - before <= 4  # two small pools, not a thread per connection
    finally:
        for s in socks:
            s.close()


def test_a_stalled_request_is_dropped_after_the_timeout(server: tuple[HealthServer, Metrics]) -> None:
    srv, _ = server
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never ends its head
    s.settimeout(60)
    t0 = time.monotonic()
    assert s.recv(1) == b""  # closed by the daemon, not by us (our own timeout would raise)
    assert time.monotonic() - t0 > 1.5  # not before its timeout
    s.close()


def test_an_oversized_request_head_is_dropped(server: tuple[HealthServer, Metrics]) -> None:
    srv, _ = server
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.settimeout(10)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (64 << 10))
    except OSError:
        pass  # closed while we were still sending: fine
    try:
        assert s.recv(1) == b""
    except ConnectionResetError:
        pass
    s.close()


def test_a_slow_metrics_scrape_does_not_delay_healthz(server: tuple[HealthServer, Metrics]) -> None:
    """Two scrapes stuck inside a collector (evidence: both entered it), and /healthz answers while
    they still are: it never waits behind /metrics. No latency is asserted (a loaded machine would
    fail it); a /healthz queued behind the scrapes would not answer until they are released."""
    srv, metrics = server
    stuck = StuckCollector()
    metrics.registry.register(stuck)  # type: ignore[arg-type]
    answers: list[int] = []
    scrapes = [threading.Thread(target=lambda: answers.append(get(srv.port, "/metrics", timeout=60)[0]), daemon=True)
               for _ in range(2)]
    for t in scrapes:
        t.start()
    for _ in scrapes:
        assert stuck.entered.acquire(timeout=30), "a scrape never reached the collector"
    status, _took = get(srv.port, "/healthz", timeout=20)
    assert status == 200 and not stuck.release.is_set() and answers == []  # answered while both were stuck
    stuck.release.set()
    for t in scrapes:
        t.join(30)
    assert answers == [200, 200]  # the scrapes themselves finished too


def test_a_stray_file_in_the_checkpoint_dir_does_not_stop_the_daemon(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "state", boot_id="b")
    cp.claims_dir.mkdir(parents=True, exist_ok=True)
    (cp.claims_dir / "not a uid!.json").write_text("{}")  # no claim UID has a space or a "!"
    (cp.claims_dir / "-x.json").write_text("{}")
    driver = ExampleDriver(count=1)
    prep = ClaimPreparer(driver, RecordedClaims(), "node-a", cp, CDISpecs(driver.cdi_kind, tmp_path / "cdi"),
                         hooks=ClaimHooks(cp.state_dir, HookDir(tmp_path / "hook-dir")))
    prep.start()  # raised ValueError at 165651d
    assert cp.records() == [] and cp.uids() == set()
    assert (cp.claims_dir / "not a uid!.json").exists() and (cp.claims_dir / "-x.json").exists()  # left alone


def test_the_daemon_counts_a_cut_back_ledger(tmp_path: Path) -> None:
    """The daemon's `LedgerGuard` thread, wired to ``dra_ledger_oversized_total``."""
    from dra._runtime.enforcement import LedgerGuard

    hooks = ClaimHooks(tmp_path / "state", HookDir(tmp_path / "hook-dir"))
    metrics = Metrics("d")
    counter = metrics.ledger_oversized.labels("d")
    guard = LedgerGuard(hooks, lambda _uid: counter.inc(), interval=0.05)
    uid = "0c6a3f6e-0000-4000-8000-00000000c1a1"
    (hooks.root / uid).mkdir(parents=True)
    ledger = hooks.root / uid / "ledger"
    ledger.write_bytes(b"\0" * (guard.ledger_bytes() + (1 << 20)))
    guard.start()
    try:
        wait_for(lambda: counter._value.get() == 1 or None, 5, what="the guard to cut the ledger back")
        assert ledger.stat().st_size == guard.ledger_bytes()
        assert b"dra_ledger_oversized_total" in metrics.exposition()
    finally:
        guard.stop()


def guard_on_one_ledger(tmp_path: Path, uid: str) -> tuple[Any, Path, int, list[str]]:
    """A started `LedgerGuard` (interval 60 s: only a write's wake starts a pass within 30) over one
    claim's fresh ledger: the guard, the ledger, its size and the UIDs the guard cut back."""
    from dra._runtime.enforcement import LedgerGuard

    hooks = ClaimHooks(tmp_path / "state", HookDir(tmp_path / "hook-dir"))
    cut: list[str] = []
    guard = LedgerGuard(hooks, cut.append, interval=60)
    (hooks.root / uid).mkdir(parents=True)
    ledger = hooks.root / uid / "ledger"
    size = guard.ledger_bytes()
    ledger.write_bytes(b"\0" * size)
    guard.start()
    return guard, ledger, size, cut


def test_a_write_to_a_ledger_wakes_the_guard_at_once(tmp_path: Path) -> None:
    """inotify: the write itself wakes the guard, which cuts the growth back; it does not wait for the
    next interval (here 60 s)."""
    uid = "0c6a3f6e-0000-4000-8000-00000000c1a2"
    guard, ledger, size, cut = guard_on_one_ledger(tmp_path, uid)
    try:
        assert guard.passes.wait(1, timeout=30), "the guard's first pass (which puts the watch in place)"
        with ledger.open("ab") as f:
            f.write(b"x" * (8 << 20))
        # Within 30 s, half the interval: only the write's wake can start a second pass.
        assert guard.woken.wait(1, timeout=30), "a pass started by the write"
        assert cut == [uid] and ledger.stat().st_size == size
    finally:
        guard.stop()


def test_a_ledger_replaced_at_a_re_prepare_is_watched_in_place_of_the_old_one(tmp_path: Path) -> None:
    """Hostile: the claim's dir is replaced (a re-prepare with another config) while a running
    container keeps the old ledger mapped (open here), so the old inode and its watch live on. A
    write to the new ledger must still wake the guard (before, the watch stayed on the old file and
    the growth waited for the interval, here 60 s)."""
    import os

    uid = "0c6a3f6e-0000-4000-8000-00000000c1a3"
    guard, ledger, size, cut = guard_on_one_ledger(tmp_path, uid)
    try:
        with ledger.open("ab") as old:  # the running container's hold on the old ledger
            assert guard.passes.wait(1, timeout=30), "the guard's first pass (which puts the watch in place)"
            fresh = ledger.with_name("ledger.new")
            fresh.write_bytes(b"\0" * size)
            os.rename(fresh, ledger)
            old.write(b"x")  # the old container writes: a pass, which finds the new file
            old.flush()
            assert guard.woken.wait(1, timeout=30), "a pass started by the old file's write"
            with ledger.open("ab") as f:
                f.write(b"x" * (8 << 20))
            # Within 30 s, half the interval: only the new file's write can start this pass.
            assert guard.woken.wait(2, timeout=30), "a pass started by the new file's write"
        assert cut == [uid] and ledger.stat().st_size == size
    finally:
        guard.stop()
