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
from collections.abc import Callable, Sequence

import dra
from dra import Taint
from drivers.ascend.dcmi import HEALTH_GONE, Dcmi, DcmiError, Npu
from drivers.ascend.devices import DRIVER_NAME

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


class HealthMonitor(dra.PolledHealth[Npu, NpuHealth]):
    """Polls DCMI health for `npus`; `on_change()` runs after every change of any NPU's state."""

    noun = "NPU"
    thread_name = "ascend-health"

    def __init__(self, dcmi: Dcmi, npus: Sequence[Npu], on_change: Callable[[], None], interval: float = 5.0) -> None:
        self._dcmi = dcmi
        super().__init__(npus, on_change, interval)

    def unpolled(self, npu: Npu) -> NpuHealth:
        return NpuHealth(npu.uuid)

    def log_fields(self, npu: Npu) -> dict[str, object]:
        return {"logic_id": npu.logic_id}

    def ask(self, npu: Npu) -> NpuHealth:
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

