"""The MLU's processes through CNDev, and the framework's watchdog judging them.

The real driver on fake MLUs (`--fake mlu370-x8x8`: its ctypes path against the stub libcndev.so),
the stub's process list written by the test (HOOKCORE_STUB_CNDEV_PROCESSES, re-read at every
query, lines `<mlu index> <pid> <KiB>`), claims prepared by the driver itself (their sMLU
instances, the daemon's checkpoint record: no hook), and the processes' /proc entries made up in a
`FakeProc` tree (a pod's cgroup), so no root is needed. The daemon test runs `dra run
cambricon-mlu --watchdog taint` against the real control plane.
"""

from __future__ import annotations

import ctypes
import logging
import os
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from driver_helpers import assert_watchdog_taints_until_exit, fake_drivers
from kubernetes import client

from dra import ClaimRef
from dra_dev.cluster.controlplane import ControlPlane
from drivers.cambricon_mlu import cndev, processes
from drivers.cambricon_mlu.config import API_VERSION, MluConfig
from drivers.cambricon_mlu.driver import CambriconMluDriver
from tests.watchdog.watchdog_rig import PreparedRig, pod_cgroup

DRIVER = "cambricon-mlu.project-hami.io"
ENV = "HOOKCORE_STUB_CNDEV_PROCESSES"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
U32_MAX, U64_MAX = (1 << 32) - 1, (1 << 64) - 1


@pytest.fixture
def driver(stub_cndev: Path, clean_stub_env: None, tmp_path: Path) -> Iterator[CambriconMluDriver]:
    """A driver on 8 fake MLU370-X8 (index = position) with an empty process list."""
    (tmp_path / "cndev-processes").write_text("")
    os.environ[ENV] = str(tmp_path / "cndev-processes")
    for make in fake_drivers(CambriconMluDriver, "mlu370-x8x8"):
        yield make(settings={"health": "off"})


def listed(text: str) -> None:
    """The stub lists these processes from now on (`<mlu index> <pid> <KiB>` lines)."""
    Path(os.environ[ENV]).write_text(text)


def seen(driver: CambriconMluDriver) -> list[tuple[str, int, int]]:
    return sorted((p.device, p.pid, p.memory) for p in driver.processes() or [])


def rooms(driver: CambriconMluDriver, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """From now on, every process query as (the MLU's index, the room passed), in order."""
    library = driver.library
    assert library is not None
    asked: list[tuple[int, int]] = []
    call = library.call

    def counting(name: str, *args: Any, target: str = "") -> None:
        if name == processes.CALL:
            asked.append((args[2] - 0x100, args[0]._obj.value))  # the stub's handles: index + 0x100
        call(name, *args, target=target)

    monkeypatch.setattr(library, "call", counting)
    return asked


# --------------------------------------------------------------------------------------------
# The reader


def test_processes_are_read_per_mlu_with_their_memory_in_bytes(driver: CambriconMluDriver) -> None:
    """A process on two MLUs is on each with its memory there (KiB made bytes); the UUID is the
    MLU's; no utilization; a PID listed twice on an MLU is one process, with the larger memory
    (neither summed nor the last taken)."""
    listed(f"0 4001 {GiB // KiB}\n2 4001 {3 * GiB // KiB}\n5 4002 {2 * GiB // KiB}\n5 4002 {GiB // KiB}\n5 4003 1\n")
    got = sorted((p.device, p.uuid, p.pid, p.memory, p.utilization) for p in driver.processes() or [])
    uuid = {name: mlu.uuid for name, mlu in driver.by_name.items()}
    assert got == [("mlu-0", uuid["mlu-0"], 4001, GiB, None),
                   ("mlu-2", uuid["mlu-2"], 4001, 3 * GiB, None),
                   ("mlu-5", uuid["mlu-5"], 4002, 2 * GiB, None),
                   ("mlu-5", uuid["mlu-5"], 4003, KiB, None)]
    listed("")
    assert driver.processes() == []


def test_pid_0_and_pids_past_the_kernels_maximum_are_left_out_with_one_warning_each(
        driver: CambriconMluDriver, caplog: pytest.LogCaptureFixture) -> None:
    """The field is unsigned: a negative PID arrives as one past the kernel's limit (2^22)."""
    limit = processes.PID_MAX
    listed(f"1 0 4\n1 {U32_MAX} 4\n1 {limit + 1} 4\n1 {limit} 4\n1 4101 4\n1 0 8\n")
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        for _ in range(3):
            assert seen(driver) == [("mlu-1", 4101, 4 * KiB), ("mlu-1", limit, 4 * KiB)]
    assert [(r.getMessage(), r.__dict__["pid"]) for r in caplog.records] == [
        ("CNDev lists PID 0, which is no process: left out", 0),
        ("CNDev lists a PID past the kernel's maximum, which is no process: left out", U32_MAX)]


def test_an_mlu_that_stops_answering_is_skipped_with_one_warning(driver: CambriconMluDriver,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    lost = driver.by_name["mlu-1"]
    listed(f"0 4001 {MiB}\n1 4001 {MiB}\n1 4002 {MiB}\n")
    os.environ["HOOKCORE_STUB_CNDEV_FAIL"] = f"cndevGetProcessInfo@{lost.uuid}=7"
    with caplog.at_level(logging.INFO, logger=processes.__name__):
        for _ in range(3):
            assert seen(driver) == [("mlu-0", 4001, GiB)]
        del os.environ["HOOKCORE_STUB_CNDEV_FAIL"]
        assert seen(driver) == [("mlu-0", 4001, GiB), ("mlu-1", 4001, GiB), ("mlu-1", 4002, GiB)]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(r.getMessage(), r.__dict__["device"]) for r in warned] == [
        ("MLU's processes unreadable; skipped until it answers; check `cnmon` on the node", "mlu-1")]
    assert "CNDEV_ERROR_UNKNOWN" in warned[0].__dict__["error"] and lost.uuid in warned[0].__dict__["error"]
    assert [r.__dict__["device"] for r in caplog.records if "readable again" in r.getMessage()] == ["mlu-1"]


def test_a_list_past_the_room_is_asked_again_once_with_room_for_its_count(
        driver: CambriconMluDriver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """100 processes on mlu-3: the first poll asks it with the first room (64), gets
    INSUFFICIENT_SPACE and the count, asks once more with room for the count and some (at least
    twice the room); the next poll asks once, with room for the count it last had. Nothing is
    warned; the other MLUs are asked once each a poll."""
    listed("".join(f"3 {5000 + i} {i + 1}\n" for i in range(100)) + "4 6000 1\n")
    asked = rooms(driver, monkeypatch)
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        for _ in range(2):
            got = seen(driver)
            assert [p for d, p, _ in got if d == "mlu-3"] == list(range(5000, 5100))
            assert [(d, p) for d, p, _ in got if d != "mlu-3"] == [("mlu-4", 6000)]
    grown, kept = max(100 + processes.SLACK, 2 * processes.ROOM), 100 + processes.SLACK
    assert [r for i, r in asked if i == 3] == [processes.ROOM, grown, kept]
    assert [r for i, r in asked if i == 4] == [processes.ROOM] * 2
    assert caplog.records == []


def test_a_list_past_the_most_room_is_not_read_and_warned_once(
        driver: CambriconMluDriver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """More processes on mlu-3 than the reader ever gives room for (its bound made 80 here): grown
    once to the bound, still INSUFFICIENT_SPACE (the stub has written the first 80 entries: none
    of them is read, CNDev does not say what it writes then); warned once; the other MLUs read;
    no query is ever given more room than the bound."""
    monkeypatch.setattr(processes, "ROOM", 16)
    monkeypatch.setattr(processes, "MAX_PROCESSES", 80)
    listed("".join(f"3 {5000 + i} 1\n" for i in range(100)) + "4 6000 1\n")
    asked = rooms(driver, monkeypatch)
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        for _ in range(3):
            assert seen(driver) == [("mlu-4", 6000, KiB)]
    assert [r for i, r in asked if i == 3] == [16, 80, 80, 80]
    assert [(r.getMessage().split(":")[0], r.__dict__["count"], r.__dict__["room"]) for r in caplog.records] == [
        ("CNDev's process list of an MLU does not fit the most room the reader gives (too many processes, or a list "
         "that grew between two calls)", 100, 80)]
    listed("".join(f"3 {5000 + i} 1\n" for i in range(70)))
    assert len(seen(driver)) == 70  # fits the room it was last given: read again


@pytest.mark.parametrize("count", [1, processes.ROOM + 1, U32_MAX])
def test_a_count_is_read_no_further_than_it_says_nor_past_the_room(driver: CambriconMluDriver, count: int,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A library whose count is not what it wrote: a smaller one is read no further (the entry
    after it is not taken); one past the entries it was given (with success) has only the array
    read (its zeroed rest is PID 0, left out), one warning; no crash, the other MLUs still read."""
    library = driver.library
    assert library is not None
    listed(f"0 4001 {MiB}\n6 4006 {MiB}\n6 4007 {MiB}\n")
    call = library.call

    def lying(name: str, *args: Any, target: str = "") -> None:
        call(name, *args, target=target)
        if name == processes.CALL and args[2] == 0x100 + 6:
            args[0]._obj.value = count  # byref(count): what the library says it has

    monkeypatch.setattr(library, "call", lying)
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        got = seen(driver)
        assert seen(driver) == got
    if count == 1:
        assert got == [("mlu-0", 4001, GiB), ("mlu-6", 4006, GiB)] and caplog.records == []
        return
    assert got == [("mlu-0", 4001, GiB), ("mlu-6", 4006, GiB), ("mlu-6", 4007, GiB)]
    assert [r.getMessage() for r in caplog.records] == [
        "CNDev counts more processes on an MLU than it was given room for, yet answers success; the first are checked",
        "CNDev lists PID 0, which is no process: left out"]
    assert caplog.records[0].__dict__["room"] <= processes.MAX_PROCESSES


def test_the_struct_is_laid_out_as_cndev_declares_it() -> None:
    """``{int32 version; uint32 pid; uint64 physicalMemoryUsed; uint64 virtualMemoryUsed;}``: 24 bytes."""
    info = cndev.ProcessInfo
    assert ctypes.sizeof(info) == 24
    assert [getattr(info, f).offset for f in ("version", "pid", "physicalMemoryUsed", "virtualMemoryUsed")] == [
        0, 4, 8, 16]


def test_a_library_without_the_process_query_leaves_the_watchdog_idle(driver: CambriconMluDriver,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A libcndev.so without cndevGetProcessInfo is named once at start, and the reader lists
    nothing (None), so the watchdog judges nothing."""
    library = driver.library
    assert library is not None and driver.inventory is not None
    original = library.function

    def lacking(name: str) -> Any:
        if name == processes.CALL:
            raise cndev.CndevError(name, "", -1, f"{library.path} has no {name}: too old")
        return original(name)

    library.function = lacking  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        reader = processes.ProcessReader(library, driver.inventory.mlus)
        assert reader.read() is None and reader.read() is None
    assert [r.getMessage() for r in caplog.records if r.name == processes.__name__] == [
        "CNDev has no process query: the watchdog sees no MLU process; install a Cambricon driver whose libcndev.so "
        "has cndevGetProcessInfo"]


# --------------------------------------------------------------------------------------------
# The watchdog over the MLU driver


@pytest.fixture
def mlu_rig(driver: CambriconMluDriver, tmp_path: Path) -> PreparedRig:
    return PreparedRig(driver, tmp_path, device_type="mlu", library="",
                       config={"apiVersion": API_VERSION, "kind": "MluConfig"})


def test_a_claims_process_is_held_by_its_mlu_and_every_other_one_there_is_unheld(mlu_rig: PreparedRig) -> None:
    """A claim's process (its container carries the claim's marker, the daemon's file): held by its
    sMLU instance, counted in the claim, and judged against the claim's memory once CNDev lists it
    past it; another pod's process on the same MLU (given the device another way) and a host
    process on another MLU: unheld, in no claim."""
    c = mlu_rig.claim("mlu-3", memory=4 * GiB)
    assert c.marked and mlu_rig.driver.enforcement(ClaimRef(c.uid, "team-a", c.name), []) is None
    mlu_rig.process(7001, c)
    mlu_rig.proc.process(7003, cgroup=pod_cgroup(str(uuidlib.uuid4())))
    mlu_rig.proc.process(7002)
    listed(f"3 7001 {2 * GiB // KiB}\n3 7003 {GiB // KiB}\n6 7002 {GiB // KiB}\n")
    wd = mlu_rig.watchdog()
    got = wd.poll()
    assert sorted((v.kind, v.device, v.pid, v.claim) for v in got) == [
        ("unheld", "mlu-3", 7003, None), ("unheld", "mlu-6", 7002, None)]
    assert mlu_rig.events.got == got and wd.poll() == []
    assert mlu_rig.metric('dra_device_processes{device="mlu-3"') == 2
    assert mlu_rig.metric('dra_device_processes_unheld{device="mlu-3"') == 1
    assert mlu_rig.metric('dra_device_processes_unheld{device="mlu-6"') == 1
    listed(f"3 7001 {8 * GiB // KiB}\n3 7003 {GiB // KiB}\n6 7002 {GiB // KiB}\n")
    [over] = wd.poll()
    assert (over.kind, over.device, over.pid, over.claim and over.claim.uid) == ("over-quota", "mlu-3", 7001, c.uid)


def test_the_claims_watchdog_action_acts_on_its_verdicts(mlu_rig: PreparedRig) -> None:
    """MluConfig.watchdogAction, accepted by the driver's prepare and copied into the daemon's
    record, is the action on the claim's verdicts (here taint: no process is signalled)."""
    c = mlu_rig.claim("mlu-2", memory=GiB, config=MluConfig(watchdog_action="taint"),
                      recorded={**mlu_rig.config, "watchdogAction": "taint"})
    mlu_rig.process(7101, c)
    listed(f"2 7101 {4 * GiB // KiB}\n")
    [verdict] = mlu_rig.watchdog().poll()
    assert (verdict.kind, verdict.pid, verdict.action) == ("over-quota", 7101, "taint")


def test_hostile_lines_lose_nothing_and_crash_nothing(mlu_rig: PreparedRig, capfd: pytest.CaptureFixture[str],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Between good lines: memory negative or past 64 bits, a PID past 32 bits or negative, a word,
    an extra field, a missing one, a line of 300 digits (malformed: skipped by the stub, one
    message each a poll); PID 0 and PID 2^32-1 (the struct holds them: passed on, left out by the
    driver with one warning each); an index CNDev does not have; and a host process claiming
    2^64-1 KiB, which is unheld with that much, not a crash."""
    for pid in (7201, 7202, 7203):
        mlu_rig.proc.process(pid)
    listed("\n".join([
        "1 7201 1024", "1 7299 -5", f"1 7299 {1 << 64}", f"1 {1 << 32} 5", "1 -7299 5", "1 seven 5", "1 7299 5 9",
        "1 7299", "1" + "0" * 300, "1 0 4096", f"1 {U32_MAX} 4096", "42 7298 4096", f"1 7203 {U64_MAX}", "1 7202 1024",
        ""]))
    wd = mlu_rig.watchdog()
    with caplog.at_level(logging.WARNING, logger=processes.__name__):
        got = sorted((v.kind, v.pid, v.amount) for v in wd.poll())
        assert wd.poll() == []
    assert got == [("unheld", 7201, MiB), ("unheld", 7202, MiB), ("unheld", 7203, float(U64_MAX * KiB))]
    assert seen(mlu_rig.driver) == [("mlu-1", 7201, MiB), ("mlu-1", 7202, MiB), ("mlu-1", 7203, U64_MAX * KiB)]
    assert mlu_rig.metric('dra_device_processes{device="mlu-1"') == 3
    malformed = [line for line in capfd.readouterr().err.splitlines() if ENV in line]
    assert len(malformed) == 3 * 8 and {line.split(" line ")[1].split(":")[0] for line in malformed} == {
        str(n) for n in range(2, 10)}  # three polls, eight lines each, one message a line a poll
    assert [(r.getMessage(), r.__dict__["pid"]) for r in caplog.records if r.name == processes.__name__] == [
        ("CNDev lists PID 0, which is no process: left out", 0),
        ("CNDev lists a PID past the kernel's maximum, which is no process: left out", U32_MAX)]


# --------------------------------------------------------------------------------------------
# The daemon


@pytest.mark.cluster
def test_the_daemon_taints_an_mlu_with_a_process_in_no_claim_until_it_exits(
        cluster: ControlPlane, api_client: client.ApiClient, stub_cndev: Path) -> None:
    """`dra run cambricon-mlu --fake mlu370-x8x8 --watchdog taint`: the MLU's watchdog runs in the
    daemon (the stub's line names the MLU by its index, 3: mlu-3; mlu-2 stays untainted)."""
    assert_watchdog_taints_until_exit(cluster, api_client, "cambricon-mlu", DRIVER,
                                      ["--fake", "mlu370-x8x8", "--set", "health=off"], ENV, "mlu-3", 3)
