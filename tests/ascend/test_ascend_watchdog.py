"""The NPU's processes through DCMI, and the framework's watchdog judging them.

The real driver on fake NPUs (`--fake 910b3x8`: its ctypes path against the stub libdcmi.so), the
stub's process list written by the test (HOOKCORE_STUB_DCMI_PROCESSES, re-read at every query,
lines `<phy id> <pid> <bytes>`), claims prepared by the driver itself (its quotas, its hook
library, the daemon's checkpoint record), and the processes' /proc entries made up in a `FakeProc`
tree (a claim's mounts, a pod's cgroup, the hook mapped or not), so no root is needed. The daemon
test runs `dra run ascend --watchdog taint` against the real control plane.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from driver_helpers import assert_watchdog_taints_until_exit, fake_drivers
from kubernetes import client

from dra import AllocatedDevice, ClaimRef
from dra_dev.cluster.controlplane import ControlPlane
from drivers.ascend import dcmi, edits, processes
from drivers.ascend.driver import AscendDriver
from tests.watchdog.watchdog_rig import PreparedRig

DRIVER = "ascend.project-hami.io"
ENV = "HOOKCORE_STUB_DCMI_PROCESSES"
MiB, GiB = 1 << 20, 1 << 30
U64_MAX = (1 << 64) - 1


@pytest.fixture
def driver(stub_dcmi: Path, clean_stub_env: None, tmp_path: Path) -> Iterator[AscendDriver]:
    """A driver on 8 fake 910B3 (phy ID = logic ID = position) with an empty process list."""
    (tmp_path / "dcmi-processes").write_text("")
    os.environ[ENV] = str(tmp_path / "dcmi-processes")
    for make in fake_drivers(AscendDriver, "910b3x8"):
        yield make(settings={"health": "off"})


def listed(text: str) -> None:
    """The stub lists these processes from now on (`<phy id> <pid> <bytes>` lines)."""
    Path(os.environ[ENV]).write_text(text)


def key(driver: AscendDriver, device: str) -> str:
    return edits.hook_key(driver.by_name[device].phy_id)


def seen(driver: AscendDriver) -> list[tuple[str, int, int]]:
    return sorted((p.device, p.pid, p.memory) for p in driver.processes() or [])


# --------------------------------------------------------------------------------------------
# The reader


def test_processes_are_read_per_npu_with_their_memory_and_the_claims_quota_key(driver: AscendDriver) -> None:
    """A process on two NPUs is on each with its memory there; the key is the one the claim's
    quota names (davinci<phy ID>); no utilization; a PID listed twice on a chip is one process,
    with the larger memory (neither summed nor the last taken)."""
    listed(f"0 4001 {GiB}\n2 4001 {3 * GiB}\n5 4002 {2 * GiB}\n5 4002 {GiB}\n")
    got = sorted((p.device, p.uuid, p.pid, p.memory, p.utilization) for p in driver.processes() or [])
    assert got == [("npu-0-0", "davinci0", 4001, GiB, None),
                   ("npu-2-0", "davinci2", 4001, 3 * GiB, None),
                   ("npu-5-0", "davinci5", 4002, 2 * GiB, None)]
    claim = ClaimRef("0c6a3f6e-0000-4000-8000-0000000a5c07", "default", "c")
    alloc = AllocatedDevice("npu", "node-a", "npu-2-0", "s1", {"memory": 4 * GiB, "cores": 30})
    enforcement = driver.enforcement(claim, driver.prepare(claim, [alloc]))
    assert enforcement is not None and [q.uuid for q in enforcement.quotas] == [key(driver, "npu-2-0")]
    listed("")
    assert driver.processes() == []


def test_an_npu_that_stops_answering_is_skipped_with_one_warning(driver: AscendDriver,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    lost = driver.by_name["npu-1-0"]
    listed(f"0 4001 {GiB}\n1 4001 {GiB}\n1 4002 {GiB}\n")
    os.environ["HOOKCORE_STUB_DCMI_FAIL"] = f"dcmi_get_device_resource_info@{lost.uuid}=-8008"
    with caplog.at_level(logging.INFO, logger=processes.__name__):
        for _ in range(3):
            assert seen(driver) == [("npu-0-0", 4001, GiB)]
        del os.environ["HOOKCORE_STUB_DCMI_FAIL"]
        assert seen(driver) == [("npu-0-0", 4001, GiB), ("npu-1-0", 4001, GiB), ("npu-1-0", 4002, GiB)]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(r.getMessage(), r.__dict__["device"]) for r in warned] == [
        ("NPU's processes unreadable; skipped until it answers; check `npu-smi info` on the node", "npu-1-0")]
    assert "DCMI_ERR_CODE_DEVICE_NOT_EXIST" in warned[0].__dict__["error"] and lost.uuid in warned[0].__dict__["error"]
    assert [r.__dict__["device"] for r in caplog.records if "readable again" in r.getMessage()] == ["npu-1-0"]


def test_more_processes_than_dcmi_lists_are_cut_to_its_maximum_with_one_warning(
        driver: AscendDriver, caplog: pytest.LogCaptureFixture) -> None:
    """40 processes on one NPU: DCMI's call writes at most 32 (no buffer size is passed), so the
    watchdog sees 32 there and says once that more may run unseen; the other NPUs are untouched."""
    listed("".join(f"3 {5000 + i} {MiB}\n" for i in range(40)) + f"4 6000 {MiB}\n")
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        for _ in range(2):
            got = seen(driver)
            assert [p for d, p, _ in got if d == "npu-3-0"] == list(range(5000, 5032))
            assert [(d, p) for d, p, _ in got if d != "npu-3-0"] == [("npu-4-0", 6000)]
    assert [(r.getMessage(), r.__dict__["device"]) for r in caplog.records] == [
        ("DCMI lists its documented maximum of processes on an NPU; more may run there unseen by the watchdog",
         "npu-3-0")]


@pytest.mark.parametrize("count", [-5, processes.BUFFER + 1, (1 << 31) - 1])
def test_a_count_the_buffer_cannot_hold_reads_nothing_past_it(driver: AscendDriver, count: int,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A library that answers a negative count (that NPU skipped, one warning) or one past the
    entries it was given: only the buffer is read (the rest of the answer is never looked for past
    it), one warning; no crash, the other NPUs still read."""
    library = driver.library
    assert library is not None
    listed(f"0 4001 {GiB}\n6 4006 {GiB}\n")
    call = library.call

    def lying(name: str, *args: Any, target: str = "") -> None:
        call(name, *args, target=target)
        if name == processes.CALL and args[1] == 0 and args[0] == driver.by_name["npu-6-0"].card:
            args[3]._obj.value = count  # byref(count): what the library says it wrote

    monkeypatch.setattr(library, "call", lying)
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        got = seen(driver)
        assert seen(driver) == got
    if count < 0:
        assert got == [("npu-0-0", 4001, GiB)]
        assert [r.getMessage() for r in caplog.records] == [
            "NPU's processes unreadable; skipped until it answers; check `npu-smi info` on the node"]
        assert "negative process count" in caplog.records[0].__dict__["error"]
    else:
        assert got == [("npu-0-0", 4001, GiB), ("npu-6-0", 4006, GiB)]  # the buffer's zeroed rest: PID 0
        assert [r.getMessage() for r in caplog.records] == [
            "DCMI counts more processes on an NPU than it was given room for; the first are checked",
            "DCMI lists PID 0, which is no process: left out"]
        assert caplog.records[0].__dict__["buffer"] == processes.BUFFER


def test_the_struct_is_laid_out_as_dcmi_declares_it() -> None:
    """``{int proc_id; unsigned long proc_mem_usage;}`` on LP64: 16 bytes, memory at offset 8."""
    assert ctypes.sizeof(dcmi.ProcMemInfo) == 16 and dcmi.ProcMemInfo.proc_mem_usage.offset == 8


def test_a_library_without_the_process_query_leaves_the_watchdog_idle(fake_npus: Callable[..., Any],
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A libdcmi.so without dcmi_get_device_resource_info is named once at start, and the driver
    lists nothing (None), so the watchdog judges nothing."""
    backend = fake_npus("910b3x2")
    inventory = dcmi.discover(backend.dcmi, backend.sysfs)
    original = backend.dcmi.function

    def lacking(name: str) -> Any:
        if name == processes.CALL:
            raise dcmi.DcmiError(name, "", -1, f"{backend.dcmi.path} has no {name}: too old")
        return original(name)

    backend.dcmi.function = lacking  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        reader = processes.ProcessReader(backend.dcmi, inventory.npus)
        assert reader.read() is None and reader.read() is None
    assert [r.getMessage() for r in caplog.records if r.name == processes.__name__] == [
        "DCMI has no process query: the watchdog sees no NPU process; install an Ascend driver whose libdcmi.so "
        "has dcmi_get_device_resource_info"]


# --------------------------------------------------------------------------------------------
# The watchdog over the NPU driver


@pytest.fixture
def npu_rig(driver: AscendDriver, tmp_path: Path) -> PreparedRig:
    return PreparedRig(driver, tmp_path, device_type="npu", library="libvnpu.so",
                       config={"apiVersion": "ascend.project-hami.io/v1alpha1", "kind": "NpuConfig"})


def test_a_held_process_is_seen_with_its_memory_and_flagged_once_over_its_quota(npu_rig: PreparedRig) -> None:
    c = npu_rig.claim("npu-3-0", memory=4 * GiB)
    npu_rig.process(7001, c)
    npu_rig.process(7002, c)
    listed(f"3 7001 {GiB}\n3 7002 {2 * GiB}\n")
    wd = npu_rig.watchdog(memory_tolerance=64 * MiB)
    assert wd.maps
    assert wd.poll() == []
    assert npu_rig.metric('dra_device_processes{device="npu-3-0"') == 2
    assert npu_rig.metric('dra_device_processes_unheld{device="npu-3-0"') == 0
    assert wd.records.claims[c.uid].memory == {"npu-3-0": 4 * GiB}
    listed(f"3 7001 {GiB}\n3 7002 {3 * GiB + 640 * MiB}\n")  # 4.5 GiB + 2 x 64 MiB tolerance
    got = wd.poll()
    assert [(v.kind, v.device, v.pid, v.claim.uid if v.claim else None, v.amount) for v in got] == [
        ("over-quota", "npu-3-0", 7002, c.uid, 512 * MiB)]
    assert c.name in got[0].message and "npu-3-0" in got[0].message
    assert npu_rig.metric(f'dra_claim_memory_over_quota_bytes{{claim="{c.name}"') == 512 * MiB
    assert npu_rig.events.got == got
    assert wd.poll() == []  # once, while it lasts


def test_a_process_the_claim_does_not_hold_and_one_in_no_claim_are_unheld(npu_rig: PreparedRig) -> None:
    """In the claim's pod without libvnpu.so mapped (a static binary, raw ioctls to /dev/davinci*):
    unheld on its claim; a host process on another NPU: unheld, in no claim. The held neighbour:
    nothing."""
    c = npu_rig.claim("npu-0-0", memory=8 * GiB)
    npu_rig.process(7101, c)
    npu_rig.process(7102, c, held=False)
    npu_rig.process(7103, None)
    listed(f"0 7101 {GiB}\n0 7102 {GiB}\n6 7103 {GiB}\n")
    got = {v.pid: v for v in npu_rig.watchdog().poll()}
    assert set(got) == {7102, 7103} and {v.kind for v in got.values()} == {"unheld"}
    assert got[7102].claim is not None and got[7102].claim.uid == c.uid and got[7102].pod_uid == c.pod_uid
    assert "without the claim's hook loaded" in got[7102].message and got[7102].device == "npu-0-0"
    assert got[7103].claim is None and got[7103].device == "npu-6-0"
    assert npu_rig.metric('dra_device_processes_unheld{device="npu-0-0"') == 1
    assert npu_rig.metric('dra_device_processes_unheld{device="npu-6-0"') == 1


def test_hostile_lines_lose_nothing_and_crash_nothing(npu_rig: PreparedRig, capfd: pytest.CaptureFixture[str],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Between good lines: memory negative or past 64 bits, a PID past int, a word, an extra field,
    a missing one, a line of 300 digits (malformed: skipped by the stub, one message each a poll);
    PID 0 and a negative PID (the struct holds them: passed on, left out by the driver with one
    warning each); a phy ID DCMI does not have; and a held process claiming 2^64-1 bytes, which is
    over its quota by that much, not a crash."""
    c = npu_rig.claim("npu-1-0", memory=4 * GiB)
    for pid in (7201, 7202, 7203):
        npu_rig.process(pid, c)
    listed("\n".join([
        f"1 7201 {GiB}", "1 7299 -5", f"1 7299 {1 << 64}", f"1 {1 << 31} 5", "1 seven 5", "1 7299 5 9", "1 7299",
        "1" + "0" * 300, "1 0 4096", "1 -7297 4096", f"1 {-(1 << 31)} 4096", "42 7298 4096", f"1 7203 {U64_MAX}",
        f"1 7202 {GiB}", ""]))
    wd = npu_rig.watchdog()
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        got = [(v.kind, v.pid, v.amount) for v in wd.poll()]
        assert wd.poll() == []
    assert got == [("over-quota", 7203, pytest.approx(U64_MAX + 2 * GiB - 4 * GiB - 3 * 64 * MiB))]
    assert seen(npu_rig.driver) == [("npu-1-0", 7201, GiB), ("npu-1-0", 7202, GiB), ("npu-1-0", 7203, U64_MAX)]
    assert npu_rig.metric('dra_device_processes{device="npu-1-0"') == 3
    malformed = [line for line in capfd.readouterr().err.splitlines() if ENV in line]
    assert len(malformed) == 3 * 7 and {line.split(" line ")[1].split(":")[0] for line in malformed} == {
        str(n) for n in range(2, 9)}  # three polls, seven lines each, one message a line a poll
    assert [(r.getMessage(), r.__dict__["pid"]) for r in caplog.records if r.name == processes.__name__] == [
        ("DCMI lists PID 0, which is no process: left out", 0),
        ("DCMI lists a negative PID, which is no process: left out", -7297)]


# --------------------------------------------------------------------------------------------
# The daemon


@pytest.mark.cluster
def test_the_daemon_taints_an_npu_with_a_process_in_no_claim_until_it_exits(
        cluster: ControlPlane, api_client: client.ApiClient, stub_dcmi: Path) -> None:
    """`dra run ascend --fake 910b3x8 --watchdog taint`: the NPU's watchdog runs in the daemon
    (the stub's line names the NPU by its phy ID, 3: npu-3-0)."""
    assert_watchdog_taints_until_exit(cluster, api_client, "ascend", DRIVER,
                                      ["--fake", "910b3x8", "--set", "health=off"], ENV, "npu-3-0", 3,
                                      other="npu-2-0")
