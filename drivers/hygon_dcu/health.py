"""DCU health from ROCm SMI, polled: uncorrectable memory errors and lost devices become taints
and health reports.

One thread asks every DCU each interval (ROCm SMI's event notification needs the KFD SMI event
file open per device and a reader thread; a poll is simpler and costs a few sysfs reads):

- ``rsmi_dev_memory_usage_get`` answers: the device is there. It fails with FILE_ERROR or
  NOT_FOUND (its sysfs node is gone, as when it fell off the bus): taint
  ``hygon-dcu.project-hami.io/dcu-lost``, unhealthy;
- ``rsmi_dev_ecc_count_get`` of the memory (UMC) block: uncorrectable errors since the driver
  loaded make the device unhealthy, taint ``hygon-dcu.project-hami.io/health=uncorrectable-ecc``
  (memory that corrupts data silently must not take new claims; the count only goes back to 0
  with a driver reload or reboot, so the taint is not cleared by a restart of this daemon);
  correctable errors are reported in the health message only; a device that does not report
  ECC (NOT_SUPPORTED) is judged by the first check alone;
- any other failed query: Unknown (not tainted: nothing is known to be wrong), with the reason.

Taints use NoSchedule: running pods stay, new claims are not allocated there. On every change
`on_change` is called; `taints()` and `snapshot()` give the current state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import dra
from dra import Taint
from drivers.hygon_dcu.devices import DRIVER_NAME
from drivers.hygon_dcu.rsmi import FILE_ERROR, NOT_FOUND, Dcu, Rsmi, RsmiError

TAINT_HEALTH = f"{DRIVER_NAME}/health"
TAINT_LOST = f"{DRIVER_NAME}/dcu-lost"


@dataclasses.dataclass
class DcuHealth:
    uuid: str
    ok: bool | None = None  # None = not known (a query failed)
    lost: bool = False
    uncorrectable: int = 0
    correctable: int = 0
    message: str = "not polled yet"

    @property
    def healthy(self) -> bool | None:
        if self.lost or self.uncorrectable:
            return False
        return self.ok

    def taints(self) -> tuple[Taint, ...]:
        if self.lost:
            return (Taint(TAINT_LOST, "", "NoSchedule"),)
        if self.uncorrectable:
            return (Taint(TAINT_HEALTH, "uncorrectable-ecc", "NoSchedule"),)
        return ()

    def state(self) -> tuple[object, ...]:
        return (self.ok, self.lost, self.uncorrectable, self.correctable)


class HealthMonitor(dra.PolledHealth[Dcu, DcuHealth]):
    """Polls ROCm SMI for `dcus`; `on_change()` runs after every change of any DCU's state."""

    noun = "DCU"
    thread_name = "hygon-dcu-health"

    def __init__(self, smi: Rsmi, dcus: Sequence[Dcu], on_change: Callable[[], None], interval: float = 5.0) -> None:
        self._smi = smi
        super().__init__(dcus, on_change, interval)

    def unpolled(self, dcu: Dcu) -> DcuHealth:
        return DcuHealth(dcu.uuid)

    def log_fields(self, dcu: Dcu) -> dict[str, object]:
        return {"index": dcu.index}

    def ask(self, dcu: Dcu) -> DcuHealth:
        try:
            self._smi.memory_used(dcu.index, dcu.target)
            ecc = self._smi.ecc(dcu.index, dcu.target)
        except RsmiError as exc:
            if exc.code in (FILE_ERROR, NOT_FOUND):
                return DcuHealth(dcu.uuid, lost=True, message=f"DCU gone: {exc}")
            return DcuHealth(dcu.uuid, message=f"health unknown: {exc}")
        if ecc is None:
            return DcuHealth(dcu.uuid, ok=True, message="ok (no ECC reporting)")
        ue, ce = ecc
        if ue:
            return DcuHealth(dcu.uuid, ok=True, uncorrectable=ue, correctable=ce,
                             message=f"{ue} uncorrectable ECC error(s) in VRAM ({ce} correctable)")
        return DcuHealth(dcu.uuid, ok=True, correctable=ce, message=f"ok, {ce} correctable ECC error(s)" if ce else "ok")

