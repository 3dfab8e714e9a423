"""The DCU's processes through ROCm SMI, and the framework's watchdog judging them.

The real driver on fake DCUs (`--fake k100-aix8`: its ctypes path against the stub
librocm_smi64.so), the stub's process list written by the test (HOOKCORE_STUB_RSMI_PROCESSES,
re-read at every call), claims prepared by the driver itself (its quotas, its hook library, the
daemon's checkpoint record), and the processes' /proc entries made up in a `FakeProc` tree (a
claim's mounts, a pod's cgroup, the hook mapped or not), so no root is needed. The daemon test
runs `dra run hygon-dcu --watchdog taint` against the real control plane.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from driver_helpers import assert_watchdog_taints_until_exit, fake_drivers
from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest

from dra import AllocatedDevice, ClaimRef
from dra._runtime.ledger_metrics import LedgerCollector, device_names_by_hook_key
from dra_dev.cluster.controlplane import ControlPlane
from drivers.hygon_dcu import edits, processes, rsmi
from drivers.hygon_dcu.config import DcuConfig
from drivers.hygon_dcu.driver import HygonDcuDriver
from tests.watchdog.watchdog_rig import PreparedRig

DRIVER = "hygon-dcu.project-hami.io"
ENV = "HOOKCORE_STUB_RSMI_PROCESSES"
MiB, GiB = 1 << 20, 1 << 30
U64_MAX = (1 << 64) - 1


@pytest.fixture
def driver(stub_rsmi: Path, clean_stub_env: None, tmp_path: Path) -> Iterator[HygonDcuDriver]:
    """A driver on 8 fake K100_AI with an empty process list at ``tmp_path/rsmi-processes``."""
    (tmp_path / "rsmi-processes").write_text("")
    os.environ[ENV] = str(tmp_path / "rsmi-processes")
    for make in fake_drivers(HygonDcuDriver, "k100-aix8"):
        yield make(settings={"health": "off"})


def listed(driver: HygonDcuDriver, text: str) -> None:
    """The stub lists these processes from now on (`<index> <pid> <vram> [<occupancy>]` lines)."""
    Path(os.environ[ENV]).write_text(text)


def key(driver: HygonDcuDriver, device: str) -> str:
    return edits.hook_key(driver.by_name[device].pci_bus_id)


# --------------------------------------------------------------------------------------------
# The reader


def test_processes_are_read_per_dcu_with_their_vram_and_the_claims_quota_key(driver: HygonDcuDriver) -> None:
    """A process on two DCUs is on each with its VRAM there; one with queues and no VRAM yet is on
    its DCU with 0; the key is the one the claim's quota names; CU occupancy is no utilization."""
    listed(driver, f"0 4001 {GiB}\n2 4001 {3 * GiB}\n5 4002 0 60\n")
    got = sorted((p.device, p.uuid, p.pid, p.memory, p.utilization) for p in driver.processes() or [])
    assert got == [("dcu-0", key(driver, "dcu-0"), 4001, GiB, None),
                   ("dcu-2", key(driver, "dcu-2"), 4001, 3 * GiB, None),
                   ("dcu-5", key(driver, "dcu-5"), 4002, 0, None)]
    claim = ClaimRef("0c6a3f6e-0000-4000-8000-00000000dc07", "default", "c")
    alloc = AllocatedDevice("dcu", "node-a", "dcu-2", "s1", {"memory": 4 * GiB, "cores": 30})
    enforcement = driver.enforcement(claim, driver.prepare(claim, [alloc]))
    assert enforcement is not None and [q.uuid for q in enforcement.quotas] == [key(driver, "dcu-2")]
    listed(driver, "")
    assert driver.processes() == []


def test_a_dcu_that_stops_answering_is_skipped_with_one_warning(driver: HygonDcuDriver,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    assert driver.fake is not None
    bus = driver.by_name["dcu-1"].pci_bus_id
    listed(driver, f"0 4001 {GiB}\n1 4001 {GiB}\n1 4002 {GiB}\n")
    driver.fake.set_lost(bus)
    with caplog.at_level(logging.INFO, logger=processes.__name__):
        for _ in range(3):
            assert sorted((p.device, p.pid) for p in driver.processes() or []) == [("dcu-0", 4001)]
        driver.fake.set_lost(bus, lost=False)
        assert sorted((p.device, p.pid) for p in driver.processes() or []) == [
            ("dcu-0", 4001), ("dcu-1", 4001), ("dcu-1", 4002)]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(r.getMessage(), r.__dict__["device"]) for r in warned] == [
        ("DCU's processes unreadable; skipped until it answers", "dcu-1")]
    assert "RSMI_STATUS_FILE_ERROR" in warned[0].__dict__["error"] and bus in warned[0].__dict__["error"]
    assert [r.__dict__["device"] for r in caplog.records if "readable again" in r.getMessage()] == ["dcu-1"]


def test_a_list_that_grows_between_count_and_read_is_read_again_with_room(driver: HygonDcuDriver,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The count says 1, then 40 processes start: the read is INSUFFICIENT_SIZE and is done again
    with twice the room; none is lost."""
    library = driver.library
    assert library is not None
    listed(driver, f"0 5000 {MiB}\n")
    call = library.call

    def growing(name: str, *args: Any, target: str = "") -> None:
        if name == "rsmi_compute_process_info_get" and args[0] is None:
            call(name, *args, target=target)
            listed(driver, "".join(f"{i % 8} {5000 + i} {MiB}\n" for i in range(40)))
            return
        call(name, *args, target=target)

    monkeypatch.setattr(library, "call", growing)
    assert sorted(p.pid for p in driver.processes() or []) == list(range(5000, 5040))


def test_a_library_without_the_process_api_leaves_the_watchdog_idle(fake_dcus: Callable[..., Any],
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """rsmi_compute_process_info_by_device_get came with ROCm 5.7: a library without it is named
    once at start, and the driver lists nothing (None), so the watchdog judges nothing."""
    backend = fake_dcus("k100-aix2")
    inventory = rsmi.discover(backend.rsmi, backend.sysfs)
    original = backend.rsmi.function

    def lacking(name: str) -> Any:
        if name == "rsmi_compute_process_info_by_device_get":
            raise rsmi.RsmiError(name, "", -1, f"{backend.rsmi.path} has no {name}: too old")
        return original(name)

    backend.rsmi.function = lacking  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        reader = processes.ProcessReader(backend.rsmi, inventory.dcus)
    assert reader.read() is None
    assert [r.getMessage() for r in caplog.records if r.name == processes.__name__] == [
        "ROCm SMI has no process API: the watchdog sees no DCU process; install a ROCm SMI (HyHAL or ROCm) that has it"]


# --------------------------------------------------------------------------------------------
# The watchdog over the DCU driver


@pytest.fixture
def dcu_rig(driver: HygonDcuDriver, tmp_path: Path) -> PreparedRig:
    return PreparedRig(driver, tmp_path, device_type="dcu", library="libvhip.so",
                       config={"apiVersion": "hygon-dcu.project-hami.io/v1alpha1", "kind": "DcuConfig"})


def test_a_held_process_is_seen_with_its_vram_and_flagged_once_over_its_quota(dcu_rig: PreparedRig) -> None:
    c = dcu_rig.claim("dcu-3", memory=4 * GiB)
    dcu_rig.process(7001, c)
    dcu_rig.process(7002, c)
    listed(dcu_rig.driver, f"3 7001 {GiB}\n3 7002 {2 * GiB}\n")
    wd = dcu_rig.watchdog(memory_tolerance=64 * MiB)
    assert wd.maps
    assert wd.poll() == []
    assert dcu_rig.metric('dra_device_processes{device="dcu-3"') == 2
    assert dcu_rig.metric('dra_device_processes_unheld{device="dcu-3"') == 0
    assert wd.records.claims[c.uid].memory == {"dcu-3": 4 * GiB}
    listed(dcu_rig.driver, f"3 7001 {GiB}\n3 7002 {3 * GiB + 640 * MiB}\n")  # 4.5 GiB + 2 x 64 MiB tolerance
    got = wd.poll()
    assert [(v.kind, v.device, v.pid, v.claim.uid if v.claim else None, v.amount) for v in got] == [
        ("over-quota", "dcu-3", 7002, c.uid, 512 * MiB)]
    assert c.name in got[0].message and "dcu-3" in got[0].message
    assert dcu_rig.metric(f'dra_claim_memory_over_quota_bytes{{claim="{c.name}"') == 512 * MiB
    assert dcu_rig.events.got == got
    assert wd.poll() == []  # once, while it lasts


def test_the_hooks_settings_and_the_ledger_metrics_find_the_dcu_by_its_hook_key(dcu_rig: PreparedRig) -> None:
    """The hook names a DCU by its PCI bus ID (``pci-...``), not by the UUID the driver publishes:
    the prepared device's state keeps that key (`dra.HOOK_KEY`), so the watchdog takes the hook's
    settings over the allocation (computeLimit: false: 100 cores, though 30 were allocated; before,
    no setting matched and the view kept 30), and the ledger metrics name the device."""
    c = dcu_rig.claim("dcu-3", memory=4 * GiB, config=DcuConfig(compute_limit=False))
    wd = dcu_rig.watchdog()
    wd.poll()
    assert wd.records.claims[c.uid].cores == {"dcu-3": 100}
    records = dcu_rig.checkpoint.records
    assert device_names_by_hook_key(records(), DRIVER) == {key(dcu_rig.driver, "dcu-3"): "dcu-3"}
    registry = CollectorRegistry()
    registry.register(LedgerCollector(DRIVER, dcu_rig.state / "hooks", records,
                                      lambda: device_names_by_hook_key(records(), DRIVER)))
    limit = [ln for ln in generate_latest(registry).decode().splitlines()
             if ln.startswith("dra_claim_memory_limit_bytes{")]
    assert len(limit) == 1 and 'device="dcu-3"' in limit[0] and float(limit[0].rsplit(" ", 1)[1]) == 4 * GiB, limit


def test_a_process_the_claim_does_not_hold_and_one_in_no_claim_are_unheld(dcu_rig: PreparedRig) -> None:
    """In the claim's pod without libvhip.so mapped (a static binary, raw ioctls): unheld on its
    claim; a host process on another DCU: unheld, in no claim. The held neighbour: nothing."""
    c = dcu_rig.claim("dcu-0", memory=8 * GiB)
    dcu_rig.process(7101, c)
    dcu_rig.process(7102, c, held=False)
    dcu_rig.process(7103, None)
    listed(dcu_rig.driver, f"0 7101 {GiB}\n0 7102 {GiB}\n6 7103 {GiB}\n")
    got = {v.pid: v for v in dcu_rig.watchdog().poll()}
    assert set(got) == {7102, 7103} and {v.kind for v in got.values()} == {"unheld"}
    assert got[7102].claim is not None and got[7102].claim.uid == c.uid and got[7102].pod_uid == c.pod_uid
    assert "without the claim's hook loaded" in got[7102].message and got[7102].device == "dcu-0"
    assert got[7103].claim is None and got[7103].device == "dcu-6"
    assert dcu_rig.metric('dra_device_processes_unheld{device="dcu-0"') == 1
    assert dcu_rig.metric('dra_device_processes_unheld{device="dcu-6"') == 1


def test_hostile_lines_lose_nothing_and_crash_nothing(dcu_rig: PreparedRig, capfd: pytest.CaptureFixture[str],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Between two good lines: a negative VRAM, VRAM past 64 bits, a PID past 32 bits, a word, an
    occupancy past 100, an extra field, a line of 300 digits (malformed: skipped by the stub, one
    message each); PID 0 (passed on: left out by the driver with one warning); a device ROCm SMI
    does not have; and a held process claiming 2^64-1 bytes, which is over its quota by that much,
    not a crash."""
    c = dcu_rig.claim("dcu-1", memory=4 * GiB)
    dcu_rig.process(7201, c)
    dcu_rig.process(7202, c)
    dcu_rig.process(7203, c)
    listed(dcu_rig.driver, "\n".join([
        f"1 7201 {GiB}", "1 7299 -5", f"1 7299 {1 << 64}", f"1 {1 << 32} 5", "1 seven 5", "1 7299 5 101",
        "1 7299 5 50 9", "1" + "0" * 300, "1 0 4096", "42 7298 4096", f"1 7203 {U64_MAX}", f"1 7202 {GiB} 40", ""]))
    wd = dcu_rig.watchdog()
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        got = [(v.kind, v.pid, v.amount) for v in wd.poll()]
        assert wd.poll() == []
    assert got == [("over-quota", 7203, pytest.approx(U64_MAX + 2 * GiB - 4 * GiB - 3 * 64 * MiB))]
    seen = sorted((p.device, p.pid, p.memory) for p in dcu_rig.driver.processes() or [])
    assert seen == [("dcu-1", 7201, GiB), ("dcu-1", 7202, GiB), ("dcu-1", 7203, U64_MAX)]
    assert dcu_rig.metric('dra_device_processes{device="dcu-1"') == 3
    malformed = [line for line in capfd.readouterr().err.splitlines() if ENV in line]
    assert len(malformed) == 3 * 7 and {line.split(" line ")[1].split(":")[0] for line in malformed} == {
        str(n) for n in range(2, 9)}  # three polls, seven lines each, one message a line a poll
    assert [r.getMessage() for r in caplog.records if r.name == processes.__name__] == [
        "ROCm SMI lists PID 0, which is no process: left out"]


# --------------------------------------------------------------------------------------------
# The daemon


@pytest.mark.cluster
def test_the_daemon_taints_a_dcu_with_a_process_in_no_claim_until_it_exits(
        cluster: ControlPlane, api_client: client.ApiClient, stub_rsmi: Path) -> None:
    """`dra run hygon-dcu --fake k100-aix8 --watchdog taint`: the DCU's watchdog runs in the daemon."""
    assert_watchdog_taints_until_exit(cluster, api_client, "hygon-dcu", DRIVER,
                                      ["--fake", "k100-aix8", "--set", "health=off"], ENV, "dcu-3", 3)
