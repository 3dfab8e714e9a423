"""NPU health from DCMI, polled: alarms become taints and health reports.

One thread asks ``dcmi_get_device_health`` for every NPU each interval (DCMI's fault-event
subscription needs a callback thread inside the library; a poll is simpler, survives a
restarted driver and costs one ioctl per NPU per interval). DCMI's answer:

- ``0`` (normal) and ``1`` (minor alarm): healthy; a minor alarm is reported in the health
  message with its error codes, the chip is not tainted (Huawei's own device plugin keeps
  scheduling on minor alarms too);
- ``2`` (major alarm), ``3`` (critical alarm): unhealthy, taint ``ascend.project-hami.io/health``
  with value ``major``/``critical``; the message carries the chip's error codes
  (``dcmi_get_device_errorcode_v2``, hex as ``npu-smi`` prints them);
- ``0xFFFFFFFF`` or a failed query with DEVICE_NOT_EXIST: the chip is gone, taint
  ``ascend.project-hami.io/npu-lost``;
- any other failed query: Unknown (not tainted: nothing is known to be wrong), with the reason.

Taints use NoSchedule: running pods stay, new claims are not allocated there. On every change
`on_change` is called; `taints()` and `snapshot()` give the current state.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence

from dra import Processed, Taint
from drivers.ascend.dcmi import HEALTH_GONE, Dcmi, DcmiError, Npu
from drivers.ascend.devices import DRIVER_NAME

log = logging.getLogger(__name__)

TAINT_HEALTH = f"{DRIVER_NAME}/health"
TAINT_LOST = f"{DRIVER_NAME}/npu-lost"
DEVICE_NOT_EXIST = -8008
LEVELS = {0: "ok", 1: "minor", 2: "major", 3: "critical"}


@dataclasses.dataclass
class NpuHealth:
    uuid: str
    level: int | None = None  # DCMI health; None = not known (query failed)
    lost: bool = False
    codes: tuple[int, ...] = ()
    message: str = "not polled yet"

    @property
    def healthy(self) -> bool | None:
        if self.lost or (self.level is not None and self.level >= 2):
            return False
        return None if self.level is None else True

    def taints(self) -> tuple[Taint, ...]:
        if self.lost:
            return (Taint(TAINT_LOST, "", "NoSchedule"),)
        if self.level is not None and self.level >= 2:
            return (Taint(TAINT_HEALTH, LEVELS.get(self.level, str(self.level)), "NoSchedule"),)
        return ()

    def state(self) -> tuple[object, ...]:
        return (self.level, self.lost, self.codes)


class HealthMonitor:
    """Polls DCMI health for `npus`; `on_change()` runs after every change of any NPU's state."""

    def __init__(self, dcmi: Dcmi, npus: Sequence[Npu], on_change: Callable[[], None], interval: float = 5.0) -> None:
        self._dcmi = dcmi
        self._npus = list(npus)
        self._on_change = on_change
        self._interval = interval
        self._lock = threading.Lock()
        self._state = {n.uuid: NpuHealth(n.uuid) for n in npus}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = Processed()  # polls done (tests wait on one after a change before asserting none)

    def start(self) -> None:
        self.poll()  # the first answer is there before the first publish
        self._thread = threading.Thread(target=self._run, name="ascend-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.poll()
            except Exception:  # never let the monitor die silently; the next poll retries
                log.exception("health poll failed")

    def poll(self) -> bool:
        """Ask every NPU once; True (and `on_change()`) when anything changed."""
        changed = False
        for npu in self._npus:
            new = self._ask(npu)
            with self._lock:
                old = self._state[npu.uuid]
                if new.state() != old.state():
                    changed = True
                    log.warning("NPU health changed", extra={
                        "uuid": npu.uuid, "logic_id": npu.logic_id, "healthy": new.healthy, "health": new.message})
                self._state[npu.uuid] = new
        if changed:
            self._on_change()
        self.polls.add()
        return changed

    def _ask(self, npu: Npu) -> NpuHealth:
        try:
            level, codes = self._dcmi.health(npu.card, npu.chip, target=npu.target)
        except DcmiError as exc:
            if exc.code == DEVICE_NOT_EXIST:
                return NpuHealth(npu.uuid, lost=True, message=f"NPU gone: {exc}")
            return NpuHealth(npu.uuid, message=f"health unknown: {exc}")
        if level == HEALTH_GONE:
            return NpuHealth(npu.uuid, lost=True, message="DCMI reports the NPU does not exist (health 0xFFFFFFFF)")
        text = LEVELS.get(level, f"level {level}")
        message = text if level == 0 else f"{text} alarm" + (f", error codes {', '.join(f'0x{c:x}' for c in codes)}" if codes else "")
        return NpuHealth(npu.uuid, level=level, codes=codes, message=message)

    def taints(self) -> dict[str, tuple[Taint, ...]]:
        with self._lock:
            return {u: h.taints() for u, h in self._state.items() if h.taints()}

    def snapshot(self) -> list[tuple[str, bool | None, str]]:
        with self._lock:
            return [(u, h.healthy, h.message) for u, h in self._state.items()]
