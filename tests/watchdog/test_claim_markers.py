"""The watchdog over claims no hook holds (their devices hold their shares: an sMLU instance, a MIG
device): the framework mounts each such claim's marker (`claim_marker`, the daemon's own
``hooks/<uid>/claim``, read-only) into its containers, and that mount is the evidence that a
process is the claim's, as a hooked claim's config and ledger are. A marked process on its claim's
device is held (by the device) and counted against the claim's memory; any other process there
(another pod's, a host process, one of the claim's on a device it was not given) is unheld.
A hookless claim prepared before markers existed has none: pods' processes on its devices are
counted and not judged (said once), host processes are still unheld."""

from __future__ import annotations

import logging
import time
import uuid as uuidlib
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dra._runtime import claim_marker
from dra._runtime.checkpoint import PREPARED, ClaimRecord, DeviceRecord
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.watchdog.loop import Watchdog
from dra._runtime.watchdog.model import WatchdogSettings
from dra.driver import DeviceProcess
from tests.watchdog.watchdog_rig import Events, FakeProc, ListingDriver, pod_cgroup

GiB = 1 << 30
MiB = 1 << 20
POD, OTHER_POD = "5f0c3a52-1b7e-4a39-9c39-0e6d7a1f2b11", "9a1d2c3b-4e5f-4a6b-8c7d-0e1f2a3b4c5d"


class HeldByDevice(ListingDriver):
    """Lists `procs` on its devices; its devices hold their shares (no hook)."""

    shares_held_by_device = True


def hookless_claim(hooks: ClaimHooks, marked: bool) -> ClaimRecord:
    """A prepared claim of 1 GiB on dev-0, no hook (the record's enforcement is None); with its
    marker as prepare makes it, or none (prepared by a daemon from before markers)."""
    uid = str(uuidlib.uuid4())
    if marked:
        claim_marker.mark(hooks, uid, HeldByDevice.name)
    return ClaimRecord(uid, "team-a", "claim-a", PREPARED, "boot", devices=(
        DeviceRecord(HeldByDevice.name, "dev", "node-a", "dev-0", "s1", {"memory": GiB, "cores": 30}),),
        updated_at=time.time())


def marker_mount(hooks: ClaimHooks, uid: str) -> str:
    line = FakeProc.claim_mount(hooks.root, uid, file=claim_marker.MARKER_FILE)
    return line.replace(f"/run/hookcore/vgpu/{claim_marker.MARKER_FILE}", claim_marker.container_path(uid, "d"))


def in_its_container(tmp_path: Path, hooks: ClaimHooks, uid: str) -> FakeProc:
    """Process 8101 in the claim's pod, its container carrying the claim's marker."""
    proc = FakeProc(tmp_path / "proc")
    proc.process(8101, cgroup=pod_cgroup(POD), mountinfo=marker_mount(hooks, uid))
    return proc


def watch(tmp_path: Path, procs: Sequence[DeviceProcess], record: ClaimRecord
          ) -> tuple[Watchdog, CollectorRegistry]:
    registry = CollectorRegistry()
    return Watchdog(HeldByDevice(procs), lambda: [record], tmp_path / "state" / "hooks", Events(), registry,
                    WatchdogSettings(proc=tmp_path / "proc")), registry


@pytest.fixture
def hooks(tmp_path: Path) -> ClaimHooks:
    return ClaimHooks(tmp_path / "state", HookDir(tmp_path / "hookdir"))


def test_a_marked_process_is_its_claims_and_every_other_one_on_the_device_is_unheld(
        tmp_path: Path, hooks: ClaimHooks) -> None:
    claim = hookless_claim(hooks, marked=True)
    proc = FakeProc(tmp_path / "proc")
    proc.process(8101, cgroup=pod_cgroup(POD), mountinfo=marker_mount(hooks, claim.uid))  # the claim's container
    proc.process(8102, cgroup=pod_cgroup(OTHER_POD))  # another pod, given the device another way
    proc.process(8103)  # a host process
    # Hostile: a file named like the marker, mounted from outside the daemon's hooks root.
    proc.process(8104, cgroup=pod_cgroup(OTHER_POD), mountinfo=marker_mount(hooks, claim.uid).replace(
        str(hooks.root), "/var/tmp/hooks"))
    procs = [DeviceProcess("dev-0", "DEV-0", pid, 256 * MiB) for pid in (8101, 8102, 8103, 8104)]
    wd, registry = watch(tmp_path, procs, claim)
    got = wd.poll()
    assert sorted((v.kind, v.pid, v.pod_uid, v.claim) for v in got) == [
        ("unheld", 8102, OTHER_POD, None), ("unheld", 8103, None, None), ("unheld", 8104, OTHER_POD, None)]
    assert wd.poll() == []  # once, while it lasts
    metrics = generate_latest(registry).decode()
    assert 'dra_device_processes{device="dev-0",driver="dev.example.com"} 4.0' in metrics
    assert 'dra_device_processes_unheld{device="dev-0",driver="dev.example.com"} 3.0' in metrics


def test_a_marked_claim_is_judged_against_its_memory(tmp_path: Path, hooks: ClaimHooks) -> None:
    """Its device holds its memory, the watchdog checks it did: 3 GiB of a 1 GiB claim is over."""
    claim = hookless_claim(hooks, marked=True)
    in_its_container(tmp_path, hooks, claim.uid)
    wd, _ = watch(tmp_path, [DeviceProcess("dev-0", "DEV-0", 8101, 3 * GiB)], claim)
    [verdict] = wd.poll()
    assert (verdict.kind, verdict.pid, verdict.claim and verdict.claim.uid) == ("over-quota", 8101, claim.uid)
    assert "The device did not hold the claim to its memory" in verdict.message and "hook" not in verdict.message


@pytest.mark.parametrize("state, quota", [({"memory": GiB}, GiB), ({}, None), ({"memory": "1Gi"}, None),
                                          ({"memory": True}, None), ({"memory": -1}, None)])
def test_a_device_allocated_whole_holds_its_claim_to_the_memory_its_prepare_recorded(
        tmp_path: Path, hooks: ClaimHooks, state: dict[str, object], quota: int | None) -> None:
    """A device not shared (a MIG device) is allocated whole: Kubernetes records no consumed
    capacity for it, so the claim's memory there is what the driver's prepare recorded
    (`dra.WHOLE_MEMORY`, a positive integer); without it, or with anything else there, the claim's
    memory is not judged (no quota), its processes still held."""
    uid = str(uuidlib.uuid4())
    claim_marker.mark(hooks, uid, HeldByDevice.name)
    claim = ClaimRecord(uid, "team-a", "claim-a", PREPARED, "boot", devices=(
        DeviceRecord(HeldByDevice.name, "dev", "node-a", "dev-0", None, {}, state=state),), updated_at=time.time())
    in_its_container(tmp_path, hooks, claim.uid)
    wd, registry = watch(tmp_path, [DeviceProcess("dev-0", "DEV-0", 8101, 3 * GiB)], claim)
    assert wd.records.refresh()[uid].memory == {"dev-0": quota}
    got = [(v.kind, v.pid, v.amount) for v in wd.poll()]
    assert got == ([("over-quota", 8101, float(2 * GiB - 64 * MiB))] if quota else [])
    series = [line for line in generate_latest(registry).decode().splitlines()
              if line.startswith("dra_claim_memory_over_quota_bytes{")]
    assert [float(line.rsplit(" ", 1)[1]) for line in series] == ([2 * GiB - 64 * MiB] if quota else [])


def test_a_claims_process_on_a_device_it_was_not_given_is_unheld(tmp_path: Path, hooks: ClaimHooks) -> None:
    claim = hookless_claim(hooks, marked=True)
    in_its_container(tmp_path, hooks, claim.uid)
    wd, _ = watch(tmp_path, [DeviceProcess("dev-1", "DEV-1", 8101, 256 * MiB)], claim)
    [verdict] = wd.poll()
    assert (verdict.kind, verdict.pid, verdict.device) == ("unheld", 8101, "dev-1")
    assert "of claim team-a/claim-a" in verdict.message and "which the claim was not given" in verdict.message


def test_under_a_claim_from_before_markers_pods_processes_are_counted_not_judged(
        tmp_path: Path, hooks: ClaimHooks, caplog: pytest.LogCaptureFixture) -> None:
    claim = hookless_claim(hooks, marked=False)
    proc = FakeProc(tmp_path / "proc")
    proc.process(8101, cgroup=pod_cgroup(POD))  # maybe the claim's: nothing says
    proc.process(8102)  # a host process: in no claim whatever the claims
    procs = [DeviceProcess("dev-0", "DEV-0", 8101, 8 * GiB), DeviceProcess("dev-0", "DEV-0", 8102, GiB)]
    wd, registry = watch(tmp_path, procs, claim)
    with caplog.at_level(logging.WARNING, logger="dra._runtime.watchdog"):
        got = wd.poll()
        assert wd.poll() == []
    assert [(v.kind, v.pid, v.claim) for v in got] == [("unheld", 8102, None)]
    metrics = generate_latest(registry).decode()
    assert 'dra_device_processes{device="dev-0",driver="dev.example.com"} 2.0' in metrics
    assert 'dra_device_processes_unheld{device="dev-0",driver="dev.example.com"} 1.0' in metrics
    said = [r.getMessage() for r in caplog.records if "prepared before claims carried their marker" in r.getMessage()]
    assert len(said) == 1, said


def test_a_pods_process_is_unheld_once_the_unmarked_claim_is_gone(tmp_path: Path, hooks: ClaimHooks) -> None:
    """Counted-not-judged lasts only while such a claim is on the device (it is not remembered)."""
    claim = hookless_claim(hooks, marked=False)
    records = [claim]
    proc = FakeProc(tmp_path / "proc")
    proc.process(8101, cgroup=pod_cgroup(POD))
    wd = Watchdog(HeldByDevice([DeviceProcess("dev-0", "DEV-0", 8101, GiB)]), lambda: list(records),
                  hooks.root, Events(), CollectorRegistry(), WatchdogSettings(proc=tmp_path / "proc"))
    assert wd.poll() == []
    records.clear()
    wd.records.refresh(force=True)
    assert [(v.kind, v.pid) for v in wd.poll()] == [("unheld", 8101)]
