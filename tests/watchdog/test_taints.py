"""Where a ``taint`` verdict goes: on the verdict's device, or, for a process on a partition the
driver does not publish (`DeviceProcess.taint_on`), on the published devices that share its
hardware; where none does, nowhere, and the outcome says so. A driver double lists the processes;
their /proc entries are made up in a `FakeProc` tree (no root)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from dra._runtime.watchdog.loop import Watchdog
from dra._runtime.watchdog.model import WatchdogSettings
from dra.driver import DeviceProcess, Taint
from tests.watchdog.watchdog_rig import Events, FakeProc, ListingDriver

GiB = 1 << 30
UNHELD = Taint("dev.example.com/watchdog", "unheld", "NoSchedule")


def watch(tmp_path: Path, procs: Sequence[DeviceProcess]) -> tuple[Watchdog, ListingDriver, list[int], CollectorRegistry]:
    """A watchdog with ``taint`` over `procs` (host processes 8201.. in no pod), counting republishes."""
    proc = FakeProc(tmp_path / "proc")
    for p in procs:
        proc.process(p.pid)
    driver, calls, registry = ListingDriver(procs), [0], CollectorRegistry()

    def republish() -> None:
        calls[0] += 1

    wd = Watchdog(driver, lambda: [], tmp_path / "state" / "hooks", Events(), registry,
                  WatchdogSettings(proc=tmp_path / "proc", action="taint"), on_taints=republish)
    return wd, driver, calls, registry


def actions(registry: CollectorRegistry, result: str) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("dra_watchdog_actions_total{") and 'action="taint"' in line and f'result="{result}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_published_devices_process_taints_that_device_alone(tmp_path: Path) -> None:
    wd, _, calls, _ = watch(tmp_path, [DeviceProcess("dev-0", "DEV-0", 8201, GiB)])
    [v] = wd.poll()
    assert v.taint_on is None and v.outcome.startswith("device dev-0 tainted dev.example.com/watchdog=unheld")
    assert (wd.taints("dev-0"), wd.taints("dev-1"), calls) == ((UNHELD,), (), [1])


def test_a_process_on_an_unpublished_partition_taints_the_devices_that_share_its_hardware(tmp_path: Path) -> None:
    """The partition itself is no device (a taint there would land on nothing); the devices the
    driver names get the taint, once each, and lose it when the process exits. The outcome names
    them (four, then a count: an Event's message is 1 KiB)."""
    siblings = tuple(f"dev-{i}" for i in range(6))
    wd, driver, calls, registry = watch(tmp_path, [DeviceProcess("part-x", "PART-X", 8201, GiB, taint_on=siblings)])
    [v] = wd.poll()
    assert (v.kind, v.device, v.taint_on) == ("unheld", "part-x", siblings)
    assert v.outcome == ("device part-x is not published; the 6 published devices on its hardware (dev-0, dev-1, "
                         "dev-2, dev-3 and 2 more) tainted dev.example.com/watchdog=unheld:NoSchedule until process "
                         "8201 exits")
    assert [wd.taints(d) for d in siblings] == [(UNHELD,)] * 6 and wd.taints("part-x") == ()
    assert calls == [1] and actions(registry, "done") == 1
    assert wd.poll() == [] and calls == [1]  # still there, no republish
    driver.procs = []  # the process exited
    wd.poll()
    assert [wd.taints(d) for d in siblings] == [()] * 6 and calls == [2]


def test_a_process_on_a_partition_that_shares_no_published_device_taints_nothing_and_says_so(tmp_path: Path) -> None:
    """Hostile to the operator's trust in the outcome: before `taint_on`, such a verdict said "device
    ... tainted" while no published device carried the taint."""
    wd, _, calls, registry = watch(tmp_path, [DeviceProcess("part-x", "PART-X", 8201, GiB, taint_on=())])
    [v] = wd.poll()
    assert v.outcome.startswith("not tainted: device part-x is not published and shares its hardware with no")
    assert wd.taints("part-x") == () and calls == [0]
    assert (actions(registry, "refused"), actions(registry, "done")) == (1, 0)
