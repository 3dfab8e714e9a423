"""GPU health: NVML XID events and recovery actions injected through the stub NVML."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kube_helpers import wait_for

from drivers.hami_core_gpu import xids
from drivers.hami_core_gpu.health import TAINT_LOST, TAINT_RECOVERY, TAINT_XID, HealthMonitor


class Events:
    """The stub's event file: a line per injected event."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")

    def __call__(self, line: str) -> None:
        with self.path.open("a") as f:
            f.write(line + "\n")


@pytest.fixture
def watched(fake_node, tmp_path: Path) -> Iterator[Callable[..., tuple[HealthMonitor, Events, list[str], threading.Event]]]:
    monitors: list[HealthMonitor] = []

    def start(spec: str = "h200x2") -> tuple[HealthMonitor, Events, list[str], threading.Event]:
        backend = fake_node(spec)
        events = Events(tmp_path / "nvml-events")
        os.environ["HOOKCORE_STUB_NVML_EVENTS"] = str(events.path)
        changed = threading.Event()
        uuids = [g.uuid for g in backend.node.gpus]
        mon = HealthMonitor(uuids, changed.set, probe_interval=0.05, settle=0.2)
        monitors.append(mon)
        mon.start()
        wait_for(lambda: all(h is True for _, h, _ in mon.snapshot()), timeout=5, interval=0.01, what="all GPUs monitored and healthy")
        changed.clear()
        return mon, events, uuids, changed

    yield start
    for m in monitors:
        m.stop()


def health_of(mon: HealthMonitor, uuid: str) -> tuple[bool | None, str]:
    return next((h, m) for u, h, m in mon.snapshot() if u == uuid)


def test_a_fatal_xid_taints_until_nvml_reports_no_recovery_action(watched) -> None:
    mon, inject, (gpu0, gpu1), changed = watched()
    inject(f"xid {gpu0} 48 1")  # double-bit ECC; NVML says: reset the GPU
    # The XID taint comes with the event, the recovery action's with the next probe after it.
    wait_for(lambda: TAINT_RECOVERY in {t.key for t in mon.taints().get(gpu0, ())}, timeout=5, interval=0.01,
             what="the XID and recovery-action taints")
    assert changed.is_set()
    taints = {t.key: t for t in mon.taints()[gpu0]}
    assert taints[TAINT_XID].value == "48" and taints[TAINT_XID].effect == "NoSchedule"
    assert taints[TAINT_RECOVERY].value == "gpu-reset"
    healthy, message = health_of(mon, gpu0)
    assert healthy is False and "XID 48: double-bit ECC error" in message
    assert health_of(mon, gpu1)[0] is True and gpu1 not in mon.taints()
    probed = mon.probes.count
    assert mon.probes.wait(probed + 3)  # still needs its reset: the taint stays across probes
    assert gpu0 in mon.taints()
    changed.clear()
    inject(f"reset {gpu0}")
    wait_for(lambda: gpu0 not in mon.taints(), timeout=5, interval=0.01, what="recovery after the reset")
    assert changed.is_set() and health_of(mon, gpu0) == (True, "")


def test_application_xids_leave_the_gpu_healthy(watched) -> None:
    mon, inject, (gpu0, _), changed = watched()
    seen = mon.xids.count
    for xid in (13, 31, 43, 45, 94):
        assert xids.classify(xid)[1] is xids.Action.IGNORE
        inject(f"xid {gpu0} {xid}")
    assert mon.xids.wait(seen + 5)  # all five consumed: "no taint" below is about them
    assert mon.taints() == {} and not changed.is_set()


def test_unknown_xids_taint(watched) -> None:
    mon, inject, (_, gpu1), _ = watched()
    inject(f"xid {gpu1} 999")
    wait_for(lambda: gpu1 in mon.taints(), timeout=5, interval=0.01, what="taint for an unknown XID")
    assert health_of(mon, gpu1)[1] == "XID 999: XID 999 (not in the driver's table)"


def test_a_gpu_off_the_bus_is_lost_until_it_answers_again(watched) -> None:
    mon, inject, (gpu0, _), _ = watched()
    inject(f"lost {gpu0}")
    wait_for(lambda: gpu0 in mon.taints(), timeout=5, interval=0.01, what="the gpu-lost taint")
    assert [t.key for t in mon.taints()[gpu0]] == [TAINT_LOST]
    assert health_of(mon, gpu0)[0] is False
    inject(f"reset {gpu0}")
    wait_for(lambda: gpu0 not in mon.taints(), timeout=5, interval=0.01, what="recovery of the lost GPU")


def test_a_recovery_action_without_an_xid_takes_the_gpu_out(watched) -> None:
    mon, inject, (gpu0, _), _ = watched()
    inject(f"action {gpu0} 2")
    wait_for(lambda: gpu0 in mon.taints(), timeout=5, interval=0.01, what="the recovery-action taint")
    assert [(t.key, t.value) for t in mon.taints()[gpu0]] == [(TAINT_RECOVERY, "node-reboot")]
    inject(f"action {gpu0} 0")
    wait_for(lambda: gpu0 not in mon.taints(), timeout=5, interval=0.01, what="the taint lifted")


def test_gpus_without_xid_events_are_unknown_not_tainted(fake_node, tmp_path: Path) -> None:
    backend = fake_node("h200x2")
    os.environ["HOOKCORE_STUB_NVML_FAIL"] = f"nvmlDeviceRegisterEvents@{backend.node.gpus[0].uuid}=3"
    mon = HealthMonitor([g.uuid for g in backend.node.gpus], lambda: None, probe_interval=0.05)
    mon.start()
    try:
        wait_for(lambda: health_of(mon, backend.node.gpus[1].uuid)[0] is True, timeout=5, interval=0.01, what="the other GPU healthy")
        healthy, message = health_of(mon, backend.node.gpus[0].uuid)
        assert healthy is None and "NVML cannot report XID events" in message
        assert mon.taints() == {}
    finally:
        mon.stop()


def test_the_xid_table_is_data_covering_the_known_fatal_codes() -> None:
    fatal = {c for c, (_, a) in xids.XID_TABLE.items() if a is xids.Action.TAINT}
    assert {48, 79, 95, 119, 120} <= fatal
    assert all(isinstance(m, str) and m for m, _ in xids.XID_TABLE.values())
