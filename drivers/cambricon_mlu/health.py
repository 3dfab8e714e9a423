"""MLU health from CNDev, polled: problems become taints and health reports.

One thread asks ``cndevGetCardHealthState`` of every MLU each interval (what Cambricon's device
plugin's health check asks). CNDev answers a health flag, the device's state (good or in problem)
and the MLU driver's state:

- device good and driver running: healthy;
- device in problem: unhealthy, taint ``cambricon-mlu.project-hami.io/health=in-problem``;
- driver not running (booting, resetting, a boot or reset error, unknown): unhealthy, taint
  ``cambricon-mlu.project-hami.io/health=driver-<state>`` (e.g. ``driver-reset-error``);
- a failed query: Unknown (not tainted: nothing is known to be wrong), with the reason.

Taints use NoSchedule: running pods stay, new claims are not allocated there. On every change
`on_change` is called; `taints()` and `snapshot()` give the current state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import dra
from dra import Taint
from drivers.cambricon_mlu.cndev import DRIVER_RUNNING, Cndev, CndevError, Mlu
from drivers.cambricon_mlu.devices import DRIVER_NAME

TAINT_HEALTH = f"{DRIVER_NAME}/health"
DRIVER_STATES = {0: "early-inited", 1: "bring-up", 2: "booting", 3: "late-init", 4: "running", 5: "boot-error",
                 6: "reset", 7: "reset-error", 8: "unknown"}


@dataclasses.dataclass(frozen=True)
class MluHealth:
    uuid: str
    problem: str | None = None  # the taint value; None: healthy (or not known)
    known: bool = False
    message: str = "not polled yet"

    @property
    def healthy(self) -> bool | None:
        return None if not self.known else self.problem is None

    def taints(self) -> tuple[Taint, ...]:
        return (Taint(TAINT_HEALTH, self.problem, "NoSchedule"),) if self.problem else ()

    def state(self) -> tuple[object, ...]:
        return (self.problem, self.known, self.message)  # every field but the uuid: any difference is a change


class HealthMonitor(dra.PolledHealth[Mlu, MluHealth]):
    """Polls CNDev health for `mlus`; `on_change()` runs after every change of any MLU's state."""

    noun = "MLU"
    thread_name = "cambricon-mlu-health"

    def __init__(self, cndev: Cndev, mlus: Sequence[Mlu], on_change: Callable[[], None], interval: float = 5.0) -> None:
        self._cndev = cndev
        super().__init__(mlus, on_change, interval)

    def unpolled(self, mlu: Mlu) -> MluHealth:
        return MluHealth(mlu.uuid)

    def log_fields(self, mlu: Mlu) -> dict[str, object]:
        return {"index": mlu.index}

    def ask(self, mlu: Mlu) -> MluHealth:
        try:
            h = self._cndev.health(mlu.index, mlu.target)
        except CndevError as exc:
            return MluHealth(mlu.uuid, message=f"health unknown: {exc}")
        driver = DRIVER_STATES.get(int(h.driverState), f"state-{int(h.driverState)}")
        if int(h.deviceState) != 1:
            return MluHealth(mlu.uuid, "in-problem", True, f"the MLU is in problem (CNDev health {int(h.health)},"
                                                            f" driver {driver})")
        if int(h.driverState) != DRIVER_RUNNING:
            return MluHealth(mlu.uuid, f"driver-{driver}", True, f"the MLU driver is not running: {driver}")
        return MluHealth(mlu.uuid, None, True, "")

