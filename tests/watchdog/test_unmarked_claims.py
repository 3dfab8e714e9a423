"""The watchdog over a driver whose devices hold their shares themselves (`shares_held_by_device`,
no hook): its claims carry no hook mount, the only evidence of membership the watchdog takes, so a
pod's process on its devices cannot be put in a claim. Such a process is counted, not judged (it
may well be its claim's); a process in no pod is judged unheld, in no claim, as for any driver.
The same processes under a driver with a hook: both unheld (the rule is the declaration's)."""

from __future__ import annotations

import logging
import time
import uuid as uuidlib
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dra._runtime.checkpoint import PREPARED, ClaimRecord, DeviceRecord
from dra._runtime.watchdog.loop import Watchdog
from dra._runtime.watchdog.model import Verdict, WatchdogSettings
from dra.driver import DeviceProcess, Driver
from tests.watchdog.watchdog_rig import FakeProc, pod_cgroup

GiB = 1 << 30
POD = "5f0c3a52-1b7e-4a39-9c39-0e6d7a1f2b11"


class ListingDriver(Driver):
    """Lists `procs` on its one device, `dev-0`; its devices hold their shares when `held_by_device`."""

    name = "dev.example.com"
    cdi_kind = "k8s.dev.example.com/dev"

    def __init__(self, procs: Sequence[DeviceProcess]) -> None:
        self.procs = list(procs)

    def devices(self):  # type: ignore[no-untyped-def]
        return []

    def prepare(self, claim, devices):  # type: ignore[no-untyped-def]
        return []

    def unprepare(self, claim, prepared):  # type: ignore[no-untyped-def]
        return None

    def processes(self) -> Sequence[DeviceProcess]:
        return self.procs


class HeldByDevice(ListingDriver):
    shares_held_by_device = True


class Events:
    def __init__(self) -> None:
        self.got: list[Verdict] = []

    def emit(self, verdict: Verdict) -> None:
        self.got.append(verdict)


def a_claim_on_the_device() -> ClaimRecord:
    """A prepared claim of 1 GiB on dev-0, no hook (what the daemon records for such a driver)."""
    uid = str(uuidlib.uuid4())
    return ClaimRecord(uid, "team-a", "claim-a", PREPARED, "boot", devices=(
        DeviceRecord(ListingDriver.name, "dev", "node-a", "dev-0", "s1", {"memory": GiB, "cores": 30}),),
        updated_at=time.time())


def poll(driver: ListingDriver, tmp_path: Path) -> tuple[list[Verdict], str]:
    proc = FakeProc(tmp_path / "proc")
    proc.process(8101, cgroup=pod_cgroup(POD))  # a pod's (a claim's container, or not: nothing says)
    proc.process(8102)  # a host process, in no pod
    registry = CollectorRegistry()
    claim = a_claim_on_the_device()
    wd = Watchdog(driver, lambda: [claim], tmp_path / "hooks", Events(), registry,
                  WatchdogSettings(proc=proc.root))
    got = wd.poll()
    assert wd.poll() == []  # once, while it lasts
    return got, generate_latest(registry).decode()


def test_a_pods_process_is_counted_not_judged_and_a_host_process_is_unheld(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    procs = [DeviceProcess("dev-0", "DEV-0", 8101, 8 * GiB), DeviceProcess("dev-0", "DEV-0", 8102, GiB)]
    with caplog.at_level(logging.WARNING, logger="dra._runtime.watchdog"):
        got, metrics = poll(HeldByDevice(procs), tmp_path)
    assert [(v.kind, v.pid, v.claim) for v in got] == [("unheld", 8102, None)]
    assert "in none of dev.example.com's claims (a host process, in no pod)" in got[0].message
    assert 'dra_device_processes{device="dev-0",driver="dev.example.com"} 2.0' in metrics
    assert 'dra_device_processes_unheld{device="dev-0",driver="dev.example.com"} 1.0' in metrics
    assert not [line for line in metrics.splitlines() if line.startswith("dra_claim_memory_over_quota_bytes{")]
    said = [r.getMessage() for r in caplog.records if "hold their shares themselves" in r.getMessage()]
    assert len(said) == 1 and "a process in a pod is counted, not judged" in said[0]


def test_under_a_driver_with_a_hook_the_same_pods_process_is_unheld(tmp_path: Path) -> None:
    """The control: a pod's process without its claim's hook mount is in no claim and unheld."""
    procs = [DeviceProcess("dev-0", "DEV-0", 8101, 8 * GiB), DeviceProcess("dev-0", "DEV-0", 8102, GiB)]
    got, _ = poll(ListingDriver(procs), tmp_path)
    assert sorted((v.kind, v.pid, v.pod_uid) for v in got) == [("unheld", 8101, POD), ("unheld", 8102, None)]
